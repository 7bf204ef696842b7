#include "hsm_policy_cmd.h"

#include <gtest/gtest.h>

namespace ciuic::cli {
namespace {

TEST(HsmPolicyTest, DurationsTakeAUnitOrSeconds) {
  EXPECT_EQ(*ParseDuration("0"), 0);
  EXPECT_EQ(*ParseDuration("45"), 45);
  EXPECT_EQ(*ParseDuration("30s"), 30);
  EXPECT_EQ(*ParseDuration("10m"), 600);
  EXPECT_EQ(*ParseDuration("2h"), 7200);
  EXPECT_EQ(*ParseDuration("7d"), 7 * 86400);
  for (const char* bad : {"", "d", "7x", "7dd", "-1", "1.5h", "9999999999999", " 1"})
    EXPECT_EQ(ParseDuration(bad).status().code(), StatusCode::kInvalidArgument) << bad;
}

TEST(HsmPolicyTest, StoredFormRoundTrips) {
  for (const char* v : {"never", "release-at-watermark", "archive-after=3600"}) {
    auto p = ParsePolicyValue(v);
    ASSERT_TRUE(p.ok()) << v;
    EXPECT_EQ(PolicyValue(*p), v);
  }
  auto p = ParsePolicyValue("archive-after=7d");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->kind, HsmPolicy::kArchiveAfter);
  EXPECT_EQ(p->archive_after_s, 7 * 86400);
  for (const char* bad : {"", "always", "archive-after=", "archive-after=x", "never "})
    EXPECT_FALSE(ParsePolicyValue(bad).ok()) << bad;
}

}  // namespace
}  // namespace ciuic::cli
