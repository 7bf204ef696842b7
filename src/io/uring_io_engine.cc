#include "io/uring_io_engine.h"

#include <pthread.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/fault.h"
#include "common/logging.h"

namespace ciuic::io {
namespace {

// The reaper thread of whichever engine is running callbacks on this thread.
thread_local const void* t_reaper_of = nullptr;

// user_data of the NOP that wakes the reaper to answer refused ops (nullptr: exit).
char kWakeTag;

}  // namespace

struct UringIoEngine::Request {
  IoOp op;
  IoCallback cb;
  size_t done = 0;
  Status forced;  // a fault or zero-length op: completes through a NOP with this result
  bool is_nop = false;
};

Result<std::unique_ptr<UringIoEngine>> UringIoEngine::Create(unsigned queue_depth,
                                                             unsigned max_queued) {
  const unsigned depth = queue_depth < 4 ? 4 : queue_depth;
  std::unique_ptr<UringIoEngine> engine(
      new UringIoEngine(depth, max_queued == 0 ? 8 * depth : max_queued));
  CIUIC_RETURN_IF_ERROR(engine->Init());
  return engine;
}

UringIoEngine::UringIoEngine(unsigned queue_depth, unsigned max_queued)
    : depth_(queue_depth), max_queued_(max_queued) {}

Status UringIoEngine::Init() {
  int rc = io_uring_queue_init(depth_, &ring_, 0);
  if (rc < 0)
    return Status::NotSupported(fmt::format("io_uring_queue_init: {}", strerror(-rc)));
  ring_ready_ = true;
  // Probe with a NOP round trip: some sandboxes allow setup but fail every op.
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  io_uring_prep_nop(sqe);
  io_uring_sqe_set_data(sqe, nullptr);
  rc = io_uring_submit(&ring_);
  if (rc != 1) {
    return Status::NotSupported(
        fmt::format("io_uring NOP submit: {}", rc < 0 ? strerror(-rc) : "0"));
  }
  io_uring_cqe* cqe = nullptr;
  do {
    rc = io_uring_wait_cqe(&ring_, &cqe);
  } while (rc == -EINTR);
  if (rc < 0)
    return Status::NotSupported(fmt::format("io_uring NOP wait: {}", strerror(-rc)));
  int res = cqe->res;
  io_uring_cqe_seen(&ring_, cqe);
  if (res < 0)
    return Status::NotSupported(fmt::format("io_uring NOP: {}", strerror(-res)));
  // Cap the kernel's worker pools (bounded: regular file IO; unbounded: sockets etc.). Older
  // kernels lack it; then the defaults stay.
  unsigned workers[2] = {4, 4};
  rc = io_uring_register_iowq_max_workers(&ring_, workers);
  if (rc < 0)
    LOG_DEBUG("io_uring_register_iowq_max_workers: {}", strerror(-rc));
  reaper_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "uring-reaper");
    t_reaper_of = this;
    ReaperLoop();
  });
  return Status::OK();
}

UringIoEngine::~UringIoEngine() {
  if (reaper_.joinable()) {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    SubmitLocked();  // anything a batch still holds (a batch must not outlive its engine)
    idle_cv_.wait(lock, [&] {
      return inflight_ == 0 && overflow_.empty() && refused_ops_.empty() && !wake_pending_;
    });
    // A NOP without a request tells the reaper to exit.
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    while (sqe == nullptr) {
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data(sqe, nullptr);
    io_uring_submit(&ring_);
    lock.unlock();
    reaper_.join();
  }
  if (ring_ready_)
    io_uring_queue_exit(&ring_);
}

void UringIoEngine::SubmitAsync(const IoOp& op, IoCallback cb) {
  auto* r = new Request{op, std::move(cb), 0, Status::OK(), false};
  Status fault = CIUIC_FAULT(op.kind == IoKind::kRead ? "io.read" : "io.write");
  if (!fault.ok()) {
    r->forced = std::move(fault);
    r->is_nop = true;
  } else if (op.len == 0) {
    r->is_nop = true;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (inflight_ < depth_) {
    ++inflight_;
    StartLocked(r);
    return;
  }
  if (overflow_.size() < max_queued_) {
    overflow_.push_back(r);  // started by Finish as ops complete
    return;
  }
  // Full: refuse rather than wait (the caller may be a network thread). The answer comes from
  // the reaper, as every completion does; a callback running there is answered after it.
  refused_ops_.push_back(r);
  ++refused_;
  if (t_reaper_of != this)
    WakeReaperLocked();
}

void UringIoEngine::StartLocked(Request* r) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  while (sqe == nullptr) {
    // The SQ holds depth_ entries and at most depth_ ops plus one wake-up NOP are in flight,
    // so this happens at most when a batch filled the SQ before the NOP: submit and go on.
    SubmitLocked();
    sqe = io_uring_get_sqe(&ring_);
  }
  if (r->is_nop) {
    io_uring_prep_nop(sqe);
  } else {
    auto* p = static_cast<uint8_t*>(r->op.buf) + r->done;
    unsigned len = static_cast<unsigned>(std::min<size_t>(r->op.len - r->done, 1u << 30));
    uint64_t off = r->op.offset + r->done;
    if (r->op.kind == IoKind::kRead) {
      io_uring_prep_read(sqe, r->op.fh, p, len, off);
    } else {
      io_uring_prep_write(sqe, r->op.fh, p, len, off);
    }
  }
  io_uring_sqe_set_data(sqe, r);
  if (!SubmitBatch::Defer(this))
    SubmitLocked();
}

void UringIoEngine::SubmitLocked() {
  if (io_uring_sq_ready(&ring_) == 0)
    return;
  int rc;
  do {
    ++submit_calls_;
    rc = io_uring_submit(&ring_);
  } while (rc == -EINTR);
  // On -EAGAIN/-EBUSY the SQEs stay queued; the reaper submits them after the next completion.
  if (rc < 0 && rc != -EAGAIN && rc != -EBUSY) {
    LOG_ERROR("io_uring_submit: {}", strerror(-rc));
  }
}

void UringIoEngine::WakeReaperLocked() {
  if (wake_pending_)
    return;
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  while (sqe == nullptr) {
    SubmitLocked();
    sqe = io_uring_get_sqe(&ring_);
  }
  io_uring_prep_nop(sqe);
  io_uring_sqe_set_data(sqe, &kWakeTag);
  wake_pending_ = true;
  SubmitLocked();  // now: the ops ahead of it may be held by this thread's batch for a while
}

void UringIoEngine::FlushBatch() {
  std::lock_guard<std::mutex> lock(mu_);
  SubmitLocked();
}

void UringIoEngine::ReaperLoop() {
  std::vector<io_uring_cqe*> cqes(64);
  std::vector<std::pair<Request*, int>> done;
  done.reserve(64);
  for (;;) {
    io_uring_cqe* first = nullptr;
    int rc = io_uring_wait_cqe(&ring_, &first);
    if (rc == -EINTR || rc == -EAGAIN)
      continue;
    if (rc < 0) {
      LOG_ERROR("io_uring_wait_cqe: {}", strerror(-rc));
      continue;
    }
    unsigned n = io_uring_peek_batch_cqe(&ring_, cqes.data(), static_cast<unsigned>(cqes.size()));
    done.clear();
    for (unsigned i = 0; i < n; ++i) {
      done.emplace_back(static_cast<Request*>(io_uring_cqe_get_data(cqes[i])), cqes[i]->res);
    }
    io_uring_cq_advance(&ring_, n);
    bool exit = false;
    bool woken = false;
    {
      // Everything the callbacks below submit (and the retries and overflow ops started here)
      // goes to the kernel in one io_uring_submit at the end of this pass.
      SubmitBatch batch;
      for (auto& [r, res] : done) {
        if (r == nullptr) {
          exit = true;
        } else if (static_cast<void*>(r) == &kWakeTag) {
          woken = true;
        } else {
          HandleCompletion(r, res);
        }
      }
      // Answer the refused ops. Ops their callbacks refuse in turn wait for the next pass
      // (woken by a NOP), so completions keep being reaped in between.
      std::vector<Request*> refused;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (woken)
          wake_pending_ = false;
        refused.swap(refused_ops_);
      }
      for (Request* r : refused) {
        std::unique_ptr<Request> owned(r);
        owned->cb(Status::Unavailable(fmt::format(
            "io_uring queue full ({} in flight, {} queued); retry", depth_, max_queued_)));
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (!refused_ops_.empty()) {
        WakeReaperLocked();
      } else if (!wake_pending_) {
        idle_cv_.notify_all();
      }
    }
    {
      // Submit anything a refused io_uring_submit left in the SQ.
      std::lock_guard<std::mutex> lock(mu_);
      SubmitLocked();
    }
    if (exit)
      return;
  }
}

void UringIoEngine::HandleCompletion(Request* r, int res) {
  if (r->is_nop) {
    if (!r->forced.ok()) {
      Finish(r, std::move(r->forced));
    } else {
      Finish(r, size_t{0});
    }
    return;
  }
  const char* what = r->op.kind == IoKind::kRead ? "io_uring read" : "io_uring write";
  if (res == -EAGAIN || res == -EINTR) {
    std::lock_guard<std::mutex> lock(mu_);
    StartLocked(r);  // still counted in inflight_
    return;
  }
  if (res < 0) {
    Finish(r, Status::FromErrno(-res, what));
    return;
  }
  r->done += static_cast<size_t>(res);
  bool more = r->done < r->op.len;
  if (more && r->op.kind == IoKind::kRead && (res == 0 || res % 4096 != 0))
    more = false;  // EOF
  if (more && r->op.kind == IoKind::kWrite && res == 0) {
    Finish(r, Status::NoSpace("io_uring write made no progress"));
    return;
  }
  if (more) {
    std::lock_guard<std::mutex> lock(mu_);
    StartLocked(r);
    return;
  }
  Finish(r, r->done);
}

void UringIoEngine::Finish(Request* r, Result<size_t> result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --inflight_;
    while (!overflow_.empty() && inflight_ < depth_) {
      Request* next = overflow_.front();
      overflow_.pop_front();
      ++inflight_;
      StartLocked(next);
    }
    if (inflight_ == 0 && overflow_.empty())
      idle_cv_.notify_all();
  }
  std::unique_ptr<Request> owned(r);
  owned->cb(std::move(result));
}

}  // namespace ciuic::io
