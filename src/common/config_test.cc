#include "common/config.h"

#include <unistd.h>

#include <fstream>

#include <gtest/gtest.h>

namespace ciuic {
namespace {

TEST(ParseSizeTest, AcceptsUnits) {
  EXPECT_EQ(ParseSize("4096").value(), 4096u);
  EXPECT_EQ(ParseSize("64K").value(), 64u << 10);
  EXPECT_EQ(ParseSize("1MiB").value(), 1u << 20);
  EXPECT_EQ(ParseSize("4g").value(), 4ull << 30);
  EXPECT_EQ(ParseSize("1.5G").value(), 3ull << 29);
  EXPECT_EQ(ParseSize(" 2 TiB ").value(), 2ull << 40);
}

TEST(ParseSizeTest, RejectsGarbage) {
  for (const char* bad : {"", "abc", "-1", "12Q", "1.5", "1e30G", "nan"}) {
    auto r = ParseSize(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(ClusterFileTest, SaveLoadRoundTrip) {
  char tmpl[] = "/tmp/ciuic-cf-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string path = std::string(tmpl) + "/cluster.conf";
  ClusterFile cf;
  cf.cluster_uuid = NewUuid();
  cf.mds = HostPort{"127.0.0.1", 7777};
  cf.secret_hex = HexEncode(RandomBytes(32));
  ASSERT_TRUE(cf.Save(path).ok());
  auto back = ClusterFile::Load(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->cluster_uuid, cf.cluster_uuid);
  EXPECT_EQ(back->mds.port, 7777);
  EXPECT_EQ(back->SecretBytes().size(), 32u);
  unlink(path.c_str());
  rmdir(tmpl);
}

TEST(ClusterFileTest, MissingAndMalformed) {
  EXPECT_FALSE(ClusterFile::Load("/nonexistent/ciuic.conf").ok());
  char tmpl[] = "/tmp/ciuic-cf-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string path = std::string(tmpl) + "/bad.conf";
  std::ofstream(path) << "mds = nohostport\n";
  EXPECT_EQ(ClusterFile::Load(path).status().code(), StatusCode::kInvalidArgument);
  unlink(path.c_str());
  rmdir(tmpl);
}

TEST(ClusterFileTest, KeyIdMustBeANumberThatFits) {
  const std::string rest = "mds = 127.0.0.1:1\nsecret = " + std::string(32, 'a') + "\n";
  auto ok = ClusterFile::Parse("key_id = 4294967295\n" + rest, "cf");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->key_id, 4294967295u);
  // strtoul took these as 1, 4294967295, 0 and 12.
  for (const char* bad : {"4294967297", "-1", "x", "12abc", "", "0"}) {
    auto r = ClusterFile::Parse(std::string("key_id = ") + bad + "\n" + rest, "cf");
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ClusterFileTest, NodeCacheKeysAreOptionalAndChecked) {
  const std::string rest = "mds = 127.0.0.1:1\nsecret = " + std::string(32, 'a') + "\n";
  auto none = ClusterFile::Parse(rest, "cf");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->node_cache.empty());
  EXPECT_EQ(none->node_cache_bytes, 0u);
  EXPECT_LT(none->node_cache_min_free_pct, 0);
  auto some = ClusterFile::Parse(
      rest + "node_cache = /nvme/c\nnode_cache_bytes = 2G\nnode_cache_min_free = 2.5\n", "cf");
  ASSERT_TRUE(some.ok()) << some.status().ToString();
  EXPECT_EQ(some->node_cache, "/nvme/c");
  EXPECT_EQ(some->node_cache_bytes, uint64_t{2} << 30);
  EXPECT_EQ(ClusterFile::Parse(rest + "node_cache_bytes = lots\n", "cf").status().code(),
            StatusCode::kInvalidArgument);
  for (const char* bad : {"-1", "100", "ten", "5%", ""}) {
    auto r = ClusterFile::Parse(rest + "node_cache_min_free = " + bad + "\n", "cf");
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  // Saved and loaded back.
  char tmpl[] = "/tmp/ciuic-cf-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/cluster.conf";
  ASSERT_TRUE(some->Save(path).ok());
  auto back = ClusterFile::Load(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->node_cache, "/nvme/c");
  EXPECT_EQ(back->node_cache_bytes, uint64_t{2} << 30);
  EXPECT_DOUBLE_EQ(back->node_cache_min_free_pct, 2.5);
  unlink(path.c_str());
  rmdir(tmpl);
}

TEST(HostPortTest, Parse) {
  EXPECT_EQ(HostPort::Parse("127.0.0.1:80")->port, 80);
  EXPECT_FALSE(HostPort::Parse("127.0.0.1").ok());
  EXPECT_FALSE(HostPort::Parse("h:99999").ok());
  EXPECT_FALSE(HostPort::Parse(":1").ok());
}

}  // namespace
}  // namespace ciuic
