#include "bench/cpu_use.h"

#include <gtest/gtest.h>

#include "bench/report.h"

namespace ciuic::bench {
namespace {

TEST(CpuUseTest, ParsesTheMachinesBusyTimeAndContextSwitches) {
  const std::string text =
      "cpu  100 5 50 1000 20 3 2 7 0 0\n"
      "cpu0 50 2 25 500 10 1 1 3 0 0\n"
      "intr 12345 0 0\n"
      "ctxt 987654\n"
      "btime 1700000000\n";
  CpuUse u;
  ASSERT_TRUE(ParseProcStat(text, 100, &u).ok());
  // user + nice + system + irq + softirq: not idle, iowait or steal.
  EXPECT_DOUBLE_EQ(u.machine_s, 1.60);
  EXPECT_EQ(u.machine_cs, 987654u);
}

TEST(CpuUseTest, RefusesTextWithoutTheLinesItNeeds) {
  CpuUse u;
  EXPECT_FALSE(ParseProcStat("ctxt 5\n", 100, &u).ok());
  EXPECT_FALSE(ParseProcStat("cpu  1 2 3 4 5 6 7 8\n", 100, &u).ok());
  EXPECT_FALSE(ParseProcStat("cpu  1 2\nctxt 5\n", 100, &u).ok());
  EXPECT_FALSE(ParseProcStat("cpu  1 2 3 4 5 6 7 8\nctxt x\n", 100, &u).ok());
  EXPECT_FALSE(ParseProcStat("cpu  1 2 3 4 5 6 7 8\nctxt 5\n", 0, &u).ok());
}

TEST(CpuUseTest, ThisMachinesCountersMoveWithWork) {
  const CpuUse a = ReadCpuUse();
  volatile uint64_t x = 0;
  for (uint64_t i = 0; i < 50'000'000; ++i)
    x = x + i;
  const CpuUse d = ReadCpuUse() - a;
  EXPECT_GT(d.self_s, 0.0);
  EXPECT_GT(d.machine_s, 0.0);  // the machine was not idle meanwhile
}

TEST(CpuUseTest, ReportsPerOperationFiguresLowerIsBetter) {
  Report r;
  CpuUse used;
  used.machine_s = 2.0;
  used.self_s = 0.5;
  used.machine_cs = 3000;
  ReportCpuPerOp(&r, "meta", "meta_stat_shared", "ciuic", used, 1000);
  const Metric* cpu = r.Find("meta_stat_shared_cpu_us", "ciuic");
  ASSERT_NE(cpu, nullptr);
  EXPECT_DOUBLE_EQ(cpu->runs.back(), 2000.0);
  EXPECT_FALSE(cpu->higher_is_better);
  EXPECT_DOUBLE_EQ(r.Find("meta_stat_shared_client_cpu_us", "ciuic")->runs.back(), 500.0);
  EXPECT_DOUBLE_EQ(r.Find("meta_stat_shared_other_cpu_us", "ciuic")->runs.back(), 1500.0);
  EXPECT_DOUBLE_EQ(r.Find("meta_stat_shared_ctxsw", "ciuic")->runs.back(), 3.0);
  // Coarse ticks may show the machine below this process: never a negative "other".
  used.machine_s = 0.4;
  ReportCpuPerOp(&r, "meta", "meta_unlink_shared", "ciuic", used, 1000);
  EXPECT_DOUBLE_EQ(r.Find("meta_unlink_shared_other_cpu_us", "ciuic")->runs.back(), 0.0);
}

}  // namespace
}  // namespace ciuic::bench
