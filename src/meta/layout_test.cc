// Layout policy and OST placement: the adaptive table, PFL template, explicit and inherited
// layouts, instantiation, OST choice and the OST map.
#include <fcntl.h>

#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>

#include "meta/layout_policy.h"
#include "meta/meta_test_util.h"

namespace ciuic::meta::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

TEST(LayoutPolicyTest, NoHintGivesTheProgressiveTemplate) {
  FileLayout l = AdaptiveLayout(0, false, 32);
  ASSERT_EQ(l.components.size(), 3u);
  EXPECT_TRUE(l.Validate().ok()) << l.Validate().ToString();
  EXPECT_EQ(l.components[0].end, 64 * kMiB);
  EXPECT_EQ(l.components[0].stripe_count, 1u);
  EXPECT_EQ(l.components[1].start, 64 * kMiB);
  EXPECT_EQ(l.components[1].end, kGiB);
  EXPECT_EQ(l.components[1].stripe_count, 4u);
  EXPECT_EQ(l.components[2].end, kLayoutEof);
  EXPECT_EQ(l.components[2].stripe_count, 16u);
  for (const auto& c : l.components)
    EXPECT_EQ(c.stripe_size, kDefaultStripeSize);
  EXPECT_EQ(l.pattern, 0u);
  // Capped at the live OSTs.
  FileLayout small = AdaptiveLayout(0, false, 3);
  EXPECT_EQ(small.components[1].stripe_count, 3u);
  EXPECT_EQ(small.components[2].stripe_count, 3u);
  EXPECT_EQ(AdaptiveLayout(0, false, 0).components[2].stripe_count, 1u);
}

TEST(LayoutPolicyTest, SizeHintFollowsTheTable) {
  auto count = [](uint64_t hint, bool random, uint32_t live = 64) {
    FileLayout l = AdaptiveLayout(hint, random, live);
    EXPECT_EQ(l.components.size(), 1u);
    EXPECT_TRUE(l.Validate().ok());
    return l.components[0].stripe_count;
  };
  EXPECT_EQ(count(1, false), 1u);
  EXPECT_EQ(count(64 * kMiB - 1, false), 1u);
  EXPECT_EQ(count(64 * kMiB - 1, true), 1u);
  EXPECT_EQ(count(100 * kMiB, false), 1u);  // min(4, size/256MiB) but at least 1
  EXPECT_EQ(count(512 * kMiB, false), 2u);
  EXPECT_EQ(count(kGiB, false), 4u);
  EXPECT_EQ(count(100 * kGiB, false), 4u);
  EXPECT_EQ(count(128 * kMiB, true), 2u);  // min(16, size/64MiB)
  EXPECT_EQ(count(kGiB, true), 16u);
  EXPECT_EQ(count(100 * kGiB, true), 16u);
  EXPECT_EQ(count(kGiB, true, 5), 5u);
}

TEST(LayoutPolicyTest, TemplatesDropOstsAndCapCounts) {
  FileLayout l = AdaptiveLayout(0, false, 16);
  l.components[0].osts = {3};
  FileLayout t = AsTemplate(l);
  EXPECT_EQ(t.pattern, 1u);
  EXPECT_FALSE(t.components[0].instantiated());
  FileLayout f = FromTemplate(t, 2);
  EXPECT_EQ(f.components[2].stripe_count, 2u);
}

TEST(LayoutPolicyTest, ExplicitLayoutsAreBounded) {
  FileLayout l;
  for (uint32_t i = 0; i < kMaxComponents + 1; ++i) {
    LayoutComponent c;
    c.id = i;
    c.start = i * kMiB;
    c.end = i == kMaxComponents ? kLayoutEof : (i + 1) * kMiB;
    l.components.push_back(c);
  }
  EXPECT_EQ(ValidateExplicitLayout(l).code(), StatusCode::kInvalidArgument);
  l.components.resize(2);
  l.components[1].end = kLayoutEof;
  EXPECT_TRUE(ValidateExplicitLayout(l).ok()) << ValidateExplicitLayout(l).ToString();
}

template <typename B>
class PlacementTest : public MetaTest<B> {
 protected:
  Result<pb::CreateResp> CreateHint(const std::string& name, uint64_t hint, uint32_t flags = 0) {
    pb::CreateReq q;
    *q.mutable_parent() = this->root();
    q.set_name(name);
    q.set_mode(0644);
    q.set_size_hint(hint);
    q.set_open_flags(flags);
    return this->svc().Create(q);
  }
};
TYPED_TEST_SUITE(PlacementTest, Backends);

TYPED_TEST(PlacementTest, CreateInstantiatesTheFirstComponentOnly) {
  this->RegisterOsts(8);
  auto c = this->Create(this->root(), "f");
  ASSERT_OK(c);
  const auto& l = c->layout();
  ASSERT_EQ(l.components_size(), 3);
  EXPECT_EQ(l.components(0).osts_size(), 1);
  EXPECT_EQ(l.components(1).osts_size(), 0);
  EXPECT_EQ(l.components(2).osts_size(), 0);
  EXPECT_EQ(l.components(2).stripe_count(), 8u);
  // Instantiate is idempotent and never changes what is placed.
  pb::InstantiateReq q;
  *q.mutable_fid() = c->attr().fid();
  q.set_end(2 * kGiB);
  auto i1 = this->svc().Instantiate(q);
  ASSERT_OK(i1);
  ASSERT_EQ(i1->layout().components_size(), 3);
  EXPECT_EQ(i1->layout().components(0).osts(0), l.components(0).osts(0));
  EXPECT_EQ(i1->layout().components(1).osts_size(), 4);
  EXPECT_EQ(i1->layout().components(2).osts_size(), 8);
  std::set<uint32_t> distinct(i1->layout().components(2).osts().begin(),
                              i1->layout().components(2).osts().end());
  EXPECT_EQ(distinct.size(), 8u);
  auto i2 = this->svc().Instantiate(q);
  ASSERT_OK(i2);
  EXPECT_EQ(i2->layout().SerializeAsString(), i1->layout().SerializeAsString());
  EXPECT_EQ(this->GetAttr(c->attr().fid())->layout().SerializeAsString(),
            i1->layout().SerializeAsString());
  EXPECT_TRUE(net::FromPb(i1->layout()).Validate().ok());
}

TYPED_TEST(PlacementTest, ConsecutiveSmallFilesSpreadOverOsts) {
  this->RegisterOsts(4);
  std::map<uint32_t, int> per_ost;
  for (int i = 0; i < 8; ++i) {
    auto c = this->CreateHint(fmt::format("s{}", i), 4096);
    ASSERT_OK(c);
    ASSERT_EQ(c->layout().components_size(), 1);
    ASSERT_EQ(c->layout().components(0).osts_size(), 1);
    ++per_ost[c->layout().components(0).osts(0)];
  }
  ASSERT_EQ(per_ost.size(), 4u);
  for (const auto& [ost, n] : per_ost)
    EXPECT_EQ(n, 2) << "OST " << ost;
}

// A writer that creates files in a repeating pattern (ciuic pack: shard, index, shard, index...)
// must not get all files of one kind on the same OSTs, as plain round-robin would give.
TYPED_TEST(PlacementTest, AlternatingCreatesStillSpreadEachKind) {
  for (uint32_t osts : {2u, 4u}) {
    SCOPED_TRACE(osts);
    this->RegisterOsts(osts);
    std::map<uint32_t, int> shards, indexes;
    for (uint32_t i = 0; i < 8 * osts; ++i) {
      auto c = this->CreateHint(fmt::format("p{}-{}", osts, i), 4096);
      ASSERT_OK(c);
      ++(i % 2 == 0 ? shards : indexes)[c->layout().components(0).osts(0)];
    }
    EXPECT_EQ(shards.size(), osts);
    EXPECT_EQ(indexes.size(), osts);
    for (const auto& [ost, n] : shards)
      EXPECT_EQ(n, 4) << "OST " << ost;
  }
}

TYPED_TEST(PlacementTest, SizeHintAndRandomFlagPickStripeCounts) {
  this->RegisterOsts(16);
  auto seq = this->CreateHint("seq", 2 * kGiB);
  ASSERT_OK(seq);
  EXPECT_EQ(seq->layout().components(0).stripe_count(), 4u);
  EXPECT_EQ(seq->layout().components(0).osts_size(), 4);
  auto rnd = this->CreateHint("rnd", 2 * kGiB, O_RDWR | kOpenFlagRandomAccess);
  ASSERT_OK(rnd);
  EXPECT_EQ(rnd->layout().components(0).stripe_count(), 16u);
}

TYPED_TEST(PlacementTest, FullAndDownOstsAreSkipped) {
  this->RegisterOsts(2, "ossA:1");
  pb::RegisterOssReq r;
  r.set_oss_addr("ossB:1");
  r.set_cluster_uuid("test-cluster");
  auto* full = r.add_osts();
  full->set_index(2);
  full->set_capacity(1ull << 40);
  full->set_free(10 * kMiB);  // under 64 MiB: full
  ASSERT_OK(this->svc().RegisterOss(r));
  auto map = this->svc().GetOstMap(pb::GetOstMapReq());
  ASSERT_OK(map);
  ASSERT_EQ(map->osts_size(), 3);
  EXPECT_EQ(map->osts(2).state(), kOstFull);
  EXPECT_EQ(map->osts(2).oss_addr(), "ossB:1");
  for (int i = 0; i < 6; ++i) {
    auto c = this->CreateHint(fmt::format("f{}", i), 1);
    ASSERT_OK(c);
    EXPECT_NE(c->layout().components(0).osts(0), 2u);
  }
  // ossA goes silent for more than 3 heartbeats while ossB keeps beating: only ossB's OST is
  // left, and it is full, so nothing can be placed.
  this->svc().TEST_AdvanceClock(3 * 1000 + 1);
  pb::HeartbeatReq hb;
  hb.set_oss_addr("ossB:1");
  *hb.add_osts() = *full;
  ASSERT_OK(this->svc().Heartbeat(hb));
  ASSERT_OK(this->svc().TEST_Tick());
  map = this->svc().GetOstMap(pb::GetOstMapReq());
  EXPECT_EQ(map->osts(0).state(), kOstDown);
  EXPECT_EQ(map->osts(1).state(), kOstDown);
  auto none = this->CreateHint("none", 1);
  ASSERT_OK(none);
  EXPECT_EQ(none->layout().components(0).osts_size(), 0);  // placed later
  pb::InstantiateReq q;
  *q.mutable_fid() = none->attr().fid();
  q.set_end(1);
  EXPECT_CODE(this->svc().Instantiate(q), kUnavailable);
  // ossB frees space: its OST takes new files.
  hb.mutable_osts(0)->set_free(500ull << 30);
  ASSERT_OK(this->svc().Heartbeat(hb));
  auto placed = this->svc().Instantiate(q);
  ASSERT_OK(placed);
  EXPECT_EQ(placed->layout().components(0).osts(0), 2u);
}

TYPED_TEST(PlacementTest, ExplicitLayoutWinsAndIsValidated) {
  this->RegisterOsts(4);
  pb::CreateReq q;
  *q.mutable_parent() = this->root();
  q.set_name("x");
  q.set_mode(0644);
  auto* c = q.mutable_layout()->add_components();
  c->set_start(0);
  c->set_end(kLayoutEof);
  c->set_stripe_size(4 * kMiB);
  c->set_stripe_count(3);
  q.set_size_hint(10 * kGiB);  // ignored: explicit wins
  auto r = this->svc().Create(q);
  ASSERT_OK(r);
  EXPECT_EQ(r->layout().pattern(), 1u);
  EXPECT_EQ(r->layout().components(0).stripe_count(), 3u);
  EXPECT_EQ(r->layout().components(0).stripe_size(), 4 * kMiB);
  EXPECT_EQ(r->layout().components(0).osts_size(), 3);
  q.set_name("bad");
  c->set_stripe_size(1000);
  EXPECT_CODE(this->svc().Create(q), kInvalidArgument);
  c->set_stripe_size(kMiB);
  c->add_osts(99);
  c->set_stripe_count(1);
  EXPECT_CODE(this->svc().Create(q), kInvalidArgument);  // unknown OST
}

TYPED_TEST(PlacementTest, DirectoryDefaultIsInheritedByFilesAndSubdirectories) {
  this->RegisterOsts(4);
  auto d = this->Mkdir(this->root(), "ckpt");
  pb::SetLayoutReq s;
  *s.mutable_fid() = d->attr().fid();
  auto* c = s.mutable_layout()->add_components();
  c->set_end(kLayoutEof);
  c->set_stripe_size(2 * kMiB);
  c->set_stripe_count(2);
  c->add_osts(0);  // OSTs in a template are dropped
  c->add_osts(1);
  auto set = this->svc().SetLayout(s);
  ASSERT_OK(set);
  EXPECT_EQ(set->layout().components(0).osts_size(), 0);
  auto f = this->Create(d->attr().fid(), "rank0");
  ASSERT_OK(f);
  EXPECT_EQ(f->layout().pattern(), 1u);
  EXPECT_EQ(f->layout().components(0).stripe_count(), 2u);
  EXPECT_EQ(f->layout().components(0).stripe_size(), 2 * kMiB);
  EXPECT_EQ(f->layout().components(0).osts_size(), 2);
  auto sub = this->Mkdir(d->attr().fid(), "step100");
  auto g = this->Create(sub->attr().fid(), "rank1");
  EXPECT_EQ(g->layout().components(0).stripe_count(), 2u);
  // Non-owners may not set layouts.
  *s.mutable_ctx() = Ctx(1000, 1000);
  EXPECT_CODE(this->svc().SetLayout(s), kNotPermitted);
}

TYPED_TEST(PlacementTest, FileLayoutChangesOnlyBeforeData) {
  this->RegisterOsts(4);
  auto f = this->Create(this->root(), "f");
  pb::SetLayoutReq s;
  *s.mutable_fid() = f->attr().fid();
  auto* c = s.mutable_layout()->add_components();
  c->set_end(kLayoutEof);
  c->set_stripe_size(kMiB);
  c->set_stripe_count(4);
  auto r = this->svc().SetLayout(s);
  ASSERT_OK(r);
  EXPECT_EQ(r->layout().components(0).osts_size(), 4);
  pb::UpdateSizeReq u;
  *u.mutable_fid() = f->attr().fid();
  u.set_size(1);
  ASSERT_OK(this->svc().UpdateSize(u));
  EXPECT_CODE(this->svc().SetLayout(s), kBusy);
}

TYPED_TEST(PlacementTest, FallocateIsASizeHint) {
  this->RegisterOsts(8);
  auto f = this->Create(this->root(), "shard");
  ASSERT_EQ(f->layout().components_size(), 3);  // no hint at create
  pb::FallocateReq q;
  *q.mutable_fid() = f->attr().fid();
  q.set_offset(0);
  q.set_length(2 * kGiB);
  q.set_keep_size(true);
  auto r = this->svc().Fallocate(q);
  ASSERT_OK(r);
  ASSERT_EQ(r->layout().components_size(), 1);
  EXPECT_EQ(r->layout().components(0).stripe_count(), 4u);
  EXPECT_EQ(r->attr().size(), 0u);
  q.set_keep_size(false);
  r = this->svc().Fallocate(q);
  ASSERT_OK(r);
  EXPECT_EQ(r->attr().size(), 2 * kGiB);
  EXPECT_EQ(r->layout().components(0).stripe_count(), 4u);  // now fixed
  q.set_length(0);
  EXPECT_CODE(this->svc().Fallocate(q), kInvalidArgument);
}

TYPED_TEST(PlacementTest, TruncateOfANeverWrittenFileIsASizeHint) {
  this->RegisterOsts(8);
  auto f = this->Create(this->root(), "f");
  pb::SetAttrReq t;
  *t.mutable_fid() = f->attr().fid();
  t.set_valid(8);
  t.set_size(kGiB);
  auto r = this->svc().SetAttr(t);
  ASSERT_OK(r);
  EXPECT_EQ(r->punches_size(), 0);
  ASSERT_EQ(r->attr().size(), kGiB);
  EXPECT_EQ(this->GetAttr(f->attr().fid())->layout().components(0).stripe_count(), 4u);
}

TYPED_TEST(PlacementTest, RegisterOssChecksTheCluster) {
  pb::RegisterOssReq r;
  r.set_oss_addr("oss:1");
  r.set_cluster_uuid("another-cluster");
  r.add_osts()->set_index(0);
  EXPECT_CODE(this->svc().RegisterOss(r), kPermissionDenied);
  r.set_cluster_uuid("test-cluster");
  r.mutable_osts(0)->set_index(70000);
  EXPECT_CODE(this->svc().RegisterOss(r), kInvalidArgument);
  pb::HeartbeatReq hb;
  hb.set_oss_addr("stranger:1");
  EXPECT_CODE(this->svc().Heartbeat(hb), kNotFound);
}

TYPED_TEST(PlacementTest, OstMapSurvivesRestartAsDownUntilHeardFrom) {
  this->RegisterOsts(2, "oss:9");
  this->Reopen();
  auto map = this->svc().GetOstMap(pb::GetOstMapReq());
  ASSERT_OK(map);
  ASSERT_EQ(map->osts_size(), 2);
  EXPECT_EQ(map->osts(0).state(), kOstDown);
  pb::HeartbeatReq hb;
  hb.set_oss_addr("oss:9");
  ASSERT_OK(this->svc().Heartbeat(hb));
  map = this->svc().GetOstMap(pb::GetOstMapReq());
  // Heard from, but free space is unknown until a heartbeat reports it.
  EXPECT_EQ(map->osts(0).state(), kOstFull);
  for (uint32_t i = 0; i < 2; ++i) {
    auto* o = hb.add_osts();
    o->set_index(i);
    o->set_free(100ull << 30);  // over 1% of the capacity
  }
  ASSERT_OK(this->svc().Heartbeat(hb));
  map = this->svc().GetOstMap(pb::GetOstMapReq());
  EXPECT_EQ(map->osts(0).state(), kOstUp);
  EXPECT_EQ(map->osts(0).capacity(), 1ull << 40);
  EXPECT_EQ(map->osts(1).state(), kOstUp);
}

}  // namespace
}  // namespace ciuic::meta::testing

namespace ciuic::meta::testing {
namespace {

// `n` OSSes with `per` OSTs each, registered now; OSS i has address "oss<i>" and `label(i)`.
std::unique_ptr<OstMap> MakeMap(int n, int per, std::function<std::string(int)> label = nullptr) {
  auto m = std::make_unique<OstMap>();
  for (int i = 0; i < n; ++i) {
    google::protobuf::RepeatedPtrField<pb::OstInfo> osts;
    for (int k = 0; k < per; ++k) {
      pb::OstInfo* o = osts.Add();
      o->set_index(static_cast<uint32_t>(i * per + k));
      o->set_capacity(100ull << 30);
      o->set_free(50ull << 30);
    }
    m->Register(fmt::format("oss{}", i), osts, 1000, label ? label(i) : "", 7);
  }
  return m;
}

std::string DomainOf(uint32_t ost, int per) {
  return fmt::format("oss{}", ost / static_cast<uint32_t>(per));
}

TEST(ChainTest, ChainsSpanDistinctDomainsAndSpreadHeads) {
  auto mp = MakeMap(2, 2);
  OstMap& m = *mp;
  std::vector<pb::Chain> used;
  auto ids = m.ChooseChains(4, 2, &used);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  ASSERT_EQ(ids->size(), 4u);
  std::map<uint32_t, int> heads, members;
  for (const pb::Chain& c : used) {
    ASSERT_EQ(c.members_size(), 2);
    EXPECT_NE(DomainOf(c.members(0).ost(), 2), DomainOf(c.members(1).ost(), 2));
    EXPECT_GE(c.id(), kChainBase);
    ++heads[c.members(0).ost()];
    for (const auto& mem : c.members()) {
      EXPECT_EQ(mem.state(), kMemberServing);
      ++members[mem.ost()];
    }
  }
  EXPECT_EQ(heads.size(), 4u);    // every OST heads one chain
  EXPECT_EQ(members.size(), 4u);  // and holds two copies
  for (const auto& [ost, n] : members)
    EXPECT_EQ(n, 2) << "OST " << ost;
  // The same members reuse a chain.
  std::vector<pb::Chain> again;
  auto ids2 = m.ChooseChains(4, 2, &again);
  ASSERT_TRUE(ids2.ok());
  std::set<uint32_t> a(ids->begin(), ids->end()), b(ids2->begin(), ids2->end());
  EXPECT_EQ(a, b);
  EXPECT_EQ(m.Snapshot().chains_size(), 4);
}

TEST(ChainTest, MoreReplicasThanDomainsIsAnError) {
  auto mp = MakeMap(3, 1, [](int i) { return i < 2 ? std::string("rack-a") : ""; });
  OstMap& m = *mp;
  EXPECT_EQ(m.Domains(false), 2u);
  std::vector<pb::Chain> used;
  auto r = m.ChooseChains(1, 3, &used);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("3 replicas need 3 failure domains; the cluster has 2"),
            std::string::npos)
      << r.status().ToString();
  auto two = m.ChooseChains(1, 2, &used);
  ASSERT_TRUE(two.ok());
  // OSSes 0 and 1 share a label: never both in one chain.
  const pb::Chain& c = used.back();
  EXPECT_TRUE(c.members(0).ost() == 2 || c.members(1).ost() == 2);
}

TEST(ChainTest, DeadMembersGoOfflineButNeverTheLastServingOne) {
  auto mp = MakeMap(2, 1);
  OstMap& m = *mp;
  std::vector<pb::Chain> used;
  ASSERT_TRUE(m.ChooseChains(2, 2, &used).ok());
  const uint64_t v0 = m.chains_version();
  EXPECT_TRUE(m.ExpireChainMembers(1500, 3000).empty());
  // OSS 0 goes silent: its OST goes down, then its members offline.
  google::protobuf::RepeatedPtrField<pb::OstInfo> one;
  pb::OstInfo* o = one.Add();
  o->set_index(1);
  o->set_capacity(100ull << 30);
  o->set_free(50ull << 30);
  ASSERT_TRUE(m.Heartbeat("oss1", one, 5000).ok());
  EXPECT_EQ(m.ExpireSilent(5000, 3000), 1);
  std::vector<pb::Chain> changed = m.ExpireChainMembers(5000, 3000);
  ASSERT_EQ(changed.size(), 2u);
  for (const pb::Chain& c : changed) {
    for (const auto& mem : c.members())
      EXPECT_EQ(mem.state(), mem.ost() == 0 ? kMemberOffline : kMemberServing);
  }
  EXPECT_GT(m.chains_version(), v0);
  EXPECT_EQ(m.Health().degraded, 2u);
  EXPECT_EQ(m.Health().unavailable, 0u);
  // OSS 1 dies too: it holds the last serving copies, which stay (the chains wait for it).
  EXPECT_EQ(m.ExpireSilent(9000, 3000), 1);
  EXPECT_TRUE(m.ExpireChainMembers(9000, 3000).empty());
  EXPECT_EQ(m.Health().unavailable, 2u);
  // A restart loads the chains with a version above any published before.
  pb::GetOstMapResp snap = m.Snapshot();
  OstMap fresh;
  for (const auto& c : snap.chains())
    fresh.LoadChain(c);
  const pb::GetOstMapResp loaded = fresh.Snapshot();
  ASSERT_EQ(loaded.chains_size(), 2);
  for (const auto& c : loaded.chains())
    EXPECT_GE(c.version(), uint64_t{1} << 32);
}

TEST(ChainTest, AnOssBackInAnotherEpochLeavesItsChains) {
  auto mp = MakeMap(2, 1);
  OstMap& m = *mp;
  std::vector<pb::Chain> used;
  ASSERT_TRUE(m.ChooseChains(2, 2, &used).ok());
  google::protobuf::RepeatedPtrField<pb::OstInfo> osts;
  pb::OstInfo* o = osts.Add();
  o->set_index(0);
  o->set_capacity(100ull << 30);
  o->set_free(50ull << 30);
  m.Register("oss0", osts, 2000, "", 7);  // same epoch: a process restart keeps the page cache
  EXPECT_TRUE(m.TakeChangedChains().empty());
  m.Register("oss0", osts, 2100, "", 8);  // another: it lost power
  std::vector<pb::Chain> changed = m.TakeChangedChains();
  ASSERT_EQ(changed.size(), 2u);
  for (const pb::Chain& c : changed) {
    for (const auto& mem : c.members())
      EXPECT_EQ(mem.state(), mem.ost() == 0 ? kMemberOffline : kMemberServing);
  }
}

TEST(ChainTest, AMemberBackOnAnUpOstSyncsThenServesWhenItsResyncIsDone) {
  auto mp = MakeMap(2, 1);
  OstMap& m = *mp;
  std::vector<pb::Chain> used;
  auto ids = m.ChooseChains(1, 2, &used);
  ASSERT_TRUE(ids.ok());
  const uint32_t chain = (*ids)[0];
  google::protobuf::RepeatedPtrField<pb::OstInfo> osts;
  pb::OstInfo* o = osts.Add();
  o->set_index(0);
  o->set_capacity(100ull << 30);
  o->set_free(50ull << 30);
  m.Register("oss0", osts, 2000, "", 8);  // back in another epoch: offline
  ASSERT_EQ(m.TakeChangedChains().size(), 1u);
  // The next tick: its OST is up, the other member serves, so it syncs.
  std::vector<pb::Chain> changed = m.ExpireChainMembers(2100, 3000);
  ASSERT_EQ(changed.size(), 1u);
  uint64_t since = 0;
  for (const auto& mem : changed[0].members()) {
    if (mem.ost() == 0) {
      EXPECT_EQ(mem.state(), kMemberSyncing);
      since = mem.since();
    }
  }
  EXPECT_EQ(since, changed[0].version());
  EXPECT_TRUE(m.ExpireChainMembers(2200, 3000).empty());  // stays syncing
  google::protobuf::RepeatedPtrField<pb::ResyncProgress> reports;
  pb::ResyncProgress* p = reports.Add();
  p->set_chain(chain);
  p->set_ost(0);
  p->set_since(since - 1);  // an older resync's report changes nothing
  p->set_done(true);
  EXPECT_TRUE(m.NoteResync(reports).empty());
  p->set_since(since);
  p->set_done(false);
  p->set_objects_done(3);
  p->set_objects_total(10);
  EXPECT_TRUE(m.NoteResync(reports).empty());  // progress: no new version
  const pb::GetOstMapResp snap = m.Snapshot();
  for (const auto& c : snap.chains()) {
    for (const auto& mem : c.members()) {
      if (mem.ost() == 0) {
        EXPECT_EQ(mem.sync_objects_total(), 10u);
      }
    }
  }
  p->set_done(true);
  changed = m.NoteResync(reports);
  ASSERT_EQ(changed.size(), 1u);
  for (const auto& mem : changed[0].members())
    EXPECT_EQ(mem.state(), kMemberServing);
  EXPECT_EQ(m.Health().degraded, 0u);
}

TEST(ChainTest, AnOstBackAsANewDirectoryLeavesItsChains) {
  auto mp = MakeMap(2, 1);
  OstMap& m = *mp;
  std::vector<pb::Chain> used;
  ASSERT_TRUE(m.ChooseChains(1, 2, &used).ok());
  google::protobuf::RepeatedPtrField<pb::OstInfo> osts;
  pb::OstInfo* o = osts.Add();
  o->set_index(1);
  o->set_capacity(100ull << 30);
  o->set_free(50ull << 30);
  o->set_incarnation(11);
  m.Register("oss1", osts, 2000, "", 7);  // first known incarnation: nothing to compare
  EXPECT_TRUE(m.TakeChangedChains().empty());
  m.Register("oss1", osts, 2100, "", 7);
  EXPECT_TRUE(m.TakeChangedChains().empty());
  o->set_incarnation(12);  // same epoch, but formatted anew: empty
  m.Register("oss1", osts, 2200, "", 7);
  std::vector<pb::Chain> changed = m.TakeChangedChains();
  ASSERT_EQ(changed.size(), 1u);
  for (const auto& mem : changed[0].members())
    EXPECT_EQ(mem.state(), mem.ost() == 1 ? kMemberOffline : kMemberServing);
}

}  // namespace
}  // namespace ciuic::meta::testing
