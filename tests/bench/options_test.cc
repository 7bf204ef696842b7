#include "bench/options.h"

#include <filesystem>

#include <gtest/gtest.h>

namespace ciuic::bench {
namespace {

Result<Options> Parse(std::vector<std::string> args) {
  return ParseOptions(args);
}

TEST(BenchOptionsTest, DefaultsRunEveryPhaseOnLocalAndCiuic) {
  auto o = Parse({});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->phases, AllPhases());
  ASSERT_EQ(o->targets.size(), 2u);
  EXPECT_EQ(o->targets[0].kind, TargetKind::kLocal);
  EXPECT_EQ(o->targets[1].kind, TargetKind::kCiuic);
  EXPECT_EQ(o->runs, 3);
}

TEST(BenchOptionsTest, PhasesRunInFixedOrderWithoutDuplicates) {
  auto o = Parse({"--phases=meta,seq,meta"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->phases, (std::vector<std::string>{"seq", "meta"}));
}

TEST(BenchOptionsTest, UnknownPhaseIsAClearError) {
  auto o = Parse({"--phases=seq,bogus"});
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("unknown phase 'bogus'"), std::string::npos)
      << o.status().message();
  EXPECT_NE(o.status().message().find("scaling"), std::string::npos);  // lists the known ones
}

TEST(BenchOptionsTest, TargetWithoutPathIsAClearError) {
  auto o = Parse({"--target", "path:"});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("needs a directory"), std::string::npos)
      << o.status().message();
  o = Parse({"--target", "local"});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("needs a directory"), std::string::npos);
}

TEST(BenchOptionsTest, MissingPathTargetIsAClearError) {
  auto o = Parse({"--target", "path:/nonexistent/ciuic-bench-test"});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("not an existing directory"), std::string::npos)
      << o.status().message();
}

TEST(BenchOptionsTest, UnknownTargetKindIsAClearError) {
  auto o = Parse({"--target", "nfs:/x"});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("unknown target"), std::string::npos);
}

TEST(BenchOptionsTest, TargetsParse) {
  std::string dir = std::filesystem::temp_directory_path().string();
  auto o = Parse({"--target", "ciuic", "--target", "path:" + dir + "/", "--target", "local:/x/y",
                  "--target", "fuse"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_EQ(o->targets.size(), 4u);
  EXPECT_EQ(o->targets[1].kind, TargetKind::kPath);
  EXPECT_EQ(o->targets[1].dir, dir);  // trailing '/' dropped
  EXPECT_EQ(o->targets[1].name, "path:" + dir);
  EXPECT_EQ(o->targets[2].dir, "/x/y");
  EXPECT_EQ(o->targets[3].kind, TargetKind::kFuse);
}

TEST(BenchOptionsTest, ReplicatedCiuicTargetsParse) {
  auto o = Parse({"--target", "ciuic-r1", "--target", "ciuic-r2"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_EQ(o->targets.size(), 2u);
  EXPECT_EQ(o->targets[0].kind, TargetKind::kCiuic);
  EXPECT_EQ(o->targets[0].replicas, 1u);
  EXPECT_EQ(o->targets[1].name, "ciuic-r2");
  EXPECT_EQ(o->targets[1].replicas, 2u);
  EXPECT_FALSE(Parse({"--target", "ciuic-r9"}).ok());
  EXPECT_FALSE(Parse({"--target", "ciuic-r0"}).ok());
}

TEST(BenchOptionsTest, DuplicateTargetIsAnError) {
  EXPECT_FALSE(Parse({"--target", "ciuic", "--target", "ciuic"}).ok());
}

TEST(BenchOptionsTest, QuickShrinksButExplicitOptionsWin) {
  auto o = Parse({"--quick"});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->runs, 1);
  EXPECT_EQ(o->size, 256ull << 20);
  EXPECT_EQ(o->scaling_oss, (std::vector<int>{1, 2, 4}));
  o = Parse({"--quick", "--runs", "2", "--size", "64M", "--scaling-oss", "8,1,2"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->runs, 2);
  EXPECT_EQ(o->size, 64ull << 20);
  EXPECT_EQ(o->scaling_oss, (std::vector<int>{1, 2, 8}));
}

TEST(BenchOptionsTest, TierS3Options) {
  auto o = Parse({});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->tier_s3_samples, 4000);
  EXPECT_EQ(o->tier_s3_sample_size, 100u << 10);
  o = Parse({"--quick"});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->tier_s3_samples, 200);
  o = Parse({"--quick", "--tier-s3-samples", "0", "--tier-s3-sample-size", "1M",
             "--tier-s3-workers", "2"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->tier_s3_samples, 0);  // the S3 part left out
  EXPECT_EQ(o->tier_s3_sample_size, 1u << 20);
  EXPECT_EQ(o->tier_s3_workers, 2);
  auto bad = Parse({"--tier-s3-sample-size", "8"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--tier-s3-sample-size"), std::string::npos);
  EXPECT_FALSE(Parse({"--tier-s3-samples", "-1"}).ok());
}

TEST(BenchOptionsTest, BadNumbersAreErrors) {
  EXPECT_FALSE(Parse({"--block", "1000"}).ok());                 // not a multiple of 4 KiB
  EXPECT_FALSE(Parse({"--size", "1M", "--threads", "8"}).ok());  // under a block per stream
  EXPECT_FALSE(Parse({"--scaling-oss", "1,x"}).ok());
  EXPECT_FALSE(Parse({"--scaling-oss", "0"}).ok());
  EXPECT_FALSE(Parse({"--qd", "0"}).ok());
  EXPECT_FALSE(Parse({"--size", "lots"}).ok());
  EXPECT_FALSE(Parse({"--no-such-option"}).ok());
}

TEST(BenchOptionsTest, HelpIsNotAnError) {
  auto o = Parse({"--help"});
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->show_help);
  EXPECT_NE(o->help_text.find("--phases"), std::string::npos);
}

TEST(BenchOptionsTest, ScalingNeedsRoot) {
  Status s = CheckScalingAllowed(1000);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("needs root"), std::string::npos);
  EXPECT_TRUE(CheckScalingAllowed(0).ok());
}

}  // namespace
}  // namespace ciuic::bench
