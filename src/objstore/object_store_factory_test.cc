#include "objstore/object_store_factory.h"

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
TEST(ObjectStoreFactoryTest, FileAndMemAreRecognized) {
  ObjectStoreConfig cfg = TestConfig();
  auto file = OpenObjectStore("file:///nonexistent-ciuic-test-dir/x", cfg);
  auto mem = OpenObjectStore("mem://x", cfg);
  EXPECT_NE(file.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mem.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ciuic::objstore
