// PosixIoEngine: pread/pwrite on a small bounded thread pool (8 threads: they mostly wait for
// the disk, and fewer would cap random-read queue depth). The fallback when io_uring is
// unavailable (containers and CI often forbid it). Thread-safe. Callbacks run on pool threads.
#pragma once

#include <memory>

#include "common/thread_pool.h"
#include "io/disk_io_engine.h"

namespace ciuic::io {

class PosixIoEngine : public DiskIoEngine {
 public:
  // `threads` bounds the IOs in progress at once; `max_queue` bounds the queued ones (beyond it
  // SubmitAsync waits for room, except on an engine thread, where it runs the op inline).
  explicit PosixIoEngine(size_t threads = 8, size_t max_queue = 1024);
  ~PosixIoEngine() override;

  const char* name() const override { return "posix"; }
  void SubmitAsync(const IoOp& op, IoCallback cb) override;

 private:
  ThreadPool pool_;
};

}  // namespace ciuic::io
