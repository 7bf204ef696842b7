#include "oss/read_buffer_pool.h"

#include <bit>

namespace ciuic::oss {

std::shared_ptr<AlignedBuffer> ReadBufferPool::Get(size_t size) {
  size_t shift = size <= 1 ? 0 : std::bit_width(size - 1);
  if (shift < kMinShift || shift >= kMinShift + kClasses) {
    return std::make_shared<AlignedBuffer>(size);
  }
  const size_t cls = shift - kMinShift;
  AlignedBuffer buf;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_[cls].empty()) {
      buf = std::move(free_[cls].back());
      free_[cls].pop_back();
      idle_bytes_ -= buf.capacity();
    }
  }
  if (buf.capacity() == 0)
    buf.Resize(size_t{1} << shift);  // whole class: reusable later
  buf.Resize(size);
  std::weak_ptr<ReadBufferPool> pool = weak_from_this();
  return std::shared_ptr<AlignedBuffer>(new AlignedBuffer(std::move(buf)),
                                        [pool, cls](AlignedBuffer* p) {
                                          if (auto self = pool.lock())
                                            self->Put(std::move(*p), cls);
                                          delete p;
                                        });
}

void ReadBufferPool::Put(AlignedBuffer buf, size_t cls) {
  std::lock_guard<std::mutex> lock(mu_);
  if (buf.capacity() != (size_t{1} << (cls + kMinShift)))
    return;
  if (idle_bytes_ + buf.capacity() > max_idle_bytes_)
    return;
  idle_bytes_ += buf.capacity();
  free_[cls].push_back(std::move(buf));
}

size_t ReadBufferPool::idle_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_bytes_;
}

}  // namespace ciuic::oss
