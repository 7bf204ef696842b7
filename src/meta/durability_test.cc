// MetaService durability over RocksKvStore with a simulated power loss (Decision 2): synced
// operations (UpdateSize with sync, FsyncDir) survive with everything before them; later
// unsynced ones may vanish, and what is left is always a consistent namespace.
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include "meta/meta_test_util.h"
#include "meta/power_loss_fs.h"

namespace ciuic::meta::testing {
namespace {

class DurabilityTest : public ::testing::Test {
 protected:
  void Open() {
    RocksKvStore::Options o;
    o.path = dir_.path() + "/db";
    o.env = env_.get();
    auto kv = RocksKvStore::Open(o);
    ASSERT_TRUE(kv.ok()) << kv.status().ToString();
    MetaOptions mo;
    mo.cluster_uuid = "c";
    auto svc = MetaService::Open(std::move(kv).value(), mo);
    ASSERT_TRUE(svc.ok()) << svc.status().ToString();
    svc_ = std::move(svc).value();
  }
  void PowerCycle() {
    fs_->SetActive(false);
    svc_.reset();
    auto dropped = fs_->DropUnsyncedData();
    ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
    fs_->SetActive(true);
    ASSERT_NO_FATAL_FAILURE(Open());
  }
  Result<pb::LookupResp> Lookup(const std::string& name) {
    pb::LookupReq q;
    q.mutable_parent()->set_seq(1);
    q.set_name(name);
    return svc_->Lookup(q);
  }
  Result<pb::MkdirResp> Mkdir(const std::string& name) {
    pb::MkdirReq q;
    q.mutable_parent()->set_seq(1);
    q.set_name(name);
    q.set_mode(0755);
    return svc_->Mkdir(q);
  }
  uint32_t RootLinks() {
    pb::GetAttrReq q;
    q.mutable_fid()->set_seq(1);
    return svc_->GetAttr(q)->attr().nlink();
  }

  TempDir dir_;
  std::shared_ptr<PowerLossFs> fs_ = std::make_shared<PowerLossFs>(rocksdb::FileSystem::Default());
  std::unique_ptr<rocksdb::Env> env_ = rocksdb::NewCompositeEnv(fs_);
  std::unique_ptr<MetaService> svc_;
};

TEST_F(DurabilityTest, SyncedSizeUpdateSurvivesWithEverythingBeforeIt) {
  ASSERT_NO_FATAL_FAILURE(Open());
  pb::CreateReq c;
  c.mutable_parent()->set_seq(1);
  c.set_name("ckpt");
  c.set_mode(0644);
  auto f = svc_->Create(c);  // unsynced
  ASSERT_OK(f);
  pb::UpdateSizeReq u;
  *u.mutable_fid() = f->attr().fid();
  u.set_size(12345);
  u.set_sync(true);  // fsync
  ASSERT_OK(svc_->UpdateSize(u));
  ASSERT_OK(Mkdir("after"));  // unsynced: may be lost
  ASSERT_NO_FATAL_FAILURE(PowerCycle());
  auto l = Lookup("ckpt");
  ASSERT_OK(l);
  EXPECT_EQ(l->attr().size(), 12345u);
  EXPECT_CODE(Lookup("after"), kNotFound);
  EXPECT_EQ(RootLinks(), 2u);  // the lost mkdir took its link count change with it
}

TEST_F(DurabilityTest, FsyncDirMakesEarlierMutationsDurable) {
  ASSERT_NO_FATAL_FAILURE(Open());
  for (int i = 0; i < 20; ++i)
    ASSERT_OK(Mkdir(fmt::format("d{}", i)));
  pb::FsyncDirReq s;
  s.mutable_fid()->set_seq(1);
  ASSERT_OK(svc_->FsyncDir(s));
  for (int i = 20; i < 40; ++i)
    ASSERT_OK(Mkdir(fmt::format("d{}", i)));
  ASSERT_NO_FATAL_FAILURE(PowerCycle());
  for (int i = 0; i < 20; ++i)
    ASSERT_OK(Lookup(fmt::format("d{}", i)));
  // Whatever survived, each directory's entry and its link in the root go together.
  int present = 0;
  for (int i = 0; i < 40; ++i)
    present += Lookup(fmt::format("d{}", i)).ok() ? 1 : 0;
  EXPECT_EQ(RootLinks(), 2u + present);
  // Fids handed out before the loss are never handed out again.
  auto again = Mkdir("new");
  ASSERT_OK(again);
  for (int i = 0; i < 20; ++i) {
    EXPECT_NE(F(Lookup(fmt::format("d{}", i))->attr().fid()), F(again->attr().fid()));
  }
}

}  // namespace
}  // namespace ciuic::meta::testing
