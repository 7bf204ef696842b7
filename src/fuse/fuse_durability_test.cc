// fsync(2) of a directory through a real FUSE mount, served in this process over a MiniCluster in
// power-loss mode: a rename followed by fsync of its directory survives a power cut of every
// server; a rename without it does not (the MDS acknowledges namespace changes before its log is
// synced). Needs /dev/fuse and root (label fuse); skipped without them.
#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "fuse/fuse_server.h"
#include "testing/mini_cluster.h"

namespace ciuic::fuse {
namespace {

namespace fs = std::filesystem;

void WriteAndFsync(const std::string& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ASSERT_EQ(::fsync(fd), 0) << std::strerror(errno);
  ASSERT_EQ(::close(fd), 0);
}

void FsyncDir(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(::fsync(fd), 0) << std::strerror(errno);
  ASSERT_EQ(::close(fd), 0);
}

TEST(FuseDurabilityTest, FsyncOfADirectoryMakesTheRenameInItSurviveAPowerCut) {
  if (::access("/dev/fuse", R_OK | W_OK) != 0 || ::geteuid() != 0)
    GTEST_SKIP() << "needs /dev/fuse and root";
  testing::MiniClusterOptions co;
  co.power_loss = true;
  auto cluster = testing::MiniCluster::Start(co);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  ClientOptions o;
  o.ost_retry_ms = 1000;
  o.io_timeout_ms = 3000;
  o.mds_timeout_ms = 3000;
  auto client = (*cluster)->NewClient(o);
  ASSERT_TRUE(client.ok()) << client.status().ToString();

  const std::string mp = (*cluster)->dir() + "/mnt";
  fs::create_directories(mp);
  FuseOptions fo;
  fo.mountpoint = mp;
  fo.auto_unmount = false;
  auto server = std::make_unique<FuseServer>(std::move(*client), fo);
  ASSERT_TRUE(server->Mount().ok());
  std::thread loop([&] {
    server->Run().IgnoreError(); /* the test checks the files */
  });

  ASSERT_EQ(::mkdir((mp + "/ckpt").c_str(), 0755), 0);
  ASSERT_NO_FATAL_FAILURE(WriteAndFsync(mp + "/ckpt/a.tmp", "aaaa"));
  ASSERT_NO_FATAL_FAILURE(WriteAndFsync(mp + "/ckpt/c.tmp", "cccc"));
  ASSERT_EQ(::rename((mp + "/ckpt/a.tmp").c_str(), (mp + "/ckpt/a").c_str()), 0);
  ASSERT_NO_FATAL_FAILURE(FsyncDir(mp + "/ckpt"));
  ASSERT_EQ(::rename((mp + "/ckpt/c.tmp").c_str(), (mp + "/ckpt/c").c_str()), 0);

  // The power goes while the mount is up; then the mount goes away.
  ASSERT_TRUE((*cluster)->CutPower().ok());
  ASSERT_EQ(::umount2(mp.c_str(), MNT_DETACH), 0) << std::strerror(errno);
  loop.join();
  server.reset();
  ASSERT_TRUE((*cluster)->RestorePower().ok());

  auto c = (*cluster)->NewClient(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto a = (*c)->ReadFile("/ckpt/a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, "aaaa");
  EXPECT_EQ((*c)->Stat("/ckpt/a.tmp").status().code(), StatusCode::kNotFound);
  // No fsync of the directory after this rename: it was not durable.
  EXPECT_EQ((*c)->Stat("/ckpt/c").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE((*c)->Stat("/ckpt/c.tmp").ok());
}

}  // namespace
}  // namespace ciuic::fuse
