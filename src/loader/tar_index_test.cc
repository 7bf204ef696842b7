#include "loader/tar_index.h"

#include <string>

#include <gtest/gtest.h>

namespace ciuic::loader {
namespace {

TEST(TarIndexTest, WriterOutputScansBackWithOffsets) {
  TarWriter w;
  std::string long_name = "cls/" + std::string(150, 'n') + ".bin";
  ASSERT_TRUE(w.Add("a/one.bin", "hello").ok());
  ASSERT_TRUE(w.Add(long_name, std::string(1000, 'x')).ok());
  ASSERT_TRUE(w.Add("b/empty", "").ok());
  auto written = w.members();
  std::string tar = w.Finish();
  auto scanned = ScanTarBytes(tar);
  ASSERT_TRUE(scanned.ok()) << scanned.status().ToString();
  ASSERT_EQ(*scanned, written);
  EXPECT_EQ((*scanned)[1].name, long_name);
  EXPECT_EQ(tar.substr((*scanned)[0].offset, 5), "hello");
}

TEST(TarIndexTest, IndexTextRoundTrips) {
  std::vector<TarMember> m = {{"a b/c.jpg", 512, 10}, {"d", 2048, 0}};
  auto parsed = ParseIndex(FormatIndex(m));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, m);
}

TEST(TarIndexTest, BadIndexIsCorruption) {
  EXPECT_EQ(ParseIndex("garbage\n").status().code(), StatusCode::kCorruption);
  EXPECT_EQ(ParseIndex("ciuic-shard-index 1 2\n512 10 a\n").status().code(),
            StatusCode::kCorruption);
  EXPECT_EQ(ParseIndex("ciuic-shard-index 1 1\n512 x a\n").status().code(),
            StatusCode::kCorruption);
}

TEST(TarIndexTest, CorruptHeaderOrTruncatedMemberIsCorruption) {
  TarWriter w;
  ASSERT_TRUE(w.Add("x", std::string(3000, 'y')).ok());
  std::string tar = w.Finish();
  std::string bad = tar;
  bad[10] ^= 0x5a;  // inside the name: checksum no longer matches
  EXPECT_EQ(ScanTarBytes(bad).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(ScanTarBytes(tar.substr(0, 1024)).status().code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace ciuic::loader
