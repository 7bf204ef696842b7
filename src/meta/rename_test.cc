// Rename over both stores: replace rules, flags, link counts, subtree loops, races.
#include <sys/stat.h>

#include <thread>

#include "meta/meta_test_util.h"

namespace ciuic::meta::testing {
namespace {

constexpr uint32_t kNoReplace = 1;
constexpr uint32_t kExchange = 2;

template <typename B>
class RenameTest : public MetaTest<B> {
 protected:
  pb::Fid Dir(const pb::Fid& parent, const std::string& name) {
    auto r = this->Mkdir(parent, name);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->attr().fid() : pb::Fid();
  }
  pb::Fid File(const pb::Fid& parent, const std::string& name) {
    auto r = this->Create(parent, name);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->attr().fid() : pb::Fid();
  }
  Fid At(const pb::Fid& parent, const std::string& name) {
    auto r = this->Lookup(parent, name);
    return r.ok() ? F(r->attr().fid()) : Fid{};
  }
  uint32_t Nlink(const pb::Fid& fid) { return this->GetAttr(fid)->attr().nlink(); }
};
TYPED_TEST_SUITE(RenameTest, Backends);

TYPED_TEST(RenameTest, WithinADirectory) {
  auto f = this->File(this->root(), "a");
  ASSERT_OK(this->Rename(this->root(), "a", this->root(), "b"));
  EXPECT_EQ(this->At(this->root(), "a"), Fid{});
  EXPECT_EQ(this->At(this->root(), "b"), F(f));
  EXPECT_CODE(this->Rename(this->root(), "a", this->root(), "c"), kNotFound);
}

TYPED_TEST(RenameTest, AcrossDirectoriesUpdatesDotDotAndLinkCounts) {
  auto x = this->Dir(this->root(), "x");
  auto y = this->Dir(this->root(), "y");
  auto d = this->Dir(x, "d");
  auto before = this->GetAttr(d)->attr().ctime();
  ASSERT_OK(this->Rename(x, "d", y, "d2"));
  EXPECT_EQ(this->At(y, "d2"), F(d));
  EXPECT_EQ(this->Nlink(x), 2u);
  EXPECT_EQ(this->Nlink(y), 3u);
  EXPECT_EQ(this->At(d, ".."), F(y));
  auto after = this->GetAttr(d)->attr().ctime();
  EXPECT_TRUE(after.sec() > before.sec() ||
              (after.sec() == before.sec() && after.nsec() >= before.nsec()));
  // A file moves without touching link counts of the directories.
  this->File(x, "f");
  ASSERT_OK(this->Rename(x, "f", y, "f"));
  EXPECT_EQ(this->Nlink(x), 2u);
  EXPECT_EQ(this->Nlink(y), 3u);
}

TYPED_TEST(RenameTest, ReplacesAFileAndDestroysIt) {
  auto a = this->File(this->root(), "a");
  auto b = this->File(this->root(), "b");
  ASSERT_OK(this->Rename(this->root(), "a", this->root(), "b"));
  EXPECT_EQ(this->At(this->root(), "b"), F(a));
  EXPECT_CODE(this->GetAttr(b), kNotFound);
}

TYPED_TEST(RenameTest, ReplacingAFileWithAnotherHardLinkKeepsTheInode) {
  auto a = this->File(this->root(), "a");
  auto b = this->File(this->root(), "b");
  auto d = this->Dir(this->root(), "d");
  pb::LinkReq l;
  *l.mutable_ctx() = Ctx();
  *l.mutable_fid() = b;
  *l.mutable_new_parent() = d;
  l.set_new_name("b2");
  ASSERT_OK(this->svc().Link(l));
  EXPECT_EQ(this->Nlink(b), 2u);
  ASSERT_OK(this->Rename(this->root(), "a", this->root(), "b"));
  EXPECT_EQ(this->At(this->root(), "b"), F(a));
  EXPECT_EQ(this->Nlink(b), 1u);
  EXPECT_EQ(this->At(d, "b2"), F(b));
}

TYPED_TEST(RenameTest, OntoAnotherLinkOfTheSameInodeIsANoOp) {
  auto a = this->File(this->root(), "a");
  pb::LinkReq l;
  *l.mutable_ctx() = Ctx();
  *l.mutable_fid() = a;
  *l.mutable_new_parent() = this->root();
  l.set_new_name("a2");
  ASSERT_OK(this->svc().Link(l));
  ASSERT_OK(this->Rename(this->root(), "a", this->root(), "a2"));
  EXPECT_EQ(this->At(this->root(), "a"), F(a));
  EXPECT_EQ(this->At(this->root(), "a2"), F(a));
  EXPECT_EQ(this->Nlink(a), 2u);
  ASSERT_OK(this->Rename(this->root(), "a", this->root(), "a"));
  EXPECT_EQ(this->At(this->root(), "a"), F(a));
}

TYPED_TEST(RenameTest, NoReplaceRefusesAnExistingTarget) {
  this->File(this->root(), "a");
  this->File(this->root(), "b");
  EXPECT_CODE(this->Rename(this->root(), "a", this->root(), "b", kNoReplace), kAlreadyExists);
  ASSERT_OK(this->Rename(this->root(), "a", this->root(), "c", kNoReplace));
  EXPECT_CODE(this->Rename(this->root(), "c", this->root(), "d", kNoReplace | kExchange),
              kInvalidArgument);
  EXPECT_CODE(this->Rename(this->root(), "c", this->root(), "d", 8), kInvalidArgument);
}

TYPED_TEST(RenameTest, ExchangeSwapsEntries) {
  auto x = this->Dir(this->root(), "x");
  auto y = this->Dir(this->root(), "y");
  auto f = this->File(x, "f");
  auto d = this->Dir(y, "d");
  EXPECT_CODE(this->Rename(x, "f", y, "missing", kExchange), kNotFound);
  ASSERT_OK(this->Rename(x, "f", y, "d", kExchange));
  EXPECT_EQ(this->At(x, "f"), F(d));
  EXPECT_EQ(this->At(y, "d"), F(f));
  // The directory moved from y to x: link counts and '..' follow it.
  EXPECT_EQ(this->Nlink(x), 3u);
  EXPECT_EQ(this->Nlink(y), 2u);
  EXPECT_EQ(this->At(d, ".."), F(x));
  pb::ReadDirReq r;
  *r.mutable_dir() = x;
  auto list = this->svc().ReadDir(r);
  ASSERT_OK(list);
  ASSERT_EQ(list->entries_size(), 3);
  EXPECT_EQ(list->entries(2).type(), static_cast<uint32_t>(S_IFDIR));
}

TYPED_TEST(RenameTest, DirectoryCannotMoveIntoItsOwnSubtree) {
  auto a = this->Dir(this->root(), "a");
  auto b = this->Dir(a, "b");
  auto c = this->Dir(b, "c");
  EXPECT_CODE(this->Rename(this->root(), "a", c, "a"), kInvalidArgument);
  EXPECT_CODE(this->Rename(this->root(), "a", a, "self"), kInvalidArgument);
  EXPECT_CODE(this->Rename(a, "b", c, "b"), kInvalidArgument);
  EXPECT_CODE(this->Rename(b, "c", this->root(), "a", kExchange), kInvalidArgument);
  // Upwards is fine.
  ASSERT_OK(this->Rename(b, "c", this->root(), "c"));
  EXPECT_EQ(this->At(c, ".."), kRootFid);
}

TYPED_TEST(RenameTest, DirectoryReplacesOnlyAnEmptyDirectory) {
  auto a = this->Dir(this->root(), "a");
  auto full = this->Dir(this->root(), "full");
  this->File(full, "x");
  auto empty = this->Dir(this->root(), "empty");
  this->File(this->root(), "file");
  EXPECT_CODE(this->Rename(this->root(), "a", this->root(), "full"), kNotEmpty);
  EXPECT_CODE(this->Rename(this->root(), "a", this->root(), "file"), kNotADirectory);
  EXPECT_CODE(this->Rename(this->root(), "file", this->root(), "empty"), kIsADirectory);
  const uint32_t root_links = this->Nlink(this->root());
  ASSERT_OK(this->Rename(this->root(), "a", this->root(), "empty"));
  EXPECT_EQ(this->At(this->root(), "empty"), F(a));
  EXPECT_CODE(this->GetAttr(empty), kNotFound);
  EXPECT_EQ(this->Nlink(this->root()), root_links - 1);
  // Across directories: the target's parent loses the replaced dir and gains the moved one.
  auto p = this->Dir(this->root(), "p");
  this->Dir(p, "victim");
  const uint32_t p_links = this->Nlink(p);
  ASSERT_OK(this->Rename(this->root(), "empty", p, "victim"));
  EXPECT_EQ(this->Nlink(p), p_links);
  EXPECT_EQ(this->At(a, ".."), F(p));
}

TYPED_TEST(RenameTest, CrossingRenamesCannotBothSucceed) {
  // a/ and b/ each try to move into the other at once: exactly one may win, or the tree would
  // contain a cycle cut off from the root.
  for (int round = 0; round < 20; ++round) {
    auto a = this->Dir(this->root(), fmt::format("a{}", round));
    auto b = this->Dir(this->root(), fmt::format("b{}", round));
    Status s1, s2;
    std::thread t1([&] { s1 = this->Rename(this->root(), fmt::format("a{}", round), b, "a"); });
    std::thread t2([&] { s2 = this->Rename(this->root(), fmt::format("b{}", round), a, "b"); });
    t1.join();
    t2.join();
    EXPECT_NE(s1.ok(), s2.ok()) << s1.ToString() << " / " << s2.ToString();
    if (!s1.ok()) {
      EXPECT_EQ(s1.code(), StatusCode::kInvalidArgument);
    }
    if (!s2.ok()) {
      EXPECT_EQ(s2.code(), StatusCode::kInvalidArgument);
    }
  }
}

TYPED_TEST(RenameTest, NeedsWritePermissionOnBothDirectories) {
  auto mine = this->Mkdir(this->root(), "mine", 0777);
  auto theirs = this->Mkdir(this->root(), "theirs", 0755);
  ASSERT_OK(this->Create(mine->attr().fid(), "f", 0644, Ctx(1000, 1000)));
  EXPECT_CODE(this->Rename(mine->attr().fid(), "f", theirs->attr().fid(), "f", 0, Ctx(1000, 1000)),
              kPermissionDenied);
  ASSERT_OK(this->Rename(mine->attr().fid(), "f", mine->attr().fid(), "g", 0, Ctx(1000, 1000)));
}

}  // namespace
}  // namespace ciuic::meta::testing
