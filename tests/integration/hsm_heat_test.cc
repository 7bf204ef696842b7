// Per-file heat on a MiniCluster (docs/design.md "HSM policy"): reads that skip the MDS
// (Client::OpenResolved, the data loader's path) heat a file through the OSSes' read reports
// with their heartbeats, and the policy engine (`ciuic hsm sweep`) releases the coldest
// archived file first even when its atime is the more recent.
#include <fcntl.h>

#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "apps/hsm_policy_cmd.h"
#include "ciuic/client.h"
#include "testing/mini_cluster.h"
#include "tests/integration/test_util.h"

namespace ciuic::testing {
namespace {

Status WriteStriped(Client& c, const std::string& path, const std::string& data) {
  const FileLayout layout = Striped(4, 64 << 10);
  OpenOptions oo;
  oo.layout = &layout;
  CIUIC_ASSIGN_OR_RETURN(auto f, c.Open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644, oo));
  CIUIC_RETURN_IF_ERROR(f->Pwrite(data.data(), data.size(), 0).status());
  CIUIC_RETURN_IF_ERROR(f->Fsync());
  return f->Close();
}

double HeatOf(Client& c, const std::string& path) {
  auto s = c.HsmGetState(path);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s.ok() && s->has_heat) << path;
  return s.ok() ? s->heat : -1;
}

TEST(HsmHeatTest, ResolvedReadsHeatAFileAndTheSweepReleasesTheColdOneFirst) {
  auto cluster = MiniCluster::Start(MiniClusterOptions{});
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto cl = (*cluster)->NewClient(ClientOptions{});
  ASSERT_TRUE(cl.ok()) << cl.status().ToString();
  Client& c = **cl;
  const std::string data = Pattern(256 << 10, 3);
  // The hot file is the older one: ordered by atime it would go first.
  ASSERT_TRUE(WriteStriped(c, "/hot", data).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_TRUE(WriteStriped(c, "/cold", data).ok());
  // Each got one open (its create).
  EXPECT_NEAR(HeatOf(c, "/hot"), 1, 0.01);
  EXPECT_NEAR(HeatOf(c, "/cold"), 1, 0.01);
  ASSERT_TRUE(c.HsmArchive("/hot").ok());
  ASSERT_TRUE(c.HsmArchive("/cold").ok());

  // A reader of its own, as a data loader is: nothing of the file in its cache.
  auto reader = (*cluster)->NewClient(ClientOptions{});
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto st = (*reader)->Stat("/hot");
  ASSERT_TRUE(st.ok());
  const FileId id{st->ino, st->fid_mds, st->fid_ver};
  auto layout = (*reader)->GetLayoutAt(id);
  ASSERT_TRUE(layout.ok());
  {
    auto f = (*reader)->OpenResolved(id, *layout, st->size, "/hot");
    ASSERT_TRUE(f.ok());
    std::string got(64 << 10, '\0');
    for (int i = 0; i < 20; ++i) {
      auto n = (*f)->Pread(got.data(), got.size(), uint64_t(i % 4) * got.size());
      ASSERT_TRUE(n.ok()) << n.status().ToString();
    }
    ASSERT_TRUE((*f)->Close().ok());
  }
  // No MDS request carried those reads: the OSSes report them with their next heartbeat.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (HeatOf(c, "/hot") < 5 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_GE(HeatOf(c, "/hot"), 5);  // its open and at least one read per stripe object
  EXPECT_LT(HeatOf(c, "/cold"), 1.01);

  // Watermarks 0/0: every archived file goes, coldest first.
  cli::SweepOptions o;
  o.high_pct = 0;
  o.low_pct = 0;
  ::testing::internal::CaptureStdout();
  const int rc = cli::CmdHsmSweep(c, o);
  std::fflush(stdout);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0) << out;
  const size_t cold_at = out.find("released /cold");
  const size_t hot_at = out.find("released /hot");
  ASSERT_NE(cold_at, std::string::npos) << out;
  ASSERT_NE(hot_at, std::string::npos) << out;
  EXPECT_LT(cold_at, hot_at) << out;
}

}  // namespace
}  // namespace ciuic::testing
