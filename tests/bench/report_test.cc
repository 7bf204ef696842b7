#include "bench/report.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "bench/external.h"
#include "bench/limits.h"

namespace ciuic::bench {
namespace {

TEST(BenchReportTest, JsonHasTheSchema) {
  Report r;
  r.SetTargets({"local", "ciuic"});
  r.Add("seq", "seq_read_fpp", "local", 1.0, "GB/s", true);
  r.Add("seq", "seq_read_fpp", "local", 3.0, "GB/s", true);
  r.Add("seq", "seq_read_fpp", "local", 2.0, "GB/s", true);
  r.Add("latency", "lat_read_4k_p99", "ciuic", 80, "us", false);
  r.Skip("scaling", "ciuic", "needs root");
  r.Note("caches dropped");
  nlohmann::json j = r.ToJson();
  ASSERT_TRUE(ValidateReportJson(j).ok()) << ValidateReportJson(j).ToString();
  ASSERT_EQ(j["results"].size(), 2u);
  const auto& m = j["results"][0];
  EXPECT_EQ(m["name"], "seq_read_fpp");
  EXPECT_EQ(m["value"], 2.0);  // the median
  EXPECT_EQ(m["min"], 1.0);
  EXPECT_EQ(m["max"], 3.0);
  EXPECT_EQ(m["runs"].size(), 3u);
  EXPECT_EQ(j["results"][1]["higher_is_better"], false);
  EXPECT_EQ(j["skipped"][0]["reason"], "needs root");
  // Round trip through text.
  EXPECT_TRUE(ValidateReportJson(nlohmann::json::parse(j.dump())).ok());
}

TEST(BenchReportTest, ValidateRejectsBrokenDocuments) {
  Report r;
  r.Add("seq", "seq_read_fpp", "local", 1.0, "GB/s", true);
  nlohmann::json j = r.ToJson();
  nlohmann::json bad = j;
  bad["results"][0].erase("unit");
  EXPECT_FALSE(ValidateReportJson(bad).ok());
  bad = j;
  bad["results"][0]["value"] = "fast";
  EXPECT_FALSE(ValidateReportJson(bad).ok());
  bad = j;
  bad.erase("schema");
  EXPECT_FALSE(ValidateReportJson(bad).ok());
  bad = j;
  bad["results"][0]["runs"] = nlohmann::json::array();
  EXPECT_FALSE(ValidateReportJson(bad).ok());
}

TEST(BenchReportTest, ExternalResultsAreReadBack) {
  Report r;
  auto j = nlohmann::json::parse(R"({"phase": "loader", "results": [
      {"name": "loader_samples_per_s", "target": "ciuic", "value": 1234.5, "unit": "samples/s",
       "higher_is_better": true},
      {"name": "loader_first_batch", "target": "local", "value": 0.2, "unit": "s",
       "higher_is_better": false}], "notes": ["warm cache on local"]})");
  ASSERT_TRUE(AddExternalResults("loader", j, &r).ok());
  ASSERT_EQ(r.metrics().size(), 2u);
  EXPECT_EQ(r.metrics()[0].phase, "loader");
  EXPECT_EQ(r.metrics()[0].runs[0], 1234.5);
  EXPECT_FALSE(r.metrics()[1].higher_is_better);
  EXPECT_TRUE(ValidateReportJson(r.ToJson()).ok());
}

TEST(BenchReportTest, MalformedExternalResultsAreErrors) {
  Report r;
  auto no_results = nlohmann::json::parse(R"({"phase": "loader"})");
  EXPECT_EQ(AddExternalResults("loader", no_results, &r).code(), StatusCode::kInvalidArgument);
  auto no_value =
      nlohmann::json::parse(R"({"results": [{"name": "x", "target": "ciuic", "unit": "s"}]})");
  Status s = AddExternalResults("loader", no_value, &r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("value"), std::string::npos);
}

TEST(BenchReportTest, ExternalSkippedPartsAreReported) {
  Report r;
  auto j = nlohmann::json::parse(R"({"results": [],
      "skipped": [{"target": "s3fs", "reason": "s3fs is not installed"}, {"reason": "no s3rver"},
                  "not an object"]})");
  ASSERT_TRUE(AddExternalResults("tier", j, &r).ok());
  ASSERT_EQ(r.skipped().size(), 2u);
  EXPECT_EQ(r.skipped()[0]["phase"], "tier");
  EXPECT_EQ(r.skipped()[0]["target"], "s3fs");
  EXPECT_EQ(r.skipped()[0]["reason"], "s3fs is not installed");
  EXPECT_EQ(r.skipped()[1]["target"], "");
}

TEST(BenchReportTest, MissingExternalScriptIsSkippedNotFailed) {
  Report r;
  ExternalPhase p;
  p.phase = "checkpoint";
  p.script = "/nonexistent/phase_checkpoint.py";
  ASSERT_TRUE(RunExternalPhase(p, &r).ok());
  ASSERT_EQ(r.skipped().size(), 1u);
  EXPECT_NE(r.skipped()[0]["reason"].get<std::string>().find("does not exist"), std::string::npos);
}

TEST(BenchReportTest, ResultsAboveThePhysicalLimitAreFlagged) {
  Report r;
  r.Add("seq", "seq_read_fpp", "local", 5.0, "GB/s", true);   // above disk 2.0
  r.Add("seq", "seq_read_fpp", "ciuic", 1.0, "GB/s", true);   // under both
  r.Add("seq", "seq_write_fpp", "ciuic", 2.0, "GB/s", true);  // 1.2 x 1.5 (write slack)
  r.Add("rand", "rand_read_4k", "local", 70000, "IOPS", true);
  Limits l;
  l.disk_read_gbps = 2.0;
  l.disk_write_gbps = 2.0;
  l.disk_rand_iops = 73000;
  l.loopback_gbps = 1.2;
  FlagCacheInflated(r, l, {{"local", false}, {"ciuic", true}});
  EXPECT_TRUE(r.Find("seq_read_fpp", "local")->cache_inflated);
  EXPECT_FALSE(r.Find("seq_read_fpp", "ciuic")->cache_inflated);
  EXPECT_TRUE(r.Find("seq_write_fpp", "ciuic")->cache_inflated);  // loopback is its limit
  EXPECT_FALSE(r.Find("rand_read_4k", "local")->cache_inflated);
  EXPECT_NE(r.Find("seq_read_fpp", "local")->note.find("cache-inflated"), std::string::npos);
}

}  // namespace
}  // namespace ciuic::bench

namespace ciuic::bench {
namespace {

TEST(BenchReportTest, ChartsArePngFiles) {
  if (::access("/usr/bin/gnuplot", X_OK) != 0)
    GTEST_SKIP() << "gnuplot not installed";
  Report r;
  r.AddSeries("scaling_read", "ciuic", {{1, 0.024}, {2, 0.047}, {4, 0.093}});
  r.AddSeries("lat_read_4k", "local", {{50, 120}, {99, 900}, {99.9, 3000}});
  std::string dir = ::testing::TempDir() + "/bench-charts";
  auto files = r.WriteCharts(dir);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_EQ(files->size(), 2u);
  for (const auto& f : *files) {
    std::ifstream in(f, std::ios::binary);
    char magic[4] = {};
    in.read(magic, 4);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG") << f;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ciuic::bench
