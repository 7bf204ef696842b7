// Tests of the crash tests' verifier itself: AckedWorkload::Verify must report what a crash
// could do wrong (a lost file, changed bytes, a corrupt object), or the crash tests and
// ciuic-crashloop that rely on it would pass whatever happened.
#include "testing/acked_workload.h"

#include <fcntl.h>

#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/fid.h"
#include "common/time_util.h"
#include "testing/mini_cluster.h"
#include "tests/integration/test_util.h"

namespace ciuic::testing {
namespace {

// Runs `wl` on `client` until it has acknowledged at least `n` operations.
void RunUntil(AckedWorkload* wl, Client* client, uint64_t n) {
  AckedWorkloadStats run;
  std::thread t([&] { run = wl->Run(*client); });
  const int64_t deadline = MonoMillis() + 60000;
  while (wl->acked() < n && MonoMillis() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // polling a condition
  wl->Stop();
  t.join();
  EXPECT_GE(wl->acked(), n);
  EXPECT_EQ(run.failed, 0u);
}

TEST(AckedWorkloadTest, VerifierReportsLostFilesChangedBytesAndCorruptObjects) {
  auto cluster = MiniCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto c = (*cluster)->NewClient();
  ASSERT_TRUE(c.ok());
  AckedWorkloadOptions o;
  o.seed = 42;
  AckedWorkload wl(o);
  RunUntil(&wl, c->get(), 60);
  AckedWorkloadStats clean = wl.Verify(**c);
  EXPECT_EQ(clean.losses, 0u);
  EXPECT_EQ(clean.false_corruptions, 0u);
  EXPECT_GT(clean.bytes_verified, 0u);

  // Three acknowledged files with data, damaged three ways behind the workload's back.
  std::vector<std::string> victims;
  for (const auto& [path, size] : wl.AcknowledgedFiles()) {
    if (size > 8192 && victims.size() < 3)
      victims.push_back(path);
  }
  ASSERT_EQ(victims.size(), 3u);
  ASSERT_TRUE((*c)->Unlink(victims[0]).ok());
  {
    auto f = (*c)->Open(victims[1], O_WRONLY, 0);
    ASSERT_TRUE(f.ok());
    auto old = (*c)->ReadFile(victims[1]);
    ASSERT_TRUE(old.ok());
    const char x = static_cast<char>((*old)[100] ^ 1);
    ASSERT_TRUE((*f)->Pwrite(&x, 1, 100).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  {
    auto st = (*c)->Stat(victims[2]);
    auto l = (*c)->GetLayout(victims[2]);
    ASSERT_TRUE(st.ok() && l.ok());
    const uint32_t ost = l->components.at(0).osts.at(0);
    ObjectId oid{Fid{st->ino, st->fid_mds, st->fid_ver}, l->components[0].id, 0};
    const std::string obj = FindObjectFile((*cluster)->OstDir(ost), oid.FileName());
    ASSERT_FALSE(obj.empty());
    std::fstream io(obj, std::ios::in | std::ios::out | std::ios::binary);
    char b = 0;
    io.seekg(10);
    io.read(&b, 1);
    b = static_cast<char>(b ^ 0x20);
    io.seekp(10);
    io.write(&b, 1);
  }
  auto fresh = (*cluster)->NewClient();
  ASSERT_TRUE(fresh.ok());
  AckedWorkloadStats s = wl.Verify(**fresh);
  EXPECT_EQ(s.losses, 3u);
  EXPECT_EQ(s.false_corruptions, 1u);
  std::string all;
  for (const auto& p : s.problems)
    all += p + "\n";
  EXPECT_NE(all.find(victims[0] + ": missing"), std::string::npos) << all;
  EXPECT_NE(all.find(victims[1] + ": acknowledged bytes"), std::string::npos) << all;
  EXPECT_NE(all.find(victims[2] + ": FALSE CORRUPTION"), std::string::npos) << all;
}

TEST(AckedWorkloadTest, ProcessCrashModeAcknowledgesUnsyncedChanges) {
  auto cluster = MiniCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto c = (*cluster)->NewClient();
  ASSERT_TRUE(c.ok());
  AckedWorkloadOptions o;
  o.seed = 7;
  o.process_crash = true;
  AckedWorkload wl(o);
  AckedWorkloadStats run;
  std::thread t([&] { run = wl.Run(**c); });
  while (wl.acked() < 80)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // polling a condition
  wl.Stop();
  t.join();
  // Nothing crashed: every operation that ran was acknowledged, synced or not.
  EXPECT_EQ(run.failed, 0u);
  EXPECT_GE(run.acked, 80u);
  AckedWorkloadStats s = wl.Verify(**c);
  EXPECT_EQ(s.losses, 0u);
  EXPECT_GT(s.files, 10u);
}

}  // namespace
}  // namespace ciuic::testing
