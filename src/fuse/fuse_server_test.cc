// Unit tests of the FUSE daemon's pieces that need no mount: mount point checks and the layout
// xattr's value. The daemon itself is tested on real mounts by tests/fuse (label fuse).
#include "fuse/fuse_server.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "fuse/fuse_impl.h"

namespace ciuic::fuse {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ciuic-fuse-unit-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(MountpointTest, AcceptsAnEmptyDirectoryOnly) {
  TempDir t;
  EXPECT_TRUE(CheckMountpoint(t.path()).ok());
  EXPECT_EQ(CheckMountpoint(t.path() + "/missing").code(), StatusCode::kNotFound);
  std::ofstream(t.path() + "/file") << "x";
  EXPECT_EQ(CheckMountpoint(t.path() + "/file").code(), StatusCode::kNotADirectory);
  Status st = CheckMountpoint(t.path());
  EXPECT_EQ(st.code(), StatusCode::kNotEmpty);
  EXPECT_NE(st.message().find("not empty"), std::string::npos) << st.message();
  EXPECT_EQ(CheckMountpoint("").code(), StatusCode::kInvalidArgument);
}

TEST(MountpointTest, RefusesAMountPoint) {
  ASSERT_TRUE(IsMountpoint("/"));
  EXPECT_EQ(CheckMountpoint("/").code(), StatusCode::kBusy);
  TempDir t;
  EXPECT_FALSE(IsMountpoint(t.path()));
}

TEST(LayoutXattrTest, ParsesCountAndSize) {
  auto l = ParseLayoutXattr("count=4,size=64K\n");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_EQ(l->components.size(), 1u);
  EXPECT_EQ(l->components[0].stripe_count, 4u);
  EXPECT_EQ(l->components[0].stripe_size, 64u * 1024);
  EXPECT_EQ(l->components[0].end, kLayoutEof);
  auto d = ParseLayoutXattr("count=2");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->components[0].stripe_size, 1u << 20);
}

TEST(LayoutXattrTest, RejectsBadValues) {
  for (const char* bad : {"", "count=0", "count=x", "stripes=2", "count=2,size=", "count=100000",
                          "count=2,size=8G", "count2"}) {
    EXPECT_EQ(ParseLayoutXattr(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace ciuic::fuse
