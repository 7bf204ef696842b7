// ReadDir over both stores: cookies, pages, '.'/'..', plus, hash collisions, and a large
// directory read in pages while entries are deleted.
#include <sys/stat.h>

#include <condition_variable>
#include <mutex>
#include <random>
#include <set>

#include "meta/meta_test_util.h"

namespace ciuic::meta::testing {
namespace {

template <typename B>
class ReadDirTest : public MetaTest<B> {
 protected:
  void SetUp() override {
    this->options_.max_queue = 1 << 17;  // queue a whole directory's creates at once
    MetaTest<B>::SetUp();
  }
  // Creates `names` in `dir` through the async path (group commits) and waits.
  void CreateMany(const pb::Fid& dir, const std::vector<std::string>& names) {
    std::mutex mu;
    std::condition_variable cv;
    size_t done = 0, failed = 0;
    for (const auto& n : names) {
      pb::CreateReq q;
      *q.mutable_parent() = dir;
      q.set_name(n);
      q.set_mode(0644);
      q.set_exclusive(true);
      // The queue is bounded: retry what it refuses.
      while (true) {
        bool refused = false;
        std::mutex rmu;
        this->svc().CreateAsync(q, [&](Result<pb::CreateResp> r) {
          if (!r.ok() && r.status().code() == StatusCode::kUnavailable) {
            refused = true;
            return;
          }
          std::lock_guard lock(mu);
          if (!r.ok())
            ++failed;
          ++done;
          cv.notify_all();
        });
        if (!refused)
          break;
        std::unique_lock lock(mu);
        cv.wait_for(lock, std::chrono::milliseconds(1));
      }
    }
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return done == names.size(); }));
    ASSERT_EQ(failed, 0u);
  }
  Result<pb::ReadDirResp> Page(const pb::Fid& dir,
                               uint64_t cookie,
                               uint32_t max,
                               bool plus = false) {
    pb::ReadDirReq q;
    *q.mutable_dir() = dir;
    q.set_cookie(cookie);
    q.set_max_entries(max);
    q.set_plus(plus);
    return this->svc().ReadDir(q);
  }
};
TYPED_TEST_SUITE(ReadDirTest, Backends);

TYPED_TEST(ReadDirTest, ListsDotDotDotAndEntriesWithAttrs) {
  auto d = this->Mkdir(this->root(), "d");
  ASSERT_OK(this->Create(d->attr().fid(), "f"));
  ASSERT_OK(this->Mkdir(d->attr().fid(), "sub"));
  auto r = this->Page(d->attr().fid(), 0, 100, true);
  ASSERT_OK(r);
  ASSERT_EQ(r->entries_size(), 4);
  EXPECT_TRUE(r->eof());
  EXPECT_EQ(r->entries(0).name(), ".");
  EXPECT_EQ(r->entries(0).cookie(), 1u);
  EXPECT_EQ(F(r->entries(0).fid()), F(d->attr().fid()));
  EXPECT_EQ(r->entries(1).name(), "..");
  EXPECT_EQ(r->entries(1).cookie(), 2u);
  EXPECT_EQ(F(r->entries(1).fid()), kRootFid);
  EXPECT_EQ(F(r->entries(1).attr().fid()), kRootFid);
  std::set<std::string> names;
  for (int i = 2; i < 4; ++i) {
    const auto& e = r->entries(i);
    names.insert(e.name());
    EXPECT_GE(e.cookie(), kFirstHashCookie);
    EXPECT_LT(e.cookie(), uint64_t{1} << 63);  // fits off_t
    EXPECT_EQ(F(e.attr().fid()), F(e.fid()));
    EXPECT_EQ(e.type(), e.attr().mode() & S_IFMT);
  }
  EXPECT_EQ(names, (std::set<std::string>{"f", "sub"}));
  // Resume after '.', after '..', after the last entry.
  EXPECT_EQ(this->Page(d->attr().fid(), 1, 100)->entries(0).name(), "..");
  EXPECT_EQ(this->Page(d->attr().fid(), 2, 100)->entries_size(), 2);
  auto end = this->Page(d->attr().fid(), r->entries(3).cookie(), 100);
  EXPECT_EQ(end->entries_size(), 0);
  EXPECT_TRUE(end->eof());
  // A one-entry page is not the end.
  auto one = this->Page(d->attr().fid(), 0, 1);
  EXPECT_EQ(one->entries_size(), 1);
  EXPECT_FALSE(one->eof());
}

TYPED_TEST(ReadDirTest, NeedsReadPermissionAndADirectory) {
  auto d = this->Mkdir(this->root(), "d", 0711);
  EXPECT_CODE(this->Page(d->attr().fid(), 0, 10), kOk);
  pb::ReadDirReq q;
  *q.mutable_ctx() = Ctx(1000, 1000);
  *q.mutable_dir() = d->attr().fid();
  EXPECT_CODE(this->svc().ReadDir(q), kPermissionDenied);
  auto f = this->Create(this->root(), "f");
  EXPECT_CODE(this->Page(f->attr().fid(), 0, 10), kNotADirectory);
}

TYPED_TEST(ReadDirTest, LargeDirectoryInPagesWhileEntriesAreDeleted) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  constexpr int kEntries = 100000;
  auto d = this->Mkdir(this->root(), "big");
  const pb::Fid dir = d->attr().fid();
  std::vector<std::string> names;
  names.reserve(kEntries);
  for (int i = 0; i < kEntries; ++i)
    names.push_back(fmt::format("sample-{:07}.jpg", i));
  ASSERT_NO_FATAL_FAILURE(this->CreateMany(dir, names));

  std::set<std::string> deleted;
  std::multiset<std::string> seen;
  uint64_t cookie = 2;  // skip '.' and '..'
  int pages = 0;
  while (true) {
    auto page = this->Page(dir, cookie, 1000);
    ASSERT_OK(page);
    ++pages;
    for (const auto& e : page->entries()) {
      seen.insert(e.name());
      cookie = e.cookie();
    }
    if (page->eof())
      break;
    // Between pages, delete 50 random entries (some already listed, some not yet), queued
    // together and waited for.
    std::mutex mu;
    std::condition_variable cv;
    int pending = 0, failed = 0;
    for (int i = 0; i < 50; ++i) {
      const std::string& n = names[rng() % names.size()];
      if (!deleted.insert(n).second)
        continue;
      pb::UnlinkReq q;
      *q.mutable_parent() = dir;
      q.set_name(n);
      {
        std::lock_guard lock(mu);
        ++pending;
      }
      this->svc().UnlinkAsync(q, [&](Result<pb::UnlinkResp> r) {
        std::lock_guard lock(mu);
        if (!r.ok())
          ++failed;
        --pending;
        cv.notify_all();
      });
    }
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return pending == 0; });
    ASSERT_EQ(failed, 0);
  }
  EXPECT_GT(pages, 90);
  for (const auto& n : names) {
    const size_t c = seen.count(n);
    if (deleted.count(n)) {
      EXPECT_LE(c, 1u) << n;  // a deleted entry may or may not have been listed
    } else {
      ASSERT_EQ(c, 1u) << "surviving entry seen " << c << " times: " << n;
    }
  }
}

// Hashes squeezed into 4 values: entries sharing a cookie must come in one page.
template <typename B>
class CollidingReadDirTest : public ReadDirTest<B> {
 protected:
  void SetUp() override {
    this->options_.test_name_hash_mask = 3;
    ReadDirTest<B>::SetUp();  // NOLINT(bugprone-parent-virtual-call)
  }
};
TYPED_TEST_SUITE(CollidingReadDirTest, Backends);

TYPED_TEST(CollidingReadDirTest, EntriesSharingAHashAreNeverSplit) {
  auto d = this->Mkdir(this->root(), "d");
  const pb::Fid dir = d->attr().fid();
  std::vector<std::string> names;
  for (int i = 0; i < 60; ++i)
    names.push_back(fmt::format("n{}", i));
  ASSERT_NO_FATAL_FAILURE(this->CreateMany(dir, names));
  for (const auto& n : names) {
    auto l = this->Lookup(dir, n);  // point lookups still find each name
    ASSERT_OK(l);
  }
  std::multiset<std::string> seen;
  std::set<uint64_t> cookies;
  uint64_t cookie = 2;
  int pages = 0;
  while (true) {
    auto page = this->Page(dir, cookie, 1);
    ASSERT_OK(page);
    ++pages;
    ASSERT_GT(page->entries_size(), 0);
    const uint64_t h = page->entries(0).cookie();
    EXPECT_EQ(cookies.count(h), 0u) << "hash group split across pages";
    cookies.insert(h);
    for (const auto& e : page->entries()) {
      EXPECT_EQ(e.cookie(), h);
      EXPECT_GE(e.cookie(), kFirstHashCookie);
      EXPECT_LE(e.cookie(), kFirstHashCookie + 3);
      seen.insert(e.name());
    }
    cookie = h;
    if (page->eof())
      break;
    ASSERT_LT(pages, 10);
  }
  EXPECT_EQ(seen, std::multiset<std::string>(names.begin(), names.end()));
  ASSERT_OK(this->Unlink(dir, "n7"));
  EXPECT_CODE(this->Lookup(dir, "n7"), kNotFound);
  ASSERT_OK(this->Lookup(dir, "n8"));
}

}  // namespace
}  // namespace ciuic::meta::testing
