#include "common/prefault.h"

#include <sys/mman.h>

#include <cstring>
#include <memory>

#include <gtest/gtest.h>

namespace ciuic {
namespace {

// Prefaulting is a hint: whatever the range (unaligned, shorter than a page, empty, already
// mapped), the memory afterwards holds what it held, is writable, and nothing else changes.
TEST(PrefaultTest, LeavesContentsAndNeighboursAlone) {
  constexpr size_t kLen = 1 << 20;
  void* m = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* p = static_cast<unsigned char*>(m);
  PrefaultForWrite(p + 123, kLen - 1000);  // unaligned both ends: only whole pages inside
  for (size_t i = 0; i < kLen; i += 512)
    ASSERT_EQ(p[i], 0) << i;  // fresh anonymous memory still reads as zeros
  std::memset(p, 0xab, kLen);
  PrefaultForWrite(p, kLen);      // already mapped: contents unchanged
  PrefaultForWrite(p + 10, 100);  // within one page: nothing to do
  PrefaultForWrite(p, 0);
  for (size_t i = 0; i < kLen; i += 511)
    ASSERT_EQ(p[i], 0xab) << i;
  ASSERT_EQ(::munmap(m, kLen), 0);
  auto heap = std::make_unique<char[]>(3 * 4096 + 17);
  PrefaultForWrite(heap.get(), 3 * 4096 + 17);
  std::memset(heap.get(), 1, 3 * 4096 + 17);
  EXPECT_EQ(heap[3 * 4096 + 16], 1);
}

// FreshBuffer: zeroed, writable, exactly the size asked for; large ones 2 MiB aligned (so the
// kernel can back them with huge pages); tiny and empty ones work too.
TEST(FreshBufferTest, AlignedZeroedAndWritable) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{4097}, size_t{(2 << 20) - 1}, size_t{2 << 20},
                      size_t{(5 << 20) + 123}}) {
    auto b = FreshBuffer::Allocate(size);
    ASSERT_NE(b, nullptr) << size;
    EXPECT_EQ(b->size(), size);
    if (size >= (2 << 20)) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % (2 << 20), 0u) << size;
    }
    for (size_t i = 0; i < size; i += 4093)
      ASSERT_EQ(b->data()[i], 0) << size << " " << i;
    PrefaultForWrite(b->data(), size);
    std::memset(b->data(), 0x5a, size);
    if (size != 0) {
      EXPECT_EQ(b->data()[size - 1], 0x5a);
    }
  }
  // Many large buffers come and go without leaking mappings (each trims its alignment slack).
  for (int i = 0; i < 200; ++i)
    ASSERT_NE(FreshBuffer::Allocate(size_t{64} << 20), nullptr);
}

}  // namespace
}  // namespace ciuic
