// Sessions over both stores: leases, open state, orphans, the reply cache, size updates.
#include <fcntl.h>
#include <sys/stat.h>

#include "meta/meta_test_util.h"

namespace ciuic::meta::testing {
namespace {

template <typename B>
class SessionTest : public MetaTest<B> {
 protected:
  void SetUp() override {
    this->options_.lease_ms = 10000;
    this->options_.punch_grace_ms = 0;
    MetaTest<B>::SetUp();
  }
  uint64_t NewSession() {
    pb::OpenSessionReq q;
    q.set_client_name("test");
    auto r = this->svc().OpenSession(q);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->session_id() : 0;
  }
  pb::ReqCtx SCtx(uint64_t sid, uint64_t seq = 0) {
    pb::ReqCtx c = Ctx();
    c.set_session_id(sid);
    c.set_seq(seq);
    return c;
  }
  Result<pb::CreateResp> CreateOpen(uint64_t sid, const std::string& name) {
    pb::CreateReq q;
    *q.mutable_ctx() = SCtx(sid);
    *q.mutable_parent() = this->root();
    q.set_name(name);
    q.set_mode(0644);
    q.set_open(true);
    q.set_open_flags(O_RDWR);
    return this->svc().Create(q);
  }
  Status Close(uint64_t sid, const pb::Fid& fid, uint64_t open_id, bool wrote = false) {
    pb::CloseReq q;
    *q.mutable_ctx() = SCtx(sid);
    *q.mutable_fid() = fid;
    q.set_open_id(open_id);
    q.set_wrote(wrote);
    return this->svc().Close(q).status();
  }
  // Gives the file's first component an object by registering OSTs before creating.
  void WithOsts() { this->RegisterOsts(2); }
};
TYPED_TEST_SUITE(SessionTest, Backends);

TYPED_TEST(SessionTest, OpenRenewClose) {
  pb::OpenSessionReq q;
  q.set_client_name("node7");
  auto s = this->svc().OpenSession(q);
  ASSERT_OK(s);
  EXPECT_NE(s->session_id(), 0u);
  EXPECT_EQ(s->lease_ms(), 10000u);
  EXPECT_EQ(F(s->root()), kRootFid);
  EXPECT_EQ(s->cluster_uuid(), "test-cluster");
  pb::RenewSessionReq r;
  *r.mutable_ctx() = this->SCtx(s->session_id());
  ASSERT_OK(this->svc().RenewSession(r));
  pb::CloseSessionReq c;
  *c.mutable_ctx() = this->SCtx(s->session_id());
  ASSERT_OK(this->svc().CloseSession(c));
  EXPECT_CODE(this->svc().RenewSession(r), kStale);
  EXPECT_EQ(this->svc().TEST_SessionCount(), 0u);
}

TYPED_TEST(SessionTest, OpenNeedsALiveSession) {
  auto f = this->Create(this->root(), "f");
  pb::OpenReq q;
  *q.mutable_ctx() = this->SCtx(424242);
  *q.mutable_fid() = f->attr().fid();
  q.set_flags(O_RDONLY);
  EXPECT_CODE(this->svc().Open(q), kStale);
  *q.mutable_ctx() = this->SCtx(this->NewSession());
  auto o = this->svc().Open(q);
  ASSERT_OK(o);
  EXPECT_NE(o->open_id(), 0u);
}

TYPED_TEST(SessionTest, OpenChecksAccessMode) {
  auto pub = this->Pub();
  auto f = this->Create(pub, "f", 0644, Ctx(1000, 1000));
  const uint64_t sid = this->NewSession();
  pb::OpenReq q;
  *q.mutable_ctx() = Ctx(1001, 1001);
  q.mutable_ctx()->set_session_id(sid);
  *q.mutable_fid() = f->attr().fid();
  q.set_flags(O_RDONLY);
  ASSERT_OK(this->svc().Open(q));
  q.set_flags(O_WRONLY);
  EXPECT_CODE(this->svc().Open(q), kPermissionDenied);
  q.set_flags(O_RDONLY | O_TRUNC);
  ASSERT_OK(this->svc().Open(q));  // O_TRUNC without write access is ignored, as Linux
  *q.mutable_fid() = pub;
  q.set_flags(O_RDWR);
  EXPECT_CODE(this->svc().Open(q), kIsADirectory);
  q.set_flags(O_RDONLY);
  auto d = this->svc().Open(q);
  ASSERT_OK(d);
  EXPECT_EQ(d->open_id(), 0u);  // directories are not tracked
}

TYPED_TEST(SessionTest, FileUnlinkedWhileOpenIsAnOrphanUntilLastClose) {
  this->WithOsts();
  const uint64_t sid = this->NewSession();
  auto c = this->CreateOpen(sid, "f");
  ASSERT_OK(c);
  ASSERT_NE(c->open_id(), 0u);
  pb::OpenReq o;
  *o.mutable_ctx() = this->SCtx(sid);
  *o.mutable_fid() = c->attr().fid();
  o.set_flags(O_RDONLY);
  auto second = this->svc().Open(o);
  ASSERT_OK(second);
  ASSERT_OK(this->Unlink(this->root(), "f"));
  EXPECT_CODE(this->Lookup(this->root(), "f"), kNotFound);
  auto a = this->GetAttr(c->attr().fid());
  ASSERT_OK(a);  // still reachable by fid
  EXPECT_EQ(a->attr().nlink(), 0u);
  EXPECT_EQ(this->svc().TEST_OrphanCount(), 1u);
  EXPECT_EQ(this->CountCf(Cf::kOstLog), 0u);  // its data stays while open
  ASSERT_OK(this->Close(sid, c->attr().fid(), c->open_id(), true));
  ASSERT_OK(this->GetAttr(c->attr().fid()));
  ASSERT_OK(this->Close(sid, c->attr().fid(), second->open_id()));
  EXPECT_CODE(this->GetAttr(c->attr().fid()), kNotFound);
  EXPECT_EQ(this->svc().TEST_OrphanCount(), 0u);
  EXPECT_EQ(this->CountCf(Cf::kOstLog), 1u);  // destroy task for its one object
  // A second close of the same open is harmless.
  ASSERT_OK(this->Close(sid, c->attr().fid(), second->open_id()));
}

TYPED_TEST(SessionTest, OrphanIsDestroyedWhenTheLeaseExpires) {
  const uint64_t sid = this->NewSession();
  auto c = this->CreateOpen(sid, "f");
  ASSERT_OK(c);
  ASSERT_OK(this->Unlink(this->root(), "f"));
  ASSERT_OK(this->svc().TEST_Tick());
  ASSERT_OK(this->GetAttr(c->attr().fid()));  // lease still valid
  this->svc().TEST_AdvanceClock(10001);
  ASSERT_OK(this->svc().TEST_Tick());
  EXPECT_CODE(this->GetAttr(c->attr().fid()), kNotFound);
  EXPECT_EQ(this->svc().TEST_SessionCount(), 0u);
  EXPECT_EQ(this->CountCf(Cf::kSessions), 0u);
  pb::RenewSessionReq r;
  *r.mutable_ctx() = this->SCtx(sid);
  EXPECT_CODE(this->svc().RenewSession(r), kStale);
}

TYPED_TEST(SessionTest, RenewalKeepsTheLease) {
  const uint64_t sid = this->NewSession();
  auto c = this->CreateOpen(sid, "f");
  ASSERT_OK(this->Unlink(this->root(), "f"));
  pb::RenewSessionReq r;
  *r.mutable_ctx() = this->SCtx(sid);
  for (int i = 0; i < 5; ++i) {
    this->svc().TEST_AdvanceClock(6000);
    ASSERT_OK(this->svc().RenewSession(r));
    ASSERT_OK(this->svc().TEST_Tick());
  }
  ASSERT_OK(this->GetAttr(c->attr().fid()));
}

TYPED_TEST(SessionTest, OrphansAndSessionsSurviveRestart) {
  const uint64_t sid = this->NewSession();
  auto c = this->CreateOpen(sid, "f");
  ASSERT_OK(c);
  ASSERT_OK(this->Unlink(this->root(), "f"));
  this->Reopen();
  ASSERT_OK(this->GetAttr(c->attr().fid()));
  EXPECT_EQ(this->svc().TEST_SessionCount(), 1u);
  pb::RenewSessionReq r;
  *r.mutable_ctx() = this->SCtx(sid);
  ASSERT_OK(this->svc().RenewSession(r));
  ASSERT_OK(this->Close(sid, c->attr().fid(), c->open_id()));
  EXPECT_CODE(this->GetAttr(c->attr().fid()), kNotFound);
  // Session ids are never reused after a restart either.
  this->Reopen();
  EXPECT_GT(this->NewSession(), sid);
}

TYPED_TEST(SessionTest, CloseSessionClosesItsFiles) {
  const uint64_t sid = this->NewSession();
  auto c = this->CreateOpen(sid, "f");
  ASSERT_OK(this->Unlink(this->root(), "f"));
  pb::CloseSessionReq q;
  *q.mutable_ctx() = this->SCtx(sid);
  ASSERT_OK(this->svc().CloseSession(q));
  EXPECT_CODE(this->GetAttr(c->attr().fid()), kNotFound);
  ASSERT_OK(this->svc().CloseSession(q));  // idempotent
}

// A writer's close says whether its writes are all the file's changes since its open (the node
// cache's write-through, docs/design.md "Node cache"): not when another close moved the data
// version meanwhile, nor while another open of the file remains.
TYPED_TEST(SessionTest, CloseSaysWhetherTheWriterWasAlone) {
  const uint64_t sid = this->NewSession();
  auto c = this->CreateOpen(sid, "f");
  ASSERT_OK(c);
  const pb::Fid fid = c->attr().fid();
  auto close = [&](uint64_t open_id, uint64_t opened_version) {
    pb::CloseReq q;
    *q.mutable_ctx() = this->SCtx(sid);
    *q.mutable_fid() = fid;
    q.set_open_id(open_id);
    q.set_wrote(true);
    q.set_check_sole(true);
    q.set_opened_version(opened_version);
    auto r = this->svc().Close(q);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->sole_version() : ~uint64_t{0};
  };
  auto open = [&] {
    pb::OpenReq q;
    *q.mutable_ctx() = this->SCtx(sid);
    *q.mutable_fid() = fid;
    q.set_flags(O_RDWR);
    auto r = this->svc().Open(q);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::make_pair(r->open_id(), r->attr().data_version())
                  : std::make_pair(uint64_t{0}, uint64_t{0});
  };
  const uint64_t v0 = c->attr().data_version();
  EXPECT_EQ(close(c->open_id(), v0), v0 + 1);  // alone: the version its close made
  // Two opens: the first close is not alone (the other may still write), the second saw the
  // first's close move the version.
  auto [a, va] = open();
  auto [b, vb] = open();
  EXPECT_EQ(va, v0 + 1);
  EXPECT_EQ(close(a, va), 0u);
  EXPECT_EQ(close(b, vb), 0u);
  // A handle that asks with a version the file no longer has.
  auto [d, vd] = open();
  EXPECT_EQ(close(d, vd - 1), 0u);
  EXPECT_EQ(this->GetAttr(fid)->attr().data_version(), v0 + 4);
}

// A session that ends with a file open for writing (its client died) may have written: the data
// version moves, so no node cache keeps serving blocks cached before those writes. Read-only
// opens leave it.
TYPED_TEST(SessionTest, ASessionEndingWithAWriteOpenMovesTheDataVersion) {
  const uint64_t sid = this->NewSession();
  auto c = this->CreateOpen(sid, "w");
  ASSERT_OK(c);
  auto f = this->Create(this->root(), "r");
  ASSERT_OK(f);
  pb::OpenReq q;
  *q.mutable_ctx() = this->SCtx(sid);
  *q.mutable_fid() = f->attr().fid();
  q.set_flags(O_RDONLY);
  ASSERT_OK(this->svc().Open(q));
  const uint64_t vw = c->attr().data_version();
  const uint64_t vr = this->GetAttr(f->attr().fid())->attr().data_version();
  pb::CloseSessionReq e;
  *e.mutable_ctx() = this->SCtx(sid);
  ASSERT_OK(this->svc().CloseSession(e));
  EXPECT_EQ(this->GetAttr(c->attr().fid())->attr().data_version(), vw + 1);
  EXPECT_EQ(this->GetAttr(f->attr().fid())->attr().data_version(), vr);
}

// Caps on the state one client can make the MDS hold (issue 13): a session holds at most
// max_opens_per_session open files; one more is kNoSpace naming the cap, and a close makes room.
TYPED_TEST(SessionTest, OpensPerSessionAreCapped) {
  this->options_.max_opens_per_session = 3;
  this->Reopen();
  const uint64_t sid = this->NewSession();
  std::vector<pb::CreateResp> opened;
  for (int i = 0; i < 3; ++i) {
    auto c = this->CreateOpen(sid, "f" + std::to_string(i));
    ASSERT_OK(c);
    opened.push_back(*c);
  }
  auto over = this->CreateOpen(sid, "f3");
  EXPECT_CODE(over, kNoSpace);
  EXPECT_NE(over.status().message().find("too many open files in this session (cap 3)"),
            std::string::npos)
      << over.status().ToString();
  pb::OpenReq q;
  *q.mutable_ctx() = this->SCtx(sid);
  *q.mutable_fid() = opened[0].attr().fid();
  q.set_flags(O_RDONLY);
  EXPECT_CODE(this->svc().Open(q), kNoSpace);
  // Another session has its own allowance.
  ASSERT_OK(this->CreateOpen(this->NewSession(), "g"));
  // A close makes room, and the count survives a restart.
  ASSERT_OK(this->Close(sid, opened[0].attr().fid(), opened[0].open_id()));
  ASSERT_OK(this->CreateOpen(sid, "f3"));
  this->Reopen();
  EXPECT_CODE(this->CreateOpen(sid, "f4"), kNoSpace);
}

// At most max_sessions_per_key sessions per client key; other keys count apart, and an ended
// session (closed or expired) makes room.
TYPED_TEST(SessionTest, SessionsPerClientKeyAreCapped) {
  this->options_.max_sessions_per_key = 2;
  this->Reopen();
  const uint64_t s1 = this->NewSession();
  this->NewSession();
  pb::OpenSessionReq q;
  q.set_client_name("one too many");
  auto over = this->svc().OpenSession(q);
  EXPECT_CODE(over, kNoSpace);
  EXPECT_NE(over.status().message().find("too many sessions of client key 0 (cap 2)"),
            std::string::npos)
      << over.status().ToString();
  pb::OpenSessionReq other = q;
  other.mutable_ctx()->set_key_id(100);
  ASSERT_OK(this->svc().OpenSession(other));
  this->Reopen();  // counted again from the store
  EXPECT_CODE(this->svc().OpenSession(q), kNoSpace);
  pb::CloseSessionReq c;
  *c.mutable_ctx() = this->SCtx(s1);
  ASSERT_OK(this->svc().CloseSession(c));
  ASSERT_OK(this->svc().OpenSession(q));
  EXPECT_CODE(this->svc().OpenSession(q), kNoSpace);
  this->svc().TEST_AdvanceClock(10001);
  ASSERT_OK(this->svc().TEST_Tick());
  ASSERT_OK(this->svc().OpenSession(q));
}

// Ending a session that holds many opens (close or lease expiry) releases them in batches of
// session_end_batch per commit, not in one unbounded write batch; the session is dead for its
// client at once, and every orphan is destroyed in the end.
TYPED_TEST(SessionTest, EndingASessionReleasesItsOpensInBoundedBatches) {
  this->options_.session_end_batch = 4;
  this->options_.tick_ms = 3600 * 1000;  // only TEST_Tick runs the lease checks here
  this->Reopen();
  for (bool by_expiry : {false, true}) {
    SCOPED_TRACE(by_expiry ? "lease expiry" : "close");
    const uint64_t sid = this->NewSession();
    std::vector<pb::Fid> fids;
    for (int i = 0; i < 10; ++i) {
      const std::string name = "m" + std::to_string(i);
      auto c = this->CreateOpen(sid, name);
      ASSERT_OK(c);
      fids.push_back(c->attr().fid());
      ASSERT_OK(this->Unlink(this->root(), name));  // an orphan until its open ends
    }
    EXPECT_EQ(this->CountCf(Cf::kSessions), 11u);  // the session + 10 opens
    if (by_expiry) {
      this->svc().TEST_AdvanceClock(10001);
      ASSERT_OK(this->svc().TEST_Tick());
    } else {
      pb::CloseSessionReq q;
      *q.mutable_ctx() = this->SCtx(sid);
      ASSERT_OK(this->svc().CloseSession(q));
    }
    EXPECT_EQ(this->CountCf(Cf::kSessions), 7u);  // 4 opens ended in the first batch
    pb::RenewSessionReq r;
    *r.mutable_ctx() = this->SCtx(sid);
    EXPECT_CODE(this->svc().RenewSession(r), kStale);
    EXPECT_CODE(this->CreateOpen(sid, "late"), kStale);
    ASSERT_OK(this->svc().TEST_Tick());
    EXPECT_EQ(this->CountCf(Cf::kSessions), 3u);
    ASSERT_OK(this->svc().TEST_Tick());
    EXPECT_EQ(this->CountCf(Cf::kSessions), 0u);
    EXPECT_EQ(this->svc().TEST_SessionCount(), 0u);
    for (const pb::Fid& f : fids)
      EXPECT_CODE(this->GetAttr(f), kNotFound);
  }
}

TYPED_TEST(SessionTest, RetriedMutationGetsTheOriginalReply) {
  const uint64_t sid = this->NewSession();
  pb::CreateReq q;
  *q.mutable_ctx() = this->SCtx(sid, 7);
  *q.mutable_parent() = this->root();
  q.set_name("f");
  q.set_mode(0644);
  q.set_exclusive(true);
  auto first = this->svc().Create(q);
  ASSERT_OK(first);
  auto retry = this->svc().Create(q);  // same (session, seq): the reply, not kAlreadyExists
  ASSERT_OK(retry);
  EXPECT_TRUE(retry->created());
  EXPECT_EQ(F(retry->attr().fid()), F(first->attr().fid()));
  q.mutable_ctx()->set_seq(8);
  EXPECT_CODE(this->svc().Create(q), kAlreadyExists);
  EXPECT_CODE(this->svc().Create(q), kAlreadyExists);  // the cached error, too

  pb::UnlinkReq u;
  *u.mutable_ctx() = this->SCtx(sid, 9);
  *u.mutable_parent() = this->root();
  u.set_name("f");
  ASSERT_OK(this->svc().Unlink(u));
  ASSERT_OK(this->svc().Unlink(u));  // not kNotFound
  u.mutable_ctx()->set_seq(10);
  EXPECT_CODE(this->svc().Unlink(u), kNotFound);
}

TYPED_TEST(SessionTest, RetryableRefusalsAreNotCached) {
  const uint64_t sid = this->NewSession();
  auto f = this->Create(this->root(), "f");  // no OST up: left uninstantiated
  ASSERT_OK(f);
  pb::InstantiateReq q;
  *q.mutable_ctx() = this->SCtx(sid, 3);
  *q.mutable_fid() = f->attr().fid();
  q.set_end(1);
  EXPECT_CODE(this->svc().Instantiate(q), kUnavailable);
  this->RegisterOsts(1);
  auto r = this->svc().Instantiate(q);  // same (session, seq): runs again
  ASSERT_OK(r);
  EXPECT_EQ(r->layout().components(0).osts_size(), 1);
}

TYPED_TEST(SessionTest, ReplyCacheIsBoundedPerSession) {
  this->options_.reply_cache_per_session = 4;
  this->Reopen();
  const uint64_t sid = this->NewSession();
  for (uint64_t seq = 1; seq <= 6; ++seq) {
    pb::MkdirReq q;
    *q.mutable_ctx() = this->SCtx(sid, seq);
    *q.mutable_parent() = this->root();
    q.set_name(fmt::format("d{}", seq));
    ASSERT_OK(this->svc().Mkdir(q));
  }
  pb::MkdirReq q;
  *q.mutable_ctx() = this->SCtx(sid, 6);
  *q.mutable_parent() = this->root();
  q.set_name("d6");
  ASSERT_OK(this->svc().Mkdir(q));  // still cached
  q.mutable_ctx()->set_seq(1);
  q.set_name("d1");
  EXPECT_CODE(this->svc().Mkdir(q), kAlreadyExists);  // evicted: executed again
}

TYPED_TEST(SessionTest, UpdateSizeIsExtendOnlyAndFencedByTruncateEpoch) {
  const uint64_t sid = this->NewSession();
  auto c = this->CreateOpen(sid, "f");
  ASSERT_OK(c);
  pb::UpdateSizeReq u;
  *u.mutable_ctx() = this->SCtx(sid);
  *u.mutable_fid() = c->attr().fid();
  u.set_size(1000);
  u.mutable_mtime()->set_sec(2000000000);
  u.mutable_mtime()->set_nsec(5);
  auto r = this->svc().UpdateSize(u);
  ASSERT_OK(r);
  EXPECT_EQ(r->attr().size(), 1000u);
  EXPECT_EQ(r->attr().mtime().sec(), 2000000000);
  u.set_size(500);
  u.clear_mtime();
  u.set_sync(true);
  u.set_bump_version(true);
  r = this->svc().UpdateSize(u);
  ASSERT_OK(r);
  EXPECT_EQ(r->attr().size(), 1000u);  // never shrinks
  EXPECT_EQ(r->attr().data_version(), 1u);
  pb::SetAttrReq t;
  *t.mutable_ctx() = this->SCtx(sid);
  *t.mutable_fid() = c->attr().fid();
  t.set_valid(8);
  t.set_size(10);
  auto tr = this->svc().SetAttr(t);
  ASSERT_OK(tr);
  EXPECT_EQ(tr->attr().trunc_epoch(), 1u);
  EXPECT_EQ(tr->attr().size(), 10u);
  u.set_size(5000);
  EXPECT_CODE(this->svc().UpdateSize(u), kStale);  // a writer from before the truncate
  u.set_trunc_epoch(1);
  r = this->svc().UpdateSize(u);
  ASSERT_OK(r);
  EXPECT_EQ(r->attr().size(), 5000u);
  u.set_trunc_epoch(2);
  EXPECT_CODE(this->svc().UpdateSize(u), kInvalidArgument);
  ASSERT_OK(this->Close(sid, c->attr().fid(), c->open_id(), true));
  EXPECT_EQ(this->GetAttr(c->attr().fid())->attr().data_version(), r->attr().data_version() + 1);
}

TYPED_TEST(SessionTest, FsyncDirAndSyncedUpdatesSucceed) {
  pb::FsyncDirReq q;
  *q.mutable_fid() = this->root();
  ASSERT_OK(this->svc().FsyncDir(q));
  *q.mutable_fid() = PbFid(Fid{77777, 0, 0});
  EXPECT_CODE(this->svc().FsyncDir(q), kNotFound);
}

}  // namespace
}  // namespace ciuic::meta::testing
