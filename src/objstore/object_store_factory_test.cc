#include "objstore/object_store_factory.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace ciuic::objstore {
namespace {

ObjectStoreConfig TestConfig() {
  ObjectStoreConfig cfg;
  cfg.s3.endpoint = "http://127.0.0.1:9";
  cfg.s3.credentials = {"AK", "SK", ""};
  cfg.env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  return cfg;
}

TEST(ObjectStoreFactoryTest, ParsesUrls) {
  auto s3 = ParseObjectStoreUrl("S3://bucket/data/set1/");
  ASSERT_TRUE(s3.ok()) << s3.status().ToString();
  EXPECT_EQ(s3->scheme, "s3");
  EXPECT_EQ(s3->authority, "bucket");
  EXPECT_EQ(s3->path, "data/set1");
  auto bare = ParseObjectStoreUrl("s3://bucket");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->path, "");
  auto file = ParseObjectStoreUrl("file:///var/lib/ciuic%20cold");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->path, "/var/lib/ciuic cold");
  EXPECT_TRUE(ParseObjectStoreUrl("file://localhost/x").ok());
  auto mem = ParseObjectStoreUrl("mem://scratch");
  ASSERT_TRUE(mem.ok());
  EXPECT_EQ(mem->authority, "scratch");

  for (const char* bad : {"bucket/prefix", "s3://", "s3:///prefix", "file://host/x", "file://",
                          "mem://", "mem://a/b", "gs://bucket", "://x"}) {
    auto r = ParseObjectStoreUrl(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
    }
  }
}

// Settings in the URL reach every process that opens it (a data repository's OSSes).
TEST(ObjectStoreFactoryTest, S3UrlParameters) {
  auto u = ParseObjectStoreUrl(
      "s3://b/data/set?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=eu-west-1&addressing=path");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->path, "data/set");
  EXPECT_EQ(u->endpoint, "http://127.0.0.1:9000");
  EXPECT_EQ(u->region, "eu-west-1");
  EXPECT_EQ(u->addressing, "path");
  auto plain = ParseObjectStoreUrl("s3://b?endpoint=http://127.0.0.1:9000");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->path, "");
  EXPECT_EQ(plain->endpoint, "http://127.0.0.1:9000");
  for (const char* bad : {"s3://b/p?secret=x", "s3://b/p?endpoint=", "s3://b/p?endpoint=ftp://h",
                          "s3://b/p?addressing=sideways", "s3://b/p?region"}) {
    auto r = ParseObjectStoreUrl(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  ObjectStoreConfig cfg = TestConfig();
  auto store = OpenObjectStore("s3://b/p?endpoint=http://127.0.0.1:7&region=ap-south-1", cfg);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto* s3 = dynamic_cast<S3Store*>(store->get());
  ASSERT_NE(s3, nullptr);
  EXPECT_EQ(s3->endpoint(), "http://127.0.0.1:7");
  EXPECT_EQ(s3->region(), "ap-south-1");
}

TEST(ObjectStoreFactoryTest, OpensS3WithTheUrlsBucketAndPrefix) {
  ObjectStoreConfig cfg = TestConfig();
  cfg.s3.bucket = "ignored";
  cfg.s3.root_prefix = "ignored";
  auto store = OpenObjectStore("s3://my-bucket/cold/tier", cfg);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->Describe(), "s3://my-bucket/cold/tier");
  auto root = OpenObjectStore("s3://my-bucket", cfg);
  ASSERT_TRUE(root.ok());
  EXPECT_EQ((*root)->Describe(), "s3://my-bucket");
  EXPECT_EQ(OpenObjectStore("s3://bad/bucket/../x", cfg).status().code(),
            StatusCode::kInvalidArgument);
}

// file:// and mem:// are accepted but their backends live on another branch until the merge.
TEST(ObjectStoreFactoryTest, FileOpensTheDirectoryAndMemSharesOneStorePerName) {
  ObjectStoreConfig cfg = TestConfig();
  char tmpl[] = "/tmp/ciuic-factory-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = std::string(tmpl) + "/cold";
  auto file = OpenObjectStore("file://" + dir, cfg);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_TRUE((*file)->Put("a/b", "xyz").ok());
  EXPECT_EQ((*file)->Describe(), "file://" + dir);
  std::string on_disk;
  {
    std::ifstream in(dir + "/a/b");
    std::getline(in, on_disk);
  }
  EXPECT_EQ(on_disk, "xyz");
  // A data repository's directory must exist.
  cfg.create_local_root = false;
  EXPECT_EQ(OpenObjectStore("file://" + std::string(tmpl) + "/missing", cfg).status().code(),
            StatusCode::kNotFound);
  std::filesystem::remove_all(tmpl);

  auto m1 = OpenObjectStore("mem://factory-test", cfg);
  auto m2 = OpenObjectStore("mem://factory-test", cfg);
  auto other = OpenObjectStore("mem://factory-other", cfg);
  ASSERT_TRUE(m1.ok() && m2.ok() && other.ok());
  ASSERT_TRUE((*m1)->Put("k", "v").ok());
  EXPECT_EQ(*(*m2)->GetAll("k"), "v");
  EXPECT_EQ((*other)->Head("k").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*m1)->Describe(), "mem://factory-test");
}

}  // namespace
}  // namespace ciuic::objstore
