// MetaService's side of tenants: the client key table (kept across restarts, ids never reused)
// and a subtree root in ReqCtx (resolution and FID checks never leave it).
#include <gtest/gtest.h>

#include "meta/meta_test_util.h"
#include "net/capability.h"

namespace ciuic::meta::testing {
namespace {

template <typename B>
class TenantMetaTest : public MetaTest<B> {
 protected:
  void SetUp() override {
    this->options_.admin_secret = std::string(32, 'k');
    MetaTest<B>::SetUp();
  }
  Result<pb::AddClientResp> Add(const std::string& name, const std::string& root = "") {
    pb::AddClientReq q;
    q.mutable_rules()->set_name(name);
    q.mutable_rules()->set_root_path(root);
    return this->svc().AddClient(q);
  }
};
TYPED_TEST_SUITE(TenantMetaTest, Backends);

TYPED_TEST(TenantMetaTest, ClientKeysSurviveARestartAndIdsAreNeverReused) {
  auto a = this->Add("a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->record().key_id(), net::kFirstClientKeyId);
  EXPECT_EQ(a->key(), net::DeriveClientKey(std::string(32, 'k'), a->record().key_id()));
  EXPECT_EQ(Code(this->Add("a")), StatusCode::kAlreadyExists);
  EXPECT_EQ(Code(this->Add("bad name")), StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(this->Add("b", "/missing")), StatusCode::kNotFound);
  pb::RevokeClientReq r;
  r.set_name("a");
  ASSERT_TRUE(this->svc().RevokeClient(r).ok());
  EXPECT_EQ(Code(this->svc().RevokeClient(r)), StatusCode::kNotFound);
  this->Reopen();
  auto rec = this->svc().FindClientKey(a->record().key_id());
  ASSERT_NE(rec, nullptr);
  EXPECT_TRUE(rec->revoked());
  EXPECT_EQ(this->svc().RevokedKeyIds(), std::vector<uint32_t>{a->record().key_id()});
  auto again = this->Add("a");  // the name is free again, the id is not
  ASSERT_TRUE(again.ok());
  EXPECT_GT(again->record().key_id(), a->record().key_id());
}

TYPED_TEST(TenantMetaTest, SubtreeRootBoundsResolutionAndFidChecks) {
  auto t = this->Mkdir(this->root(), "tenant", 0777);
  ASSERT_TRUE(t.ok());
  auto in = this->Mkdir(t->attr().fid(), "in", 0777);
  ASSERT_TRUE(in.ok());
  auto f = this->Create(in->attr().fid(), "f", 0666);
  ASSERT_TRUE(f.ok());
  auto o = this->Mkdir(this->root(), "other", 0777);
  ASSERT_TRUE(o.ok());
  auto secret = this->Create(o->attr().fid(), "secret", 0666);
  ASSERT_TRUE(secret.ok());
  auto rec = this->Add("sub", "/tenant");
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  pb::ReqCtx ctx = Ctx(1000, 1000);
  *ctx.mutable_root() = rec->record().root();

  auto r = this->Resolve("/in/f", true, ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(F(r->attr().fid()), F(f->attr().fid()));
  EXPECT_EQ(Code(this->Resolve("/../other/secret", true, ctx)), StatusCode::kNotFound);
  EXPECT_EQ(Code(this->Resolve("/in/../../../other", true, ctx)), StatusCode::kNotFound);
  auto up = this->Lookup(t->attr().fid(), "..", ctx);
  ASSERT_TRUE(up.ok());
  EXPECT_EQ(F(up->attr().fid()), F(t->attr().fid()));

  pb::GetAttrReq g;
  *g.mutable_ctx() = ctx;
  *g.mutable_fid() = f->attr().fid();
  EXPECT_TRUE(this->svc().CheckReach(g).ok());  // a file inside, through its parent
  *g.mutable_fid() = secret->attr().fid();
  EXPECT_EQ(this->svc().CheckReach(g).code(), StatusCode::kPermissionDenied);
  *g.mutable_fid() = this->root();
  EXPECT_EQ(this->svc().CheckReach(g).code(), StatusCode::kPermissionDenied);
  // Mutations are checked where they are applied.
  pb::LinkReq l;
  *l.mutable_ctx() = ctx;
  *l.mutable_fid() = secret->attr().fid();
  *l.mutable_new_parent() = in->attr().fid();
  l.set_new_name("stolen");
  EXPECT_EQ(Code(this->svc().Link(l)), StatusCode::kPermissionDenied);
  EXPECT_EQ(Code(this->Rename(in->attr().fid(), "f", o->attr().fid(), "f", 0, ctx)),
            StatusCode::kPermissionDenied);
  // A file moved out is out of reach; its parent followed the rename.
  ASSERT_TRUE(this->Rename(in->attr().fid(), "f", o->attr().fid(), "f").ok());
  *g.mutable_fid() = f->attr().fid();
  EXPECT_EQ(this->svc().CheckReach(g).code(), StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace ciuic::meta::testing
