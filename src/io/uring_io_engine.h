// UringIoEngine: async disk IO on one io_uring. Submissions are taken under a mutex (one
// io_uring_enter per submission); one reaper thread waits for completions, finishes short
// transfers and -EAGAIN retries, and runs the callbacks. No SQPOLL; the kernel's io-wq worker
// pools are capped (4 bounded, 4 unbounded) so a burst of buffered IO cannot spawn hundreds of
// threads on a 2-core box. At most `queue_depth` ops are in flight; SubmitAsync waits for room
// (on the reaper thread itself, ops queue in memory instead). Thread-safe.
#pragma once

#include <liburing.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "io/disk_io_engine.h"

namespace ciuic::io {

class UringIoEngine : public DiskIoEngine {
 public:
  // Sets up a ring and proves it works with a NOP round trip. kNotSupported when the kernel or a
  // sandbox (seccomp, io_uring_disabled) refuses io_uring.
  static Result<std::unique_ptr<UringIoEngine>> Create(unsigned queue_depth = 128);
  ~UringIoEngine() override;
  UringIoEngine(const UringIoEngine&) = delete;
  UringIoEngine& operator=(const UringIoEngine&) = delete;

  const char* name() const override { return "io_uring"; }
  void SubmitAsync(const IoOp& op, IoCallback cb) override;

 private:
  struct Request;

  explicit UringIoEngine(unsigned queue_depth);
  Status Init();
  // Puts `r` (its remaining part) into the SQ and submits it. Requires mu_.
  void PrepAndSubmitLocked(Request* r);
  void ReaperLoop();
  void HandleCompletion(Request* r, int res);
  void Finish(Request* r, Result<size_t> result);

  const unsigned depth_;
  struct io_uring ring_ {};
  bool ring_ready_ = false;

  std::mutex mu_;
  std::condition_variable room_cv_;
  unsigned inflight_ = 0;          // guarded by mu_: ops in the ring
  std::deque<Request*> overflow_;  // guarded by mu_: submitted by callbacks while full
  bool stopping_ = false;          // guarded by mu_
  std::thread reaper_;
};

}  // namespace ciuic::io
