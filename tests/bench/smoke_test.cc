// Smoke run of the in-process phases against a MiniCluster and a local directory with tiny
// sizes: every reported number is present and positive. No timing is asserted.
#include <filesystem>

#include <gtest/gtest.h>

#include "bench/phases.h"
#include "bench/report.h"
#include "bench/target.h"
#include "testing/mini_cluster.h"

namespace ciuic::bench {
namespace {

TEST(BenchSmokeTest, EveryPhaseReportsPositiveNumbersOnCiuicAndLocal) {
  auto cluster = testing::MiniCluster::Start({.num_oss = 2, .osts_per_oss = 1});
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  std::string dir = (*cluster)->dir() + "/local-target";

  auto opts = ParseOptions({"--size", "8M", "--block", "1M", "--clients", "2", "--threads", "2",
                            "--rand-seconds", "0.3", "--rand-file", "8M", "--latency-ops", "20",
                            "--meta-files", "20", "--meta-clients", "2", "--quick"});
  ASSERT_TRUE(opts.ok()) << opts.status().ToString();
  Report report;
  PhaseContext ctx;
  ctx.options = &*opts;
  ctx.report = &report;

  auto ciuic = NewCiuicTarget((*cluster)->cluster_file(), "/bench");
  ASSERT_TRUE(ciuic.ok()) << ciuic.status().ToString();
  auto local = NewPosixTarget("local", dir, false);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  std::vector<std::string> names;
  for (Target* t : {ciuic->get(), local->get()}) {
    names.push_back(t->name());
    for (auto fn : {RunSeqPhase, RunRandPhase, RunLatencyPhase, RunMetaPhase}) {
      Status s = fn(*t, ctx);
      ASSERT_TRUE(s.ok()) << t->name() << ": " << s.ToString();
    }
  }
  report.SetTargets(names);
  nlohmann::json j = report.ToJson();
  ASSERT_TRUE(ValidateReportJson(j).ok()) << ValidateReportJson(j).ToString();
  for (const std::string target : {"ciuic", "local"}) {
    for (const std::string name :
         {"seq_write_fpp", "seq_read_fpp", "seq_write_shared", "seq_read_shared", "rand_read_4k",
          "lat_read_4k_p50", "lat_read_4k_p99", "lat_read_4k_p999", "lat_stat_p99",
          "lat_create_p99", "lat_unlink_p99", "meta_create_shared", "meta_stat_shared",
          "meta_readdir_shared", "meta_unlink_shared", "meta_all_shared", "meta_all_perclient",
          "meta_readdir_perclient"}) {
      const Metric* m = report.Find(name, target);
      ASSERT_NE(m, nullptr) << name << " on " << target << " missing";
      ASSERT_EQ(m->runs.size(), 1u) << name;
      EXPECT_GT(m->runs[0], 0) << name << " on " << target;
    }
    const Metric* seq = report.Find("seq_read_fpp", target);
    // Ring rows are ciuic's alone.
    for (const std::string name : {"seq_write_ring", "seq_read_ring", "seq_write_async",
                                   "seq_read_async", "rand_read_4k_ring"}) {
      const Metric* m = report.Find(name, target);
      if (target == "ciuic") {
        ASSERT_NE(m, nullptr) << name << " missing";
        EXPECT_GT(m->runs[0], 0) << name;
      } else {
        EXPECT_EQ(m, nullptr) << name << " on " << target;
      }
    }
    ASSERT_EQ(seq->extra["first_done_s"].size(), 1u);
    EXPECT_LE(seq->extra["first_done_s"][0].get<double>(),
              seq->extra["last_done_s"][0].get<double>());
  }
  // The phases cleaned up after themselves.
  size_t left = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir))
    ++left;
  EXPECT_EQ(left, 0u);
}

}  // namespace
}  // namespace ciuic::bench
