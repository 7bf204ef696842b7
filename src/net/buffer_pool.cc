#include "net/buffer_pool.h"

#include <bit>
#include <utility>

namespace ciuic::net::detail {

int BufferPool::ClassOf(size_t capacity) {
  if (capacity < (size_t{1} << kMinClassShift) || !std::has_single_bit(capacity))
    return -1;
  size_t c = static_cast<size_t>(std::countr_zero(capacity)) - kMinClassShift;
  return c < kClasses ? static_cast<int>(c) : -1;
}

AlignedBuffer BufferPool::Get(size_t size) {
  if (size < (size_t{1} << kMinClassShift) || max_bytes_ == 0)
    return AlignedBuffer(size);
  size_t cap = std::bit_ceil(size);
  int c = ClassOf(cap);
  if (c < 0)
    return AlignedBuffer(size);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& list = free_[c];
    if (!list.empty()) {
      AlignedBuffer b = std::move(list.back());
      list.pop_back();
      idle_bytes_ -= b.capacity();
      b.Resize(size);
      return b;
    }
  }
  AlignedBuffer b(cap);
  b.Resize(size);
  return b;
}

void BufferPool::Put(AlignedBuffer buf) {
  int c = ClassOf(buf.capacity());
  if (c < 0)
    return;
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_bytes_ + buf.capacity() > max_bytes_)
    return;
  idle_bytes_ += buf.capacity();
  free_[c].push_back(std::move(buf));
}

size_t BufferPool::idle_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_bytes_;
}

}  // namespace ciuic::net::detail
