// UringIoEngine: async disk IO on one io_uring. SubmitAsync never waits: at most `queue_depth`
// ops are in the ring, up to `max_queued` more wait in a bounded overflow queue (started as ops
// complete), and beyond that an op is answered kUnavailable ("io queue full ... retry"), the
// back-pressure the OSS hands to its clients, which retry with backoff. Submissions made inside
// a SubmitBatch (common/submit_batch.h; the servers' network loops open one per turn) go to the
// kernel with one io_uring_submit when the batch ends, others at once. One reaper thread waits
// for completions, finishes short transfers and -EAGAIN retries, answers refused ops, and runs
// every callback. No SQPOLL; the kernel's io-wq worker pools are capped (4 bounded,
// 4 unbounded) so a burst of buffered IO cannot spawn hundreds of threads on a 2-core box.
// Thread-safe; SubmitAsync holds an internal mutex only for a few instructions (and the
// io_uring_submit syscall, which does not wait for IO).
#pragma once

#include <liburing.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/submit_batch.h"
#include "io/disk_io_engine.h"

namespace ciuic::io {

class UringIoEngine : public DiskIoEngine, private BatchFlusher {
 public:
  // Sets up a ring and proves it works with a NOP round trip. `max_queued` bounds the overflow
  // queue (0: 8 x queue_depth). kNotSupported when the kernel or a sandbox (seccomp,
  // io_uring_disabled) refuses io_uring.
  static Result<std::unique_ptr<UringIoEngine>> Create(unsigned queue_depth = 128,
                                                       unsigned max_queued = 0);
  ~UringIoEngine() override;
  UringIoEngine(const UringIoEngine&) = delete;
  UringIoEngine& operator=(const UringIoEngine&) = delete;

  const char* name() const override { return "io_uring"; }
  // Never blocks. When the ring and the overflow queue are full, `cb` gets kUnavailable (on
  // the reaper thread, like every other completion).
  void SubmitAsync(const IoOp& op, IoCallback cb) override;

  // io_uring_submit calls so far, and ops refused because the queue was full.
  uint64_t TEST_SubmitCalls() const { return submit_calls_.load(); }
  uint64_t TEST_Refused() const { return refused_.load(); }

 private:
  struct Request;

  UringIoEngine(unsigned queue_depth, unsigned max_queued);
  Status Init();
  // Puts `r` (its remaining part) into the SQ, then submits it unless a batch on this thread
  // will. Requires mu_.
  void StartLocked(Request* r);
  // Hands every prepared SQE to the kernel. Requires mu_.
  void SubmitLocked();
  // Queues a NOP so the reaper wakes up and answers the refused ops. Requires mu_.
  void WakeReaperLocked();
  void FlushBatch() override;
  void ReaperLoop();
  void HandleCompletion(Request* r, int res);
  void Finish(Request* r, Result<size_t> result);

  const unsigned depth_;
  const unsigned max_queued_;
  struct io_uring ring_ {};
  bool ring_ready_ = false;

  std::mutex mu_;
  std::condition_variable idle_cv_;    // the destructor waits for everything to be answered
  unsigned inflight_ = 0;              // guarded by mu_: ops in the ring
  std::deque<Request*> overflow_;      // guarded by mu_: at most max_queued_, waiting for room
  std::vector<Request*> refused_ops_;  // guarded by mu_: to answer kUnavailable
  bool wake_pending_ = false;          // guarded by mu_: a wake-up NOP is in the ring
  bool stopping_ = false;              // guarded by mu_
  std::thread reaper_;
  std::atomic<uint64_t> submit_calls_{0};
  std::atomic<uint64_t> refused_{0};
};

}  // namespace ciuic::io
