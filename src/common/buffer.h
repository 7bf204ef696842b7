// AlignedBuffer: an owned, 4 KiB-aligned byte buffer, usable for O_DIRECT IO and as the landing
// place of bulk network data. Move-only. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <utility>

namespace ciuic {

inline constexpr size_t kDirectIoAlign = 4096;

inline constexpr size_t AlignUp(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}
inline constexpr size_t AlignDown(size_t v, size_t a) {
  return v / a * a;
}

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t size) { Resize(size); }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        capacity_(std::exchange(o.capacity_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // Sets the size to `size`, keeping existing bytes when growing within capacity.
  void Resize(size_t size) {
    if (size > capacity_) {
      size_t cap = AlignUp(size == 0 ? 1 : size, kDirectIoAlign);
      void* p = std::aligned_alloc(kDirectIoAlign, cap);
      if (p == nullptr)
        throw std::bad_alloc();
      if (data_ != nullptr && size_ > 0)
        std::memcpy(p, data_, size_);
      std::free(data_);
      data_ = static_cast<uint8_t*>(p);
      capacity_ = cap;
    }
    size_ = size;
  }

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }
  std::span<uint8_t> span() { return {data_, size_}; }
  std::span<const uint8_t> span() const { return {data_, size_}; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace ciuic
