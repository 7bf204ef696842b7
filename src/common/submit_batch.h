// SubmitBatch: one turn of a thread's event loop, during which IO submissions are only queued;
// when the outermost batch on the thread ends, every queue that took part is flushed once (for
// io_uring: one io_uring_submit for all the SQEs the turn prepared, instead of one syscall per
// request).
//
//   for (;;) { SubmitBatch batch; ctx.run_one(); while (ctx.poll_one()) {} }  // flush here
//
// A queue (BatchFlusher) asks SubmitBatch::Defer(this) before holding back a submission; false
// means no batch is open on this thread and it must submit at once. A flusher must outlive the
// batches it joined. Batches nest; only the outermost one flushes. Thread-local: a batch covers
// only submissions made on its own thread. Nothing here blocks except the flushes themselves.
#pragma once

namespace ciuic {

class BatchFlusher {
 public:
  // Submits whatever this queue held back for the batch that ends now. Called once per batch
  // that it joined, on the batch's thread.
  virtual void FlushBatch() = 0;

 protected:
  ~BatchFlusher() = default;
};

class SubmitBatch {
 public:
  SubmitBatch();
  ~SubmitBatch();
  SubmitBatch(const SubmitBatch&) = delete;
  SubmitBatch& operator=(const SubmitBatch&) = delete;

  // Returns true and remembers `f` (once) when a batch is open on this thread, so that
  // f->FlushBatch() runs when the outermost one ends; false when none is open.
  static bool Defer(BatchFlusher* f);
};

}  // namespace ciuic
