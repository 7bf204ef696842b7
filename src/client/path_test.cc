#include "client/path.h"

#include <string>

#include <gtest/gtest.h>

namespace ciuic::client {
namespace {

TEST(PathTest, AcceptsAbsolutePaths) {
  EXPECT_TRUE(ValidatePath("/").ok());
  EXPECT_TRUE(ValidatePath("/a").ok());
  EXPECT_TRUE(ValidatePath("/a/b.c/d").ok());
  EXPECT_TRUE(ValidatePath("/a/").ok());
  EXPECT_TRUE(ValidatePath("/" + std::string(255, 'x')).ok());
}

TEST(PathTest, RejectsBadPathsWithThePathInTheMessage) {
  EXPECT_EQ(ValidatePath("").code(), StatusCode::kInvalidArgument);
  Status rel = ValidatePath("a/b");
  EXPECT_EQ(rel.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rel.message().find("a/b"), std::string::npos);
  EXPECT_EQ(ValidatePath("/a//b").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidatePath("//").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidatePath("/a/./b").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidatePath("/a/..").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidatePath(std::string("/a\0b", 4)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidatePath("/" + std::string(256, 'x')).code(), StatusCode::kNameTooLong);
  EXPECT_EQ(ValidatePath("/a/" + std::string(300, 'y') + "/c").code(), StatusCode::kNameTooLong);
  std::string longpath;
  while (longpath.size() <= kMaxPathLen)
    longpath += "/abcdefgh";
  EXPECT_EQ(ValidatePath(longpath).code(), StatusCode::kNameTooLong);
}

TEST(PathTest, SplitsAndNormalizes) {
  EXPECT_EQ(NormalizePath("/a/b/"), "/a/b");
  EXPECT_EQ(NormalizePath("/"), "/");
  std::string parent, name;
  ASSERT_TRUE(SplitPath("/a", &parent, &name).ok());
  EXPECT_EQ(parent, "/");
  EXPECT_EQ(name, "a");
  ASSERT_TRUE(SplitPath("/a/b/c", &parent, &name).ok());
  EXPECT_EQ(parent, "/a/b");
  EXPECT_EQ(name, "c");
  EXPECT_FALSE(SplitPath("/", &parent, &name).ok());
  EXPECT_EQ(PathComponents("/a/b"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(PathComponents("/").empty());
}

}  // namespace
}  // namespace ciuic::client
