#include "io/io_engine.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/logging.h"
#include "io/posix_io_engine.h"
#include "io/uring_io_engine.h"

namespace ciuic::io {

std::vector<Result<size_t>> IoEngine::SubmitAndWait(const std::vector<IoOp>& ops) {
  std::vector<Result<size_t>> results(ops.size());
  if (ops.empty())
    return results;
  std::vector<size_t> todo(ops.size());
  for (size_t i = 0; i < ops.size(); ++i)
    todo[i] = i;
  // A full engine queue answers kUnavailable instead of waiting; this caller may wait, so it
  // submits those ops again after a short pause, as a client would.
  for (int attempt = 0; !todo.empty(); ++attempt) {
    if (attempt > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(100 << std::min(attempt, 7)));
    std::mutex mu;
    std::condition_variable cv;
    size_t remaining = todo.size();
    for (size_t i : todo) {
      SubmitAsync(ops[i], [&, i](Result<size_t> r) {
        std::lock_guard<std::mutex> lock(mu);
        results[i] = std::move(r);
        if (--remaining == 0)
          cv.notify_all();
      });
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return remaining == 0; });
    std::vector<size_t> again;
    for (size_t i : todo) {
      if (!results[i].ok() && results[i].status().code() == StatusCode::kUnavailable)
        again.push_back(i);
    }
    todo.swap(again);
  }
  return results;
}

Result<size_t> IoEngine::Pread(FileHandle fh, void* buf, size_t len, uint64_t offset) {
  std::vector<Result<size_t>> r = SubmitAndWait({IoOp{IoKind::kRead, fh, offset, buf, len}});
  return std::move(r[0]);
}

Status IoEngine::PwriteAll(FileHandle fh, const void* buf, size_t len, uint64_t offset) {
  // The engines already retry short writes; a short result here means the device refused more.
  std::vector<Result<size_t>> r =
      SubmitAndWait({IoOp{IoKind::kWrite, fh, offset, const_cast<void*>(buf), len}});
  if (!r[0].ok())
    return r[0].status();
  if (*r[0] != len)
    return Status::IoError("short write");
  return Status::OK();
}

Result<std::unique_ptr<IoEngine>> NewDiskIoEngine(IoEngineKind kind, unsigned queue_depth) {
  if (kind == IoEngineKind::kPosix) {
    return std::unique_ptr<IoEngine>(std::make_unique<PosixIoEngine>());
  }
  Result<std::unique_ptr<UringIoEngine>> uring = UringIoEngine::Create(queue_depth);
  if (uring.ok())
    return std::unique_ptr<IoEngine>(std::move(*uring));
  if (kind == IoEngineKind::kUring)
    return std::move(uring).status();
  static std::once_flag logged;
  std::call_once(logged, [&] {
    LOG_WARN("io_uring unavailable ({}); using the posix IO engine", uring.status().ToString());
  });
  return std::unique_ptr<IoEngine>(std::make_unique<PosixIoEngine>());
}

Result<IoEngineKind> ParseIoEngineKind(const std::string& s) {
  if (s == "auto")
    return IoEngineKind::kAuto;
  if (s == "io_uring" || s == "uring")
    return IoEngineKind::kUring;
  if (s == "posix")
    return IoEngineKind::kPosix;
  return Status::InvalidArgument("unknown IO engine '" + s + "' (want auto, io_uring or posix)");
}

}  // namespace ciuic::io
