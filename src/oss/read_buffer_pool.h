// ReadBufferPool: recycles the 4 KiB-aligned buffers that OST reads land in, so a stream of
// large reads does not pay for mmap, page faults and munmap per request. Buffers come back when
// the last reference to them drops (after the reply went out), from any thread.
// Thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "common/buffer.h"

namespace ciuic::oss {

class ReadBufferPool : public std::enable_shared_from_this<ReadBufferPool> {
 public:
  // Keeps at most `max_idle_bytes` of idle buffers. Create with std::make_shared.
  explicit ReadBufferPool(size_t max_idle_bytes) : max_idle_bytes_(max_idle_bytes) {}

  // Returns a buffer of `size` bytes, contents undefined.
  std::shared_ptr<AlignedBuffer> Get(size_t size);
  size_t idle_bytes() const;

 private:
  // From 4 KiB: an aligned malloc of a few dozen KiB is not cheap either (a perf profile of
  // shuffled 16-128 KiB sample reads showed 8 % of the OSS in memalign, heap growth and the page
  // faults that follow the heap's trims).
  static constexpr size_t kMinShift = 12;
  static constexpr size_t kClasses = 16;  // 4 KiB .. 128 MiB

  void Put(AlignedBuffer buf, size_t cls);

  const size_t max_idle_bytes_;
  mutable std::mutex mu_;
  size_t idle_bytes_ = 0;                      // guarded by mu_
  std::vector<AlignedBuffer> free_[kClasses];  // guarded by mu_
};

}  // namespace ciuic::oss
