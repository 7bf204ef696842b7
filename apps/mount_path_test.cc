#include "mount_path.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace ciuic::cli {
namespace {
namespace fs = std::filesystem;

class MountPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ciuic-mount-path-" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "mnt dir" / "sub");
    fs::create_directories(dir_ / "other");
    fs::create_directories(dir_ / "mnt dir2");
    mountinfo_ = (dir_ / "mountinfo").string();
    std::ofstream(mountinfo_)
        << "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        << "90 22 0:50 / " << Escape((dir_ / "mnt dir").string())
        << " rw,nosuid,nodev,relatime shared:40 - fuse.ciuic ciuic rw,user_id=0,group_id=0\n"
        << "91 22 0:51 / " << (dir_ / "other").string() << " rw,relatime - fuse.sshfs host:/ rw\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string Escape(const std::string& s) {
    std::string out;
    for (char c : s)
      out += c == ' ' ? std::string("\\040") : std::string(1, c);
    return out;
  }

  fs::path dir_;
  std::string mountinfo_;
};

TEST_F(MountPathTest, MapsPathsInsideACiuicMount) {
  auto m = ResolveMountedPath((dir_ / "mnt dir" / "sub").string(), mountinfo_);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->mountpoint, (dir_ / "mnt dir").string());
  EXPECT_EQ(m->cluster_path, "/sub");
  // The mount point itself is the cluster's root; a missing last component is allowed.
  EXPECT_EQ(ResolveMountedPath((dir_ / "mnt dir").string(), mountinfo_)->cluster_path, "/");
  EXPECT_EQ(
      ResolveMountedPath((dir_ / "mnt dir" / "sub" / "new.bin").string(), mountinfo_)->cluster_path,
      "/sub/new.bin");
}

TEST_F(MountPathTest, IgnoresOtherFileSystemsAndPrefixLookalikes) {
  EXPECT_FALSE(ResolveMountedPath((dir_ / "other").string(), mountinfo_).has_value());
  EXPECT_FALSE(ResolveMountedPath((dir_ / "mnt dir2").string(), mountinfo_).has_value());
  EXPECT_FALSE(ResolveMountedPath("/no/such/dir/at/all", mountinfo_).has_value());
  EXPECT_FALSE(ResolveMountedPath((dir_ / "mnt dir").string(), "/no/such/mountinfo"));
}

TEST(MountFieldTest, UnescapesOctal) {
  EXPECT_EQ(UnescapeMountField("/a\\040b\\134c\\011"), "/a b\\c\t");
  EXPECT_EQ(UnescapeMountField("/plain\\"), "/plain\\");
}

}  // namespace
}  // namespace ciuic::cli
