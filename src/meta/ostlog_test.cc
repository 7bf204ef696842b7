// The OST work log over both stores: truncate punches, TruncateDone, destroys delivered by
// heartbeats, the punch grace period, and the log surviving a restart.
#include <fcntl.h>

#include <set>

#include "meta/meta_test_util.h"

namespace ciuic::meta::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

template <typename B>
class OstLogTest : public MetaTest<B> {
 protected:
  void SetUp() override {
    this->options_.punch_grace_ms = 5000;
    MetaTest<B>::SetUp();
    this->RegisterOsts(2, "ossA:1");
    RegisterB();
  }
  void RegisterB() {
    pb::RegisterOssReq r;
    r.set_oss_addr("ossB:1");
    r.set_cluster_uuid("test-cluster");
    for (uint32_t i = 2; i < 4; ++i) {
      auto* o = r.add_osts();
      o->set_index(i);
      o->set_capacity(1ull << 40);
      o->set_free(100ull << 30);
    }
    ASSERT_OK(this->svc().RegisterOss(r));
  }
  // A file striped 4 x 1 MiB over all four OSTs, `size` bytes long.
  pb::CreateResp Striped(const std::string& name, uint64_t size) {
    pb::CreateReq q;
    *q.mutable_parent() = this->root();
    q.set_name(name);
    q.set_mode(0644);
    auto* c = q.mutable_layout()->add_components();
    c->set_end(kLayoutEof);
    c->set_stripe_size(kMiB);
    c->set_stripe_count(4);
    auto r = this->svc().Create(q);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (size > 0) {
      pb::UpdateSizeReq u;
      *u.mutable_fid() = r->attr().fid();
      u.set_size(size);
      u.set_bump_version(true);
      EXPECT_TRUE(this->svc().UpdateSize(u).ok());
    }
    return r.value_or(pb::CreateResp());
  }
  Result<pb::HeartbeatResp> Beat(const std::string& addr, std::vector<uint64_t> done = {}) {
    pb::HeartbeatReq hb;
    hb.set_oss_addr(addr);
    for (auto id : done)
      hb.add_done_task_ids(id);
    return this->svc().Heartbeat(hb);
  }
};
TYPED_TEST_SUITE(OstLogTest, Backends);

TYPED_TEST(OstLogTest, TruncatePunchesObjectsAndTruncateDoneClearsThem) {
  auto f = this->Striped("f", 10 * kMiB);
  pb::SetAttrReq t;
  *t.mutable_fid() = f.attr().fid();
  t.set_valid(8);
  t.set_size(kMiB + kMiB / 2);  // 1.5 MiB
  auto r = this->svc().SetAttr(t);
  ASSERT_OK(r);
  EXPECT_EQ(r->attr().size(), kMiB + kMiB / 2);
  EXPECT_EQ(r->attr().trunc_epoch(), 1u);
  EXPECT_EQ(r->attr().data_version(), 2u);
  ASSERT_EQ(r->punches_size(), 4);
  const LayoutComponent comp = net::FromPb(f.layout().components(0));
  std::vector<uint64_t> ids;
  for (const auto& p : r->punches()) {
    EXPECT_EQ(p.kind(), 2u);
    EXPECT_EQ(F(p.obj().fid()), F(f.attr().fid()));
    EXPECT_EQ(p.ost(), comp.osts[p.obj().stripe()]);
    EXPECT_EQ(p.length(), ObjectLengthForFileSize(comp, p.obj().stripe(), kMiB + kMiB / 2));
    ids.push_back(p.id());
  }
  EXPECT_EQ(r->punches(0).length(), kMiB);
  EXPECT_EQ(r->punches(1).length(), kMiB / 2);
  EXPECT_EQ(r->punches(2).length(), 0u);
  EXPECT_EQ(this->CountCf(Cf::kOstLog), 4u);
  // Within the grace period the OSSes are not told: the client applies its own punches.
  EXPECT_EQ(this->Beat("ossA:1")->tasks_size(), 0);
  pb::TruncateDoneReq d;
  for (auto id : ids)
    d.add_task_ids(id);
  ASSERT_OK(this->svc().TruncateDone(d));
  ASSERT_OK(this->svc().TruncateDone(d));  // idempotent
  EXPECT_EQ(this->CountCf(Cf::kOstLog), 0u);
}

TYPED_TEST(OstLogTest, UnackedPunchesGoToTheOssAfterTheGracePeriod) {
  auto f = this->Striped("f", 8 * kMiB);
  pb::SetAttrReq t;
  *t.mutable_fid() = f.attr().fid();
  t.set_valid(8);
  t.set_size(0);
  auto r = this->svc().SetAttr(t);
  ASSERT_OK(r);
  ASSERT_EQ(r->punches_size(), 4);
  this->svc().TEST_AdvanceClock(5001);
  auto a = this->Beat("ossA:1");
  ASSERT_OK(a);
  auto b = this->Beat("ossB:1");
  ASSERT_EQ(a->tasks_size(), 2);
  ASSERT_EQ(b->tasks_size(), 2);
  for (const auto& task : a->tasks()) {
    EXPECT_LT(task.ost(), 2u);
    EXPECT_EQ(task.length(), 0u);
  }
  for (const auto& task : b->tasks())
    EXPECT_GE(task.ost(), 2u);
  // An OSS may only acknowledge its own OSTs' tasks.
  ASSERT_OK(this->Beat("ossA:1", {b->tasks(0).id(), b->tasks(1).id()}));
  EXPECT_EQ(this->Beat("ossB:1")->tasks_size(), 2);
  ASSERT_OK(this->Beat("ossB:1", {b->tasks(0).id(), b->tasks(1).id()}));
  EXPECT_EQ(this->Beat("ossB:1")->tasks_size(), 0);
  EXPECT_EQ(this->Beat("ossA:1")->tasks_size(), 2);
  // A client may not acknowledge destroys.
  this->Striped("g", kMiB);
  ASSERT_OK(this->Unlink(this->root(), "g"));
  auto dt = this->Beat("ossB:1");
  ASSERT_GT(dt->tasks_size(), 0);
  pb::TruncateDoneReq d;
  d.add_task_ids(dt->tasks(0).id());
  EXPECT_CODE(this->svc().TruncateDone(d), kInvalidArgument);
}

TYPED_TEST(OstLogTest, UnlinkLogsDestroysDeliveredByHeartbeat) {
  auto f = this->Striped("f", 3 * kMiB);
  ASSERT_OK(this->Unlink(this->root(), "f"));
  EXPECT_EQ(this->CountCf(Cf::kOstLog), 4u);  // every instantiated object
  auto a = this->Beat("ossA:1");
  ASSERT_OK(a);
  ASSERT_EQ(a->tasks_size(), 2);  // destroys need no grace
  std::set<uint32_t> stripes;
  for (const auto& t : a->tasks()) {
    EXPECT_EQ(t.kind(), 1u);
    EXPECT_EQ(F(t.obj().fid()), F(f.attr().fid()));
    stripes.insert(t.obj().stripe());
  }
  EXPECT_EQ(stripes.size(), 2u);
  ASSERT_OK(this->Beat("ossA:1", {a->tasks(0).id(), a->tasks(1).id()}));
  EXPECT_EQ(this->Beat("ossA:1")->tasks_size(), 0);
  EXPECT_EQ(this->CountCf(Cf::kOstLog), 2u);
}

TYPED_TEST(OstLogTest, NeverWrittenFilesNeedNoPunches) {
  auto f = this->Striped("f", 0);
  pb::SetAttrReq t;
  *t.mutable_fid() = f.attr().fid();
  t.set_valid(8);
  t.set_size(0);
  auto r = this->svc().SetAttr(t);
  ASSERT_OK(r);
  EXPECT_EQ(r->punches_size(), 0);
  EXPECT_EQ(this->CountCf(Cf::kOstLog), 0u);
}

TYPED_TEST(OstLogTest, OpenWithTruncReturnsPunches) {
  auto f = this->Striped("f", 4 * kMiB);
  pb::OpenReq o;
  *o.mutable_fid() = f.attr().fid();
  o.set_flags(O_WRONLY | O_TRUNC);
  auto r = this->svc().Open(o);
  ASSERT_OK(r);
  EXPECT_EQ(r->attr().size(), 0u);
  EXPECT_EQ(r->punches_size(), 4);
  EXPECT_EQ(r->attr().trunc_epoch(), 1u);
}

TYPED_TEST(OstLogTest, WorkLogSurvivesRestart) {
  this->Striped("f", 5 * kMiB);
  ASSERT_OK(this->Unlink(this->root(), "f"));
  this->Reopen();
  // After the restart the OSS is heard from again and gets the destroys.
  auto a = this->Beat("ossA:1");
  ASSERT_OK(a);
  EXPECT_EQ(a->tasks_size(), 2);
  for (const auto& t : a->tasks())
    EXPECT_EQ(t.kind(), 1u);
}

}  // namespace
}  // namespace ciuic::meta::testing
