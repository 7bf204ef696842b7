#include "bench/stats.h"

#include <gtest/gtest.h>

namespace ciuic::bench {
namespace {

TEST(BenchStatsTest, SummarizeOddAndEven) {
  Summary s = Summarize({5, 1, 3});
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.median, 3);
  EXPECT_EQ(s.max, 5);
  EXPECT_EQ(s.count, 3u);
  s = Summarize({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  s = Summarize({});
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.median, 0);
}

TEST(BenchStatsTest, PercentilesByNearestRank) {
  std::vector<double> v;
  for (int i = 1; i <= 1000; ++i)
    v.push_back(i);
  EXPECT_EQ(Percentile(v, 50), 500);
  EXPECT_EQ(Percentile(v, 99), 990);
  EXPECT_EQ(Percentile(v, 99.9), 999);
  EXPECT_EQ(Percentile(v, 100), 1000);
  EXPECT_EQ(Percentile(v, 0), 1);
  EXPECT_EQ(Percentile({7}, 99.9), 7);
  EXPECT_EQ(Percentile({}, 50), 0);
  // Unsorted input, small counts: p50 of 4 is the 2nd value.
  EXPECT_EQ(Percentile({40, 10, 30, 20}, 50), 20);
}

TEST(BenchStatsTest, LatencyStatsOnKnownInput) {
  std::vector<double> us(1000, 10.0);
  us[999] = 5000;  // one outlier: only p99.9 and max see it
  us[998] = 900;
  LatencyStats s = ComputeLatency(us);
  EXPECT_EQ(s.count, 1000u);
  EXPECT_EQ(s.p50, 10);
  EXPECT_EQ(s.p99, 10);
  EXPECT_EQ(s.p999, 900);
  EXPECT_EQ(s.max, 5000);
  EXPECT_NEAR(s.mean, (998 * 10.0 + 900 + 5000) / 1000, 1e-9);
}

TEST(BenchStatsTest, ScalingEfficiency) {
  EXPECT_DOUBLE_EQ(ScalingEfficiency(1.0, 8.0, 8), 1.0);
  EXPECT_DOUBLE_EQ(ScalingEfficiency(0.025, 0.184, 8), 0.92);
  EXPECT_DOUBLE_EQ(ScalingEfficiency(2.0, 3.0, 2), 0.75);
  EXPECT_EQ(ScalingEfficiency(0, 3.0, 2), 0);
  EXPECT_EQ(ScalingEfficiency(1.0, 3.0, 0), 0);
}

TEST(BenchStatsTest, ExceedsLimit) {
  EXPECT_FALSE(ExceedsLimit(2.0, 2.0));
  EXPECT_FALSE(ExceedsLimit(2.1, 2.0));  // within 10 %
  EXPECT_TRUE(ExceedsLimit(2.3, 2.0));
  EXPECT_FALSE(ExceedsLimit(100, 0));  // unknown limit
}

}  // namespace
}  // namespace ciuic::bench
