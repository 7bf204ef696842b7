#include "common/layout.h"

#include <random>

#include <gtest/gtest.h>

namespace ciuic {
namespace {

FileLayout TwoComponents() {
  FileLayout l;
  l.components.push_back({0, 0, 4u << 20, 1u << 20, 1, {3}, 0});
  l.components.push_back({1, 4u << 20, kLayoutEof, 1u << 20, 4, {0, 1, 2, 3}, 0});
  return l;
}

TEST(LayoutTest, ValidateAcceptsPfl) {
  EXPECT_TRUE(TwoComponents().Validate().ok());
}

TEST(LayoutTest, ValidateRejectsBadLayouts) {
  FileLayout l = TwoComponents();
  l.components[1].osts = {0, 0, 1, 2};
  EXPECT_FALSE(l.Validate().ok());
  l = TwoComponents();
  l.components[0].stripe_size = 1000;
  EXPECT_FALSE(l.Validate().ok());
  l = TwoComponents();
  l.components[1].end = 100u << 20;
  EXPECT_FALSE(l.Validate().ok());
  EXPECT_FALSE(FileLayout{}.Validate().ok());
}

TEST(LayoutTest, MapRangeCoversEveryByteOnce) {
  FileLayout l = TwoComponents();
  std::mt19937_64 rng(42);
  for (int i = 0; i < 1000; ++i) {
    uint64_t off = rng() % (64u << 20);
    uint64_t len = rng() % (8u << 20) + 1;
    auto ex = MapRange(l, off, len);
    uint64_t pos = off;
    for (const auto& e : ex) {
      ASSERT_EQ(e.file_offset, pos);
      ASSERT_GT(e.len, 0u);
      pos += e.len;
    }
    ASSERT_EQ(pos, off + len);
  }
}

TEST(LayoutTest, ObjectLengthsInvertFileSize) {
  FileLayout l = TwoComponents();
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    uint64_t size = rng() % (40u << 20) + 1;
    uint64_t implied = 0;
    for (const auto& c : l.components) {
      for (uint32_t s = 0; s < c.stripe_count; ++s) {
        implied =
            std::max(implied, FileEndFromObjectLength(c, s, ObjectLengthForFileSize(c, s, size)));
      }
    }
    ASSERT_EQ(implied, size) << "size " << size;
  }
}

TEST(LayoutTest, StripesRoundRobin) {
  FileLayout l = TwoComponents();
  auto ex = MapRange(l, 4u << 20, 8u << 20);
  ASSERT_EQ(ex.size(), 8u);
  for (uint32_t i = 0; i < 8; ++i) {
    EXPECT_EQ(ex[i].stripe, i % 4);
    EXPECT_EQ(ex[i].obj_offset, (i / 4) * (1u << 20));
  }
}

}  // namespace
}  // namespace ciuic
