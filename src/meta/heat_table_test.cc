#include "meta/heat_table.h"

#include <cmath>

#include <gtest/gtest.h>

namespace ciuic::meta {
namespace {

constexpr int64_t kHour = 3600 * 1000;

TEST(HeatTableTest, DecayHalvesEveryHalfLife) {
  EXPECT_DOUBLE_EQ(HeatTable::Decay(8, 0, 0, kHour), 8);
  EXPECT_DOUBLE_EQ(HeatTable::Decay(8, 0, kHour, kHour), 4);
  EXPECT_DOUBLE_EQ(HeatTable::Decay(8, 0, 3 * kHour, kHour), 1);
  EXPECT_NEAR(HeatTable::Decay(8, 0, kHour / 2, kHour), 8 / std::sqrt(2.0), 1e-9);
  // A clock that went backwards does not heat a file up.
  EXPECT_DOUBLE_EQ(HeatTable::Decay(8, kHour, 0, kHour), 8);
}

TEST(HeatTableTest, AddsDecayedCounts) {
  HeatTable t(kHour, 100);
  const Fid f{7, 0, 0};
  EXPECT_FALSE(t.Get(f, 0).has_value());
  t.Add(f, 10, 0);
  t.Add(f, 10, kHour);  // 10 decayed to 5, plus 10
  ASSERT_TRUE(t.Get(f, kHour).has_value());
  EXPECT_DOUBLE_EQ(*t.Get(f, kHour), 15);
  EXPECT_DOUBLE_EQ(*t.Get(f, 2 * kHour), 7.5);
  // A report that arrives late (older time stamp) still counts, without decay.
  t.Add(f, 1, kHour);
  EXPECT_DOUBLE_EQ(*t.Get(f, 2 * kHour), 8);
  t.Erase(f);
  EXPECT_FALSE(t.Get(f, 2 * kHour).has_value());
}

TEST(HeatTableTest, EvictsTheColdestPastTheCap) {
  HeatTable t(kHour, 8);
  for (uint64_t i = 1; i <= 8; ++i)
    t.Add(Fid{i, 0, 0}, static_cast<double>(i), 0);
  EXPECT_EQ(t.size(), 8u);
  t.Add(Fid{100, 0, 0}, 50, 0);  // past the cap: down to 7 (8 - 8/8), coldest gone
  EXPECT_EQ(t.size(), 7u);
  EXPECT_FALSE(t.Get(Fid{1, 0, 0}, 0).has_value());
  EXPECT_FALSE(t.Get(Fid{2, 0, 0}, 0).has_value());
  EXPECT_TRUE(t.Get(Fid{3, 0, 0}, 0).has_value());
  EXPECT_TRUE(t.Get(Fid{100, 0, 0}, 0).has_value());
}

}  // namespace
}  // namespace ciuic::meta
