// Durability under simulated power loss (ARCHITECTURE Decision 2) on a MiniCluster in power-loss
// mode: OSSes on in-memory engines and the MDS on a file system that drops unsynced bytes, so a
// power cut loses exactly what no fsync made durable (kill -9 keeps the page cache and proves
// nothing). Covers Client::FsyncDir (namespace changes are acknowledged before they are durable)
// and, under a mixed workload, that everything acknowledged survives cuts of the whole cluster
// and of single servers.
#include <fcntl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "ciuic/client.h"
#include "common/time_util.h"
#include "testing/acked_workload.h"
#include "testing/mini_cluster.h"
#include "tests/integration/test_util.h"

namespace ciuic::testing {
namespace {

// Torn tails (a random part of each unsynced tail of the MDS's files survives the cut) only with
// CIUIC_TEST_TORN=1: under load they still lose synced namespace changes now and then (an open
// finding, docs/design.md "Durability epochs"), so CI cuts at synced lengths.
bool TornTails() {
  const char* v = std::getenv("CIUIC_TEST_TORN");
  return v != nullptr && std::string(v) == "1";
}

std::unique_ptr<MiniCluster> StartPowerLossCluster() {
  MiniClusterOptions o;
  o.power_loss = true;
  auto c = MiniCluster::Start(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

// Short bounds, so IO cut off by a power cut fails soon instead of retrying for 30 s.
std::unique_ptr<Client> Connect(MiniCluster* c) {
  ClientOptions o;
  o.uid = 0;
  o.gid = 0;
  o.ost_retry_ms = 1000;
  o.io_timeout_ms = 3000;
  o.mds_timeout_ms = 3000;
  auto cl = c->NewClient(o);
  EXPECT_TRUE(cl.ok()) << cl.status().ToString();
  return cl.ok() ? std::move(*cl) : nullptr;
}

Status WriteSynced(Client& c, const std::string& path, const std::string& data) {
  CIUIC_ASSIGN_OR_RETURN(auto f, c.Open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644));
  CIUIC_RETURN_IF_ERROR(f->Pwrite(data.data(), data.size(), 0).status());
  CIUIC_RETURN_IF_ERROR(f->Fsync());
  return f->Close();
}

TEST(PowerLossTest, UnsyncedChangesAreLostAndFsyncedDataSurvives) {
  auto cluster = StartPowerLossCluster();
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  const std::string data = Pattern(3 << 20, 7);
  ASSERT_TRUE(WriteSynced(*c, "/synced", data).ok());
  ASSERT_TRUE(c->Mkdir("/unsynced-dir").ok());
  ASSERT_TRUE(c->WriteFile("/unsynced-file", "gone").ok());  // closed, never fsynced
  EXPECT_GT(cluster->UnsyncedMdsBytes(), 0u);
  c.reset();
  ASSERT_TRUE(cluster->PowerCycle().ok());
  c = Connect(cluster.get());
  ASSERT_TRUE(c);
  auto got = c->ReadFile("/synced");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data);
  // The simulation is real: what nothing synced is gone.
  EXPECT_EQ(c->Stat("/unsynced-dir").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c->Stat("/unsynced-file").status().code(), StatusCode::kNotFound);
}

TEST(PowerLossTest, RenameIsDurableAfterFsyncDirAndLostWithoutIt) {
  auto cluster = StartPowerLossCluster();
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->Mkdir("/ckpt").ok());
  ASSERT_TRUE(WriteSynced(*c, "/ckpt/a.tmp", "aaaa").ok());  // fsync also makes /ckpt durable
  ASSERT_TRUE(WriteSynced(*c, "/ckpt/c.tmp", "cccc").ok());
  ASSERT_TRUE(c->Rename("/ckpt/a.tmp", "/ckpt/a").ok());
  ASSERT_TRUE(c->Mkdir("/ckpt/sub").ok());
  ASSERT_TRUE(c->FsyncDir("/ckpt").ok());
  ASSERT_TRUE(c->Rename("/ckpt/c.tmp", "/ckpt/c").ok());  // no FsyncDir after it
  EXPECT_EQ(c->FsyncDir("/missing").code(), StatusCode::kNotFound);
  c.reset();
  ASSERT_TRUE(cluster->PowerCycle().ok());
  c = Connect(cluster.get());
  ASSERT_TRUE(c);
  auto a = c->ReadFile("/ckpt/a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, "aaaa");
  EXPECT_EQ(c->Stat("/ckpt/a.tmp").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(c->Stat("/ckpt/sub").ok());
  // The rename after the last FsyncDir was acknowledged but never made durable.
  EXPECT_EQ(c->Stat("/ckpt/c").status().code(), StatusCode::kNotFound);
  auto cc = c->ReadFile("/ckpt/c.tmp");
  ASSERT_TRUE(cc.ok()) << cc.status().ToString();
  EXPECT_EQ(*cc, "cccc");
}

TEST(PowerLossTest, SyncAfterTheServersLostPowerReportsThatAcknowledgedChangesMayBeLost) {
  auto cluster = StartPowerLossCluster();
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  ASSERT_TRUE(WriteSynced(*c, "/a", "aaaa").ok());
  // A namespace change acknowledged, then the MDS loses power before it is synced: the client
  // goes on (it reconnects), but a sync must not claim the change is durable.
  ASSERT_TRUE(c->Rename("/a", "/b").ok());
  ASSERT_TRUE(cluster->PowerCycleMds().ok());
  Status st = c->FsyncDir("/");
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.ToString();
  EXPECT_NE(st.message().find("may be lost"), std::string::npos) << st.ToString();
  EXPECT_TRUE(c->FsyncDir("/").ok());  // reported once; nothing unsynced is left
  EXPECT_EQ(c->Stat("/b").status().code(), StatusCode::kNotFound);

  // Data: a write acknowledged, the OSS loses power before the fsync.
  auto f = c->Open("/d", O_CREAT | O_WRONLY, 0644);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const std::string data = Pattern(1 << 20, 3);
  ASSERT_TRUE((*f)->Pwrite(data.data(), data.size(), 0).ok());
  ASSERT_TRUE((*f)->Flush().ok());
  ASSERT_TRUE(cluster->PowerCycleOss(0).ok());
  ASSERT_TRUE(cluster->PowerCycleOss(1).ok());
  ASSERT_TRUE(cluster->WaitForOsts(cluster->num_osts()).ok());
  st = (*f)->Fsync();
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.ToString();
  EXPECT_NE(st.message().find("may be lost"), std::string::npos) << st.ToString();
  (*f)->Close().IgnoreError();  // the test checks the Fsync
}

// Found by ciuic-crashloop: two threads' changes in two directories, the MDS loses power, and
// the first sync (of one directory) consumed the whole loss report, so the other directory's
// sync answered OK for a mkdir the MDS had lost. Each sync must hear of the losses it covers.
TEST(PowerLossTest, ALossIsReportedToTheSyncOfEveryDirectoryItTouched) {
  auto cluster = StartPowerLossCluster();
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->Mkdir("/a").ok());
  ASSERT_TRUE(c->Mkdir("/b").ok());
  ASSERT_TRUE(c->Mkdir("/c").ok());
  ASSERT_TRUE(c->FsyncDir("/").ok());
  ASSERT_TRUE(c->Mkdir("/a/x").ok());  // acknowledged, not synced
  ASSERT_TRUE(c->Mkdir("/b/y").ok());
  ASSERT_TRUE(cluster->PowerCycleMds().ok());
  Status b = c->FsyncDir("/b");
  EXPECT_EQ(b.code(), StatusCode::kIoError) << b.ToString();
  Status a = c->FsyncDir("/a");
  EXPECT_EQ(a.code(), StatusCode::kIoError) << a.ToString();
  EXPECT_NE(a.message().find("may be lost"), std::string::npos) << a.ToString();
  EXPECT_TRUE(c->FsyncDir("/c").ok());  // nothing of /c was lost
  EXPECT_TRUE(c->FsyncDir("/a").ok());  // reported once
  EXPECT_EQ(c->Stat("/a/x").status().code(), StatusCode::kNotFound);
}

TEST(PowerLossTest, AnEmptyNewFileFsyncedSurvivesAPowerCut) {
  auto cluster = StartPowerLossCluster();
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  auto f = c->Open("/empty", O_CREAT | O_EXCL | O_WRONLY, 0644);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE((*f)->Fsync().ok());  // nothing written: the create alone must become durable
  ASSERT_TRUE((*f)->Close().ok());
  c.reset();
  ASSERT_TRUE(cluster->PowerCycle().ok());
  c = Connect(cluster.get());
  ASSERT_TRUE(c);
  auto st = c->Stat("/empty");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->size, 0u);
}

// Runs `wl` on a fresh client until `more` further operations were acknowledged (or 60 s
// passed), then calls `crash`, and verifies through another fresh client after `recover`.
template <typename Crash, typename Recover>
AckedWorkloadStats CrashUnderLoad(
    MiniCluster* cluster, AckedWorkload* wl, uint64_t more, Crash crash, Recover recover) {
  auto c = Connect(cluster);
  EXPECT_TRUE(c);
  if (!c)
    return {};
  const uint64_t want = wl->acked() + more;
  AckedWorkloadStats run;
  std::thread t([&] { run = wl->Run(*c); });
  const int64_t deadline = MonoMillis() + 60000;
  while (wl->acked() < want && MonoMillis() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // polling a condition
  EXPECT_GE(wl->acked(), want) << "the workload made too little progress";
  Status crashed = crash();
  wl->Stop();
  t.join();
  c.reset();
  EXPECT_TRUE(crashed.ok()) << crashed.ToString();
  Status back = recover();
  EXPECT_TRUE(back.ok()) << back.ToString();
  auto v = Connect(cluster);
  EXPECT_TRUE(v);
  if (!v)
    return {};
  AckedWorkloadStats stats = wl->Verify(*v);
  std::printf(
      "ops %lu acked %lu failed %lu | verified %lu files, %lu bytes, losses %lu, false "
      "corruptions %lu\n",
      static_cast<unsigned long>(run.ops), static_cast<unsigned long>(run.acked),
      static_cast<unsigned long>(run.failed), static_cast<unsigned long>(stats.files),
      static_cast<unsigned long>(stats.bytes_verified), static_cast<unsigned long>(stats.losses),
      static_cast<unsigned long>(stats.false_corruptions));
  for (const auto& p : stats.problems)
    ADD_FAILURE() << p;
  EXPECT_EQ(stats.losses, 0u);
  EXPECT_EQ(stats.false_corruptions, 0u);
  return stats;
}

TEST(PowerLossTest, EverythingAcknowledgedSurvivesWholeClusterPowerCutsUnderLoad) {
  const uint64_t seed = std::random_device{}();
  std::printf("seed %lu\n", static_cast<unsigned long>(seed));
  auto cluster = StartPowerLossCluster();
  ASSERT_TRUE(cluster);
  AckedWorkloadOptions o;
  o.seed = seed;
  AckedWorkload wl(o);
  std::mt19937_64 rng(seed);
  uint64_t bytes = 0;
  for (int cycle = 0; cycle < 4; ++cycle) {
    const uint64_t torn = TornTails() && cycle % 2 == 1 ? seed + static_cast<uint64_t>(cycle) : 0;
    AckedWorkloadStats s = CrashUnderLoad(
        cluster.get(), &wl, 20 + rng() % 40, [&] { return cluster->CutPower(torn); },
        [&] { return cluster->RestorePower(); });
    bytes += s.bytes_verified;
    if (HasFailure())
      break;
  }
  EXPECT_GT(wl.durable_files(), 20u);
  EXPECT_GT(bytes, 0u);
}

TEST(PowerLossTest, EverythingAcknowledgedSurvivesPowerCutsOfSingleServersUnderLoad) {
  const uint64_t seed = std::random_device{}();
  std::printf("seed %lu\n", static_cast<unsigned long>(seed));
  auto cluster = StartPowerLossCluster();
  ASSERT_TRUE(cluster);
  AckedWorkloadOptions o;
  o.seed = seed;
  AckedWorkload wl(o);
  std::mt19937_64 rng(seed);
  for (int cycle = 0; cycle < 4 && !HasFailure(); ++cycle) {
    // An OSS (its peer and the MDS keep running) or the MDS alone.
    const int victim = static_cast<int>(rng() % 3);
    std::printf("cycle %d: power cut of %s\n", cycle, victim < 2 ? "an OSS" : "the MDS");
    CrashUnderLoad(
        cluster.get(), &wl, 20 + rng() % 40,
        [&] {
          return victim < 2 ? cluster->PowerCycleOss(victim)
                            : cluster->PowerCycleMds(TornTails() ? seed : 0);
        },
        [&] { return cluster->WaitForOsts(cluster->num_osts()); });
  }
}

}  // namespace
}  // namespace ciuic::testing
