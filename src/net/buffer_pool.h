// BufferPool: recycles the 4 KiB-aligned buffers that servers receive data segments into, so a
// steady stream of writes does not pay for mmap, page faults and munmap on every request.
// Internal to ciuic_net. Thread-safe (buffers come back from whichever thread drops a call).
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "common/buffer.h"

namespace ciuic::net::detail {

class BufferPool {
 public:
  // Keeps at most `max_bytes` of idle buffers.
  explicit BufferPool(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Returns a buffer of `size` bytes (contents undefined), recycled when one is idle.
  AlignedBuffer Get(size_t size);
  // Takes `buf` back for reuse, or frees it when the pool is full or the size is odd.
  void Put(AlignedBuffer buf);

  size_t idle_bytes() const;

 private:
  static constexpr size_t kMinClassShift = 16;  // smaller buffers are cheap: not pooled
  static constexpr size_t kClasses = 16;        // 64 KiB .. 2 GiB

  static int ClassOf(size_t capacity);

  const size_t max_bytes_;
  mutable std::mutex mu_;
  size_t idle_bytes_ = 0;                      // guarded by mu_
  std::vector<AlignedBuffer> free_[kClasses];  // guarded by mu_
};

}  // namespace ciuic::net::detail
