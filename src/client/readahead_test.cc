#include "client/readahead.h"

#include <gtest/gtest.h>

namespace ciuic::client {
namespace {

constexpr uint64_t kMiB = 1 << 20;

TEST(ReadaheadTest, SequentialReadsFromTheStartUseReadahead) {
  ReadaheadPolicy p(8 * kMiB, kMiB, 512 << 10);
  auto d = p.OnRead(0, 4096, 100 * kMiB);
  EXPECT_TRUE(d.use_readahead);
  EXPECT_EQ(d.first_chunk, 0u);
  EXPECT_EQ(d.end_chunk, 9u);  // 4 KiB + 8 MiB rounds up to chunk 9
  d = p.OnRead(4096, 4096, 100 * kMiB);
  EXPECT_TRUE(d.use_readahead);
  d = p.OnRead(3 * kMiB, 4096, 100 * kMiB);  // a jump: random
  EXPECT_FALSE(d.use_readahead);
}

TEST(ReadaheadTest, RandomReadsTurnItOffUntilTwoSequentialReads) {
  ReadaheadPolicy p(8 * kMiB, kMiB, 512 << 10);
  EXPECT_FALSE(p.OnRead(50 * kMiB, 4096, 100 * kMiB).use_readahead);
  EXPECT_FALSE(p.OnRead(7 * kMiB, 4096, 100 * kMiB).use_readahead);
  EXPECT_FALSE(p.OnRead(7 * kMiB + 4096, 4096, 100 * kMiB).use_readahead);
  auto d = p.OnRead(7 * kMiB + 8192, 4096, 100 * kMiB);
  EXPECT_TRUE(d.use_readahead);
  EXPECT_EQ(d.first_chunk, 7u);
}

TEST(ReadaheadTest, WindowClipsAtFileSizeAndLargeReadsGoDirect) {
  ReadaheadPolicy p(8 * kMiB, kMiB, 512 << 10);
  auto d = p.OnRead(0, 4096, 2 * kMiB + 1);
  EXPECT_TRUE(d.use_readahead);
  EXPECT_EQ(d.end_chunk, 3u);
  EXPECT_FALSE(p.OnRead(4096, kMiB, 100 * kMiB).use_readahead);      // big: straight to caller
  EXPECT_FALSE(p.OnRead(200 * kMiB, 10, 100 * kMiB).use_readahead);  // past EOF
}

TEST(ReadaheadTest, SmallForwardSkipStaysSequentialAndDisableWins) {
  ReadaheadPolicy p(4 * kMiB, kMiB, 512 << 10);
  EXPECT_TRUE(p.OnRead(0, 1000, 10 * kMiB).use_readahead);
  EXPECT_TRUE(p.OnRead(1000 + 512, 1000, 10 * kMiB).use_readahead);  // tar-header-sized skip
  p.Disable();
  EXPECT_FALSE(p.OnRead(2512, 1000, 10 * kMiB).use_readahead);
  ReadaheadPolicy off(0, kMiB, 512 << 10);
  EXPECT_FALSE(off.OnRead(0, 10, 10 * kMiB).use_readahead);
}

}  // namespace
}  // namespace ciuic::client
