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

}  // namespace
}  // namespace ciuic
