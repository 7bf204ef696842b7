#include "common/metrics.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace ciuic::metrics {
namespace {

TEST(MetricsTest, CounterAndGaugeRenderWithHelpTypeAndLabels) {
  Registry r;
  auto* ops = r.AddCounter("ciuic_test_ops_total", "Operations.", {"op"});
  ops->WithLabels({"read"})->Inc(3);
  ops->WithLabels({"write"})->Inc();
  r.AddGauge("ciuic_test_depth", "Queue depth.")->Get()->Set(-2);
  std::string text = r.Render();
  EXPECT_NE(text.find("# HELP ciuic_test_ops_total Operations.\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE ciuic_test_ops_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("ciuic_test_ops_total{op=\"read\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("ciuic_test_ops_total{op=\"write\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE ciuic_test_depth gauge\nciuic_test_depth -2\n"), std::string::npos);
  auto ex = ParseExposition(text);
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  EXPECT_EQ(ex->Sum("ciuic_test_ops_total"), 4);
  EXPECT_EQ(ex->Sum("ciuic_test_ops_total", {{"op", "read"}}), 3);
  EXPECT_EQ(ex->types.at("ciuic_test_depth"), "gauge");
}

TEST(MetricsTest, LabelValuesAreEscapedAndParseBack) {
  Registry r;
  std::string nasty = "a\"b\\c\nd{e}=,f";
  r.AddCounter("ciuic_test_total", "x", {"job"})->WithLabels({nasty})->Inc(7);
  std::string text = r.Render();
  EXPECT_NE(text.find(R"(job="a\"b\\c\nd{e}=,f")"), std::string::npos) << text;
  auto ex = ParseExposition(text);
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  ASSERT_EQ(ex->samples.size(), 1u);
  EXPECT_EQ(ex->samples[0].labels.at("job"), nasty);
  EXPECT_EQ(ex->samples[0].value, 7);
}

TEST(MetricsTest, HelpNewlinesAndBackslashesAreEscaped) {
  Registry r;
  r.AddGauge("ciuic_test_g", "line one\nline \\ two")->Get()->Set(1);
  std::string text = r.Render();
  EXPECT_NE(text.find("# HELP ciuic_test_g line one\\nline \\\\ two\n"), std::string::npos) << text;
  EXPECT_TRUE(ParseExposition(text).ok());
}

TEST(MetricsTest, HistogramBucketsAreLogScaleAndCumulative) {
  Histogram h(Histogram::Shape{.first_bound = 8, .scale = 1e-6});
  EXPECT_EQ(h.BucketOf(0), 0);
  EXPECT_EQ(h.BucketOf(8), 0);
  EXPECT_EQ(h.BucketOf(9), 1);
  EXPECT_EQ(h.BucketOf(16), 1);
  EXPECT_EQ(h.BucketOf(17), 2);
  EXPECT_EQ(h.BucketOf(UINT64_MAX), Histogram::kBuckets);
  EXPECT_DOUBLE_EQ(h.Bound(0), 8e-6);
  EXPECT_DOUBLE_EQ(h.Bound(3), 64e-6);

  Registry r;
  auto* lat = r.AddHistogram("ciuic_test_latency_seconds", "Latency.", kLatencyMicros, {"op"});
  Histogram* read = lat->WithLabels({"read"});
  for (uint64_t us : std::vector<uint64_t>{1, 8, 9, 100, 1000, 1000000, UINT64_MAX / 2})
    read->Observe(us);
  std::string text = r.Render();
  EXPECT_NE(text.find("ciuic_test_latency_seconds_bucket{op=\"read\",le=\"8e-06\"} 2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ciuic_test_latency_seconds_bucket{op=\"read\",le=\"+Inf\"} 7\n"),
            std::string::npos);
  EXPECT_NE(text.find("ciuic_test_latency_seconds_count{op=\"read\"} 7\n"), std::string::npos);
  auto ex = ParseExposition(text);
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  EXPECT_EQ(ex->types.at("ciuic_test_latency_seconds"), "histogram");
}

TEST(MetricsTest, CallbacksEmitAtScrapeTime) {
  Registry r;
  int64_t used = 10;
  r.AddCallback("ciuic_test_used_bytes", "Used.", Type::kGauge, {"ost"}, [&](Emitter& e) {
    e.Add({"0"}, static_cast<double>(used));
    e.Add({"1"}, 0.5);
    e.Add({"0"}, 99);  // a duplicate series is dropped
  });
  used = 42;
  auto ex = ParseExposition(r.Render());
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  EXPECT_EQ(ex->Sum("ciuic_test_used_bytes", {{"ost", "0"}}), 42);
  EXPECT_EQ(ex->Sum("ciuic_test_used_bytes", {{"ost", "1"}}), 0.5);
}

TEST(MetricsTest, ACallbackRegisteredAgainReplacesTheFirst) {
  Registry r;
  r.AddCallback("ciuic_test_up", "x", Type::kGauge, {}, [](Emitter& e) { e.Add({}, 1); });
  r.AddCallback("ciuic_test_up", "x", Type::kGauge, {}, [](Emitter& e) { e.Add({}, 2); });
  auto ex = ParseExposition(r.Render());
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  ASSERT_EQ(ex->samples.size(), 1u);
  EXPECT_EQ(ex->samples[0].value, 2);
}

TEST(MetricsTest, RegisteringTwiceReturnsTheSameFamily) {
  Registry r;
  auto* a = r.AddCounter("ciuic_test_total", "x", {"op"});
  auto* b = r.AddCounter("ciuic_test_total", "x", {"op"});
  EXPECT_EQ(a, b);
  EXPECT_EQ(a->WithLabels({"x"}), b->WithLabels({"x"}));
}

TEST(MetricsTest, ConcurrentIncrementsAreAllCounted) {
  Registry r;
  Counter* c = r.AddCounter("ciuic_test_total", "x")->Get();
  Histogram* h = r.AddHistogram("ciuic_test_h", "x", kSizeBytes)->Get();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100000; ++i) {
        c->Inc();
        h->Observe(static_cast<uint64_t>(i));
      }
    });
  }
  // Scrapes while writers run must always parse (buckets stay cumulative).
  for (int i = 0; i < 20; ++i)
    ASSERT_TRUE(ParseExposition(r.Render()).ok());
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(c->value(), 400000u);
  EXPECT_EQ(h->count(), 400000u);
}

TEST(MetricsTest, ParserRejectsMalformedLines) {
  for (const char* bad : {
           "no_value\n",
           "1bad_name 1\n",
           "x{a=\"unterminated} 1\n",
           "x{a=b} 1\n",
           "x{a=\"1\",a=\"2\"} 1\n",
           "x{a=\"\\q\"} 1\n",
           "x 1 notatimestamp\n",
           "x abc\n",
           "# TYPE x nonsense\n",
           "# TYPE h histogram\nh_bucket{le=\"1\"} 5\nh_bucket{le=\"+Inf\"} 4\nh_count 4\n",
           "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_count 3\n",
           "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_count 1\n",
       }) {
    EXPECT_FALSE(ParseExposition(bad).ok()) << bad;
  }
  EXPECT_TRUE(ParseExposition("# a comment\n\nx{a=\"\"} 1 1700000000\ny -Inf\n").ok());
}

}  // namespace
}  // namespace ciuic::metrics
