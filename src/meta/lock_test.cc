// Advisory locks on the MDS: conflicts between sessions, shared vs exclusive, POSIX range
// splitting and merging, flock, release on session close and lease expiry.
#include "meta/lock_table.h"
#include "meta/meta_test_util.h"

namespace ciuic::meta::testing {
namespace {

constexpr uint64_t kEof = UINT64_MAX;

class LockTest : public MetaTest<MemBackend> {
 protected:
  void SetUp() override {
    options_.lease_ms = 10000;
    MetaTest<MemBackend>::SetUp();
    auto f = Create(root(), "f");
    ASSERT_OK(f);
    fid_ = f->attr().fid();
  }
  uint64_t NewSession() {
    pb::OpenSessionReq q;
    q.set_client_name("test");
    auto r = svc().OpenSession(q);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->session_id() : 0;
  }
  Result<pb::LockResp> Lock(uint64_t sid,
                            uint64_t owner,
                            uint32_t type,
                            uint64_t start,
                            uint64_t end,
                            uint32_t kind = LockTable::kPosix,
                            bool test = false) {
    pb::LockReq q;
    *q.mutable_ctx() = Ctx();
    q.mutable_ctx()->set_session_id(sid);
    *q.mutable_fid() = fid_;
    q.set_owner(owner);
    q.set_kind(kind);
    q.set_type(type);
    q.set_start(start);
    q.set_end(end);
    q.set_pid(static_cast<uint32_t>(100 + owner));
    q.set_test(test);
    return svc().Lock(q);
  }
  bool Granted(uint64_t sid, uint64_t owner, uint32_t type, uint64_t start, uint64_t end) {
    auto r = Lock(sid, owner, type, start, end);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() && r->granted();
  }
  pb::Fid fid_;
};

TEST_F(LockTest, ExclusiveConflictsAcrossSessions) {
  const uint64_t a = NewSession(), b = NewSession();
  EXPECT_TRUE(Granted(a, 1, LockTable::kExclusive, 0, 99));
  auto r = Lock(b, 1, LockTable::kExclusive, 50, 60);  // same owner id, other session
  ASSERT_OK(r);
  EXPECT_FALSE(r->granted());
  EXPECT_EQ(r->conflict_type(), LockTable::kExclusive);
  EXPECT_EQ(r->conflict_start(), 0u);
  EXPECT_EQ(r->conflict_end(), 99u);
  EXPECT_EQ(r->conflict_pid(), 101u);
  EXPECT_FALSE(Granted(b, 1, LockTable::kShared, 99, 99));
  EXPECT_TRUE(Granted(b, 1, LockTable::kExclusive, 100, kEof));  // no overlap
  EXPECT_TRUE(Granted(a, 1, LockTable::kUnlock, 0, kEof));
  EXPECT_TRUE(Granted(b, 1, LockTable::kExclusive, 50, 60));
}

TEST_F(LockTest, SharedLocksCoexist) {
  const uint64_t a = NewSession(), b = NewSession();
  EXPECT_TRUE(Granted(a, 1, LockTable::kShared, 0, kEof));
  EXPECT_TRUE(Granted(b, 2, LockTable::kShared, 10, 20));
  EXPECT_FALSE(Granted(b, 2, LockTable::kExclusive, 10, 20));
  // Owners within one session conflict too (fcntl locks are per process).
  EXPECT_FALSE(Granted(a, 3, LockTable::kExclusive, 5, 5));
  // An owner may upgrade a lock no one else shares.
  EXPECT_TRUE(Granted(b, 2, LockTable::kUnlock, 0, kEof));
  EXPECT_TRUE(Granted(a, 1, LockTable::kExclusive, 0, kEof));
}

TEST_F(LockTest, TestReportsWithoutTaking) {
  const uint64_t a = NewSession(), b = NewSession();
  auto t = Lock(b, 1, LockTable::kExclusive, 0, 9, LockTable::kPosix, true);
  ASSERT_OK(t);
  EXPECT_TRUE(t->granted());
  EXPECT_EQ(svc().TEST_LockCount(), 0u);
  EXPECT_TRUE(Granted(a, 7, LockTable::kShared, 5, 15));
  t = Lock(b, 1, LockTable::kExclusive, 0, 9, LockTable::kPosix, true);
  ASSERT_OK(t);
  EXPECT_FALSE(t->granted());
  EXPECT_EQ(t->conflict_type(), LockTable::kShared);
  EXPECT_EQ(t->conflict_start(), 5u);
  EXPECT_EQ(t->conflict_end(), 15u);
  EXPECT_EQ(t->conflict_pid(), 107u);
  t = Lock(b, 1, LockTable::kShared, 0, 9, LockTable::kPosix, true);
  ASSERT_OK(t);
  EXPECT_TRUE(t->granted());
}

TEST_F(LockTest, UnlockInTheMiddleSplitsAndMergeJoins) {
  const uint64_t a = NewSession(), b = NewSession();
  EXPECT_TRUE(Granted(a, 1, LockTable::kExclusive, 0, 99));
  EXPECT_TRUE(Granted(a, 1, LockTable::kUnlock, 40, 59));
  EXPECT_EQ(svc().TEST_LockCount(), 2u);  // [0,39] and [60,99]
  EXPECT_TRUE(Granted(b, 1, LockTable::kExclusive, 40, 59));
  EXPECT_FALSE(Granted(b, 1, LockTable::kExclusive, 39, 39));
  EXPECT_FALSE(Granted(b, 1, LockTable::kExclusive, 60, 60));
  EXPECT_TRUE(Granted(b, 1, LockTable::kUnlock, 0, kEof));
  // Filling the hole merges the three ranges into one.
  EXPECT_TRUE(Granted(a, 1, LockTable::kExclusive, 40, 59));
  EXPECT_EQ(svc().TEST_LockCount(), 1u);
  // Adjacent ranges merge too; a read lock over the middle of a write lock splits it in three.
  EXPECT_TRUE(Granted(a, 1, LockTable::kExclusive, 100, 199));
  EXPECT_EQ(svc().TEST_LockCount(), 1u);
  EXPECT_TRUE(Granted(a, 1, LockTable::kShared, 50, 149));
  EXPECT_EQ(svc().TEST_LockCount(), 3u);
  EXPECT_TRUE(Granted(b, 1, LockTable::kShared, 50, 149));
  EXPECT_FALSE(Granted(b, 1, LockTable::kShared, 49, 49));
  EXPECT_FALSE(Granted(b, 1, LockTable::kShared, 150, 150));
  EXPECT_TRUE(Granted(a, 1, LockTable::kUnlock, 0, kEof));
  EXPECT_EQ(svc().TEST_LockCount(), 1u);  // b's shared lock
}

TEST_F(LockTest, FlockIsWholeFileAndSeparateFromPosix) {
  const uint64_t a = NewSession(), b = NewSession();
  auto r = Lock(a, 1, LockTable::kExclusive, 0, 0, LockTable::kFlock);
  ASSERT_OK(r);
  EXPECT_TRUE(r->granted());
  r = Lock(b, 1, LockTable::kShared, 500, 500, LockTable::kFlock);
  ASSERT_OK(r);
  EXPECT_FALSE(r->granted());
  EXPECT_TRUE(Granted(b, 1, LockTable::kExclusive, 0, kEof));  // POSIX: another space
  // Converting a flock lock (exclusive -> shared) replaces it.
  r = Lock(a, 1, LockTable::kShared, 0, 0, LockTable::kFlock);
  ASSERT_OK(r);
  EXPECT_TRUE(r->granted());
  r = Lock(b, 2, LockTable::kShared, 0, 0, LockTable::kFlock);
  ASSERT_OK(r);
  EXPECT_TRUE(r->granted());
}

TEST_F(LockTest, CloseSessionReleasesItsLocks) {
  const uint64_t a = NewSession(), b = NewSession();
  EXPECT_TRUE(Granted(a, 1, LockTable::kExclusive, 0, kEof));
  EXPECT_TRUE(Granted(a, 2, LockTable::kExclusive, 0, 0) == false);
  EXPECT_FALSE(Granted(b, 1, LockTable::kShared, 0, 0));
  pb::CloseSessionReq c;
  *c.mutable_ctx() = Ctx();
  c.mutable_ctx()->set_session_id(a);
  ASSERT_OK(svc().CloseSession(c));
  EXPECT_EQ(svc().TEST_LockCount(), 0u);
  EXPECT_TRUE(Granted(b, 1, LockTable::kExclusive, 0, kEof));
  EXPECT_CODE(Lock(a, 1, LockTable::kShared, 0, 0), kStale);
}

TEST_F(LockTest, LeaseExpiryReleasesLocks) {
  const uint64_t a = NewSession();
  EXPECT_TRUE(Granted(a, 1, LockTable::kExclusive, 0, kEof));
  svc().TEST_AdvanceClock(10001);
  ASSERT_OK(svc().TEST_Tick());
  EXPECT_EQ(svc().TEST_LockCount(), 0u);
  const uint64_t b = NewSession();
  EXPECT_TRUE(Granted(b, 1, LockTable::kExclusive, 0, kEof));
}

// Lock ranges are capped per file and per session (issue 13): one more range is kNoSpace
// naming the cap; unlocks, merges and other files are unaffected, and ending the session frees
// its allowance.
TEST_F(LockTest, LockRangesAreCappedPerFileAndPerSession) {
  options_.max_locks_per_file = 4;
  options_.max_locks_per_session = 6;
  Reopen();
  const uint64_t a = NewSession();
  const uint64_t b = NewSession();
  for (uint64_t i = 0; i < 4; ++i)
    ASSERT_TRUE(Granted(a, 1, LockTable::kShared, i * 10, i * 10 + 1));  // 4 separate ranges
  auto over = Lock(b, 2, LockTable::kShared, 100, 101);
  EXPECT_CODE(over, kNoSpace);
  EXPECT_NE(over.status().message().find("too many lock ranges on this file (cap 4)"),
            std::string::npos)
      << over.status().ToString();
  // A lock that merges into a held range adds none, and unlocking is always allowed.
  EXPECT_TRUE(Granted(a, 1, LockTable::kShared, 2, 9));
  EXPECT_EQ(svc().TEST_LockCount(), 3u);
  EXPECT_TRUE(Granted(a, 1, LockTable::kUnlock, 0, kEof));
  EXPECT_EQ(svc().TEST_LockCount(), 0u);
  // Per session, across files.
  std::vector<pb::Fid> files;
  for (int f = 0; f < 3; ++f) {
    auto c = Create(root(), "lf" + std::to_string(f));
    ASSERT_OK(c);
    files.push_back(c->attr().fid());
  }
  const pb::Fid first = fid_;
  int granted = 0;
  Status last;
  for (const pb::Fid& f : files) {
    fid_ = f;
    for (uint64_t i = 0; i < 3; ++i) {
      auto r = Lock(a, 1, LockTable::kShared, i * 10, i * 10 + 1);
      if (r.ok()) {
        granted += r->granted();
      } else {
        last = r.status();
      }
    }
  }
  EXPECT_EQ(granted, 6);
  EXPECT_EQ(last.code(), StatusCode::kNoSpace);
  EXPECT_NE(last.message().find("too many lock ranges held by this session (cap 6)"),
            std::string::npos)
      << last.ToString();
  EXPECT_TRUE(Granted(b, 2, LockTable::kShared, 0, 1));  // another session is not affected
  pb::CloseSessionReq q;
  *q.mutable_ctx() = Ctx();
  q.mutable_ctx()->set_session_id(a);
  ASSERT_OK(svc().CloseSession(q));
  const uint64_t c = NewSession();
  for (uint64_t i = 0; i < 3; ++i)
    EXPECT_TRUE(Granted(c, 3, LockTable::kShared, 100 + i * 10, 101 + i * 10));
  fid_ = first;
}

TEST_F(LockTest, BadRequests) {
  const uint64_t a = NewSession();
  EXPECT_CODE(Lock(a, 1, 9, 0, 1), kInvalidArgument);
  EXPECT_CODE(Lock(a, 1, LockTable::kShared, 5, 4), kInvalidArgument);
  EXPECT_CODE(Lock(a, 1, LockTable::kShared, 0, 1, 7), kInvalidArgument);
  EXPECT_CODE(Lock(a, 1, LockTable::kUnlock, 0, 1, LockTable::kPosix, true), kInvalidArgument);
  EXPECT_CODE(Lock(0, 1, LockTable::kShared, 0, 1), kStale);
  EXPECT_CODE(Lock(987654, 1, LockTable::kShared, 0, 1), kStale);
}

}  // namespace
}  // namespace ciuic::meta::testing
