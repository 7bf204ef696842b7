#include "io/posix_io_engine.h"

#include "common/fault.h"

namespace ciuic::io {
namespace {

// Set on the pool's threads so that a callback submitting more work never waits for room in
// the queue that its own thread is supposed to drain.
thread_local bool t_on_engine_thread = false;

void RunOp(const IoOp& op, const IoCallback& cb) {
  Status fault = CIUIC_FAULT(op.kind == IoKind::kRead ? "io.read" : "io.write");
  if (!fault.ok()) {
    cb(std::move(fault));
    return;
  }
  cb(RunIoBlocking(op));
}

}  // namespace

PosixIoEngine::PosixIoEngine(size_t threads, size_t max_queue)
    : pool_(threads, max_queue, "posix-io") {}

PosixIoEngine::~PosixIoEngine() {
  pool_.Stop();
}

void PosixIoEngine::SubmitAsync(const IoOp& op, IoCallback cb) {
  // One allocation per op holds the callback, so a refused submission can still answer it.
  auto task = std::make_shared<std::pair<IoOp, IoCallback>>(op, std::move(cb));
  auto run = [task] {
    t_on_engine_thread = true;
    RunOp(task->first, task->second);
  };
  // On a pool thread never wait for room: every pool thread could end up waiting for the queue
  // that only they drain. Run inline instead. Elsewhere wait; Submit fails only once stopped.
  bool queued = t_on_engine_thread ? pool_.TrySubmit(run) : pool_.Submit(run);
  if (!queued)
    RunOp(task->first, task->second);
}

}  // namespace ciuic::io
