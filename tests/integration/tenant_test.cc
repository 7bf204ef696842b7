// Tenant isolation on a MiniCluster (docs/design.md "Tenants and capabilities"): what a client
// holding a restricted client key tries in order to act beyond its rules, and is refused.
#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "ciuic.pb.h"
#include "net/capability.h"
#include "net/pb_convert.h"
#include "net/rpc.h"
#include "net/shm.h"
#include "testing/mini_cluster.h"

namespace ciuic::testing {
namespace {

class TenantTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}); }

  void Start(MiniClusterOptions o) {
    o.num_oss = 1;
    o.osts_per_oss = 2;
    o.mds_in_memory = true;
    cluster_ = MiniCluster::Start(o).value();
    admin_ = cluster_->NewClient().value();
  }

  // A client of `file` (a client key's cluster file) acting as uid/gid.
  std::unique_ptr<Client> Tenant(const std::string& file, uint32_t uid, uint32_t gid) {
    ClientOptions o;
    o.cluster_file = file;
    o.uid = uid;
    o.gid = gid;
    auto c = cluster_->NewClient(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  std::string AddKey(pb::ClientKeyRecord rules, pb::ClientKeyRecord* rec = nullptr) {
    auto f = cluster_->AddClientKey(rules, rec);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? *f : std::string();
  }

  // A raw authenticated connection with key `key_id` (a client key unless it is 1).
  std::shared_ptr<net::RpcChannel> Raw(uint16_t port, uint32_t key_id) {
    net::ChannelOptions co;
    co.key_id = key_id;
    co.secret = key_id == 1 ? cluster_->admin_secret()
                            : net::DeriveClientKey(cluster_->admin_secret(), key_id);
    auto ch = net::RpcChannel::Connect(&loop_, HostPort{"127.0.0.1", port}, co);
    EXPECT_TRUE(ch.ok()) << ch.status().ToString();
    return ch.ok() ? *ch : nullptr;
  }

  // A read of the first 4 KiB of `path`'s first object, straight from its OSS.
  pb::ReadReq ObjectRead(const std::string& path) {
    FileStat st = admin_->Stat(path).value();
    FileLayout l = admin_->GetLayoutAt(IdOf(st)).value();
    pb::ReadReq r;
    r.set_ost(l.components[0].osts[0]);
    net::ToPb(ObjectId{Fid{st.ino, st.fid_mds, st.fid_ver}, l.components[0].id, 0},
              r.mutable_obj());
    r.set_length(4096);
    return r;
  }

  // The capability the MDS gives key `key_id` for `path`.
  pb::Capability CapOf(uint32_t key_id, const std::string& path) {
    FileStat st = admin_->Stat(path).value();
    pb::GetAttrReq g;
    net::ToPb(Fid{st.ino, st.fid_mds, st.fid_ver}, g.mutable_fid());
    pb::GetAttrResp resp;
    EXPECT_TRUE(Raw(cluster_->mds_port(), key_id)->CallMsg(net::MsgType::kGetAttr, g, &resp).ok());
    return resp.layout().cap();
  }

  net::EventLoop loop_{1};
  uint32_t key_id_ = 0;
  std::unique_ptr<MiniCluster> cluster_;
  std::unique_ptr<Client> admin_;
};

pb::ClientKeyRecord Rules(const std::string& name) {
  pb::ClientKeyRecord r;
  r.set_name(name);
  r.set_squash_uid(65534);
  r.set_squash_gid(65534);
  return r;
}

TEST_F(TenantTest, SquashedKeyClaimingUidZeroActsAsNobody) {
  ASSERT_TRUE(admin_->WriteFile("/root-only", "secret").ok());
  ASSERT_TRUE(admin_->Chmod("/root-only", 0600).ok());
  ASSERT_TRUE(admin_->Mkdir("/pub", 0777).ok());
  pb::ClientKeyRecord r = Rules("squashed");
  r.set_squash_root(true);
  auto t = Tenant(AddKey(r), 0, 0);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ReadFile("/root-only").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(t->WriteFile("/in-root-dir", "x").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(t->Chmod("/root-only", 0666).code(), StatusCode::kNotPermitted);
  ASSERT_TRUE(t->WriteFile("/pub/mine", "x").ok());
  FileStat st = admin_->Stat("/pub/mine").value();
  EXPECT_EQ(st.uid, 65534u);
  EXPECT_EQ(st.gid, 65534u);
}

TEST_F(TenantTest, UidMapReplacesTheClaimedUid) {
  ASSERT_TRUE(admin_->Mkdir("/pub", 0777).ok());
  pb::ClientKeyRecord r = Rules("mapped");
  auto* e = r.add_uid_map();
  e->set_from(1000);
  e->set_to(5000);
  r.set_map_others(true);
  r.set_others_uid(65534);
  const std::string file = AddKey(r);
  ASSERT_TRUE(Tenant(file, 1000, 100)->WriteFile("/pub/a", "x").ok());
  ASSERT_TRUE(Tenant(file, 0, 100)->WriteFile("/pub/b", "x").ok());
  EXPECT_EQ(admin_->Stat("/pub/a").value().uid, 5000u);
  EXPECT_EQ(admin_->Stat("/pub/b").value().uid, 65534u);  // uid 0 is not in the map
}

TEST_F(TenantTest, ReadOnlyKeyCannotChangeAnything) {
  ASSERT_TRUE(admin_->Mkdir("/d", 0777).ok());
  ASSERT_TRUE(admin_->WriteFile("/d/f", "hello").ok());
  ASSERT_TRUE(admin_->Chmod("/d/f", 0666).ok());
  pb::ClientKeyRecord r = Rules("reader");
  r.set_read_only(true);
  pb::ClientKeyRecord rec;
  auto t = Tenant(AddKey(r, &rec), 0, 0);
  key_id_ = rec.key_id();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ReadFile("/d/f").value(), "hello");
  EXPECT_EQ(t->WriteFile("/d/new", "x").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(t->Mkdir("/d/sub").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(t->Unlink("/d/f").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(t->Rename("/d/f", "/d/g").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(t->Chmod("/d/f", 0777).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(t->Symlink("/d/f", "/d/l").code(), StatusCode::kPermissionDenied);
  EXPECT_FALSE(t->Open("/d/f", O_WRONLY).ok());
  EXPECT_FALSE(t->Open("/d/f", O_RDWR | O_TRUNC).ok());
  EXPECT_EQ(admin_->ReadFile("/d/f").value(), "hello");
  // Straight to the OSS: its capability grants reading only.
  const pb::Capability cap = CapOf(key_id_, "/d/f");
  EXPECT_EQ(cap.rights(), net::kCapRead);
  pb::WriteReq w;
  w.set_ost(ObjectRead("/d/f").ost());
  *w.mutable_obj() = ObjectRead("/d/f").obj();
  *w.mutable_cap() = cap;
  std::string data(4096, 'x');
  auto oss = Raw(cluster_->oss_port(0), key_id_);
  Result<net::Reply> wr = oss->Call(net::MsgType::kWrite, w, {net::ConstSpan{data.data(), 4096}});
  EXPECT_EQ(wr.status().code(), StatusCode::kPermissionDenied) << wr.status().ToString();
  EXPECT_EQ(admin_->ReadFile("/d/f").value(), "hello");
}

TEST_F(TenantTest, SubtreeKeyCannotReachOutsideItsSubtree) {
  ASSERT_TRUE(admin_->MkdirAll("/tenant/a", 0777).ok());
  ASSERT_TRUE(admin_->Mkdir("/other", 0777).ok());
  ASSERT_TRUE(admin_->WriteFile("/other/secret", "outside").ok());
  ASSERT_TRUE(admin_->Chmod("/other/secret", 0666).ok());
  ASSERT_TRUE(admin_->WriteFile("/tenant/a/f", "inside").ok());
  pb::ClientKeyRecord r = Rules("sub");
  r.set_root_path("/tenant");
  pb::ClientKeyRecord rec;
  auto t = Tenant(AddKey(r, &rec), 0, 0);
  ASSERT_NE(t, nullptr);
  // The subtree is the tenant's "/".
  EXPECT_EQ(t->ReadFile("/a/f").value(), "inside");
  EXPECT_EQ(t->ReadFile("/tenant/a/f").status().code(), StatusCode::kNotFound);
  // ".." at its root stays at its root.
  // (The client library refuses ".." in paths itself; the MDS is asked through LookupAt and
  // ResolvePath's symlinks below.)
  EXPECT_FALSE(t->ReadFile("/../other/secret").ok());
  EXPECT_FALSE(t->ReadFile("/a/../../other/secret").ok());
  auto mds = Raw(cluster_->mds_port(), rec.key_id());
  for (const char* dir : {"/tenant", "/tenant/a"}) {
    FileStat d = admin_->Stat(dir).value();
    pb::LookupReq l;
    net::ToPb(Fid{d.ino, d.fid_mds, d.fid_ver}, l.mutable_parent());
    l.set_name("..");
    pb::LookupResp lr;
    ASSERT_TRUE(mds->CallMsg(net::MsgType::kLookup, l, &lr).ok()) << dir;
    EXPECT_EQ(lr.attr().fid().seq(), admin_->Stat("/tenant").value().ino) << dir;
  }
  pb::ResolvePathReq rp;
  rp.set_path("/../other/secret");
  pb::ResolvePathResp rpr;
  EXPECT_EQ(mds->CallMsg(net::MsgType::kResolvePath, rp, &rpr).code(), StatusCode::kNotFound);
  // A relative symlink climbing out stops at the subtree's root.
  ASSERT_TRUE(t->Symlink("../../../other/secret", "/a/climb").ok());
  EXPECT_EQ(t->ReadFile("/a/climb").status().code(), StatusCode::kNotFound);
  // An absolute symlink resolves inside the subtree.
  ASSERT_TRUE(t->Symlink("/other/secret", "/a/link").ok());
  EXPECT_EQ(t->ReadFile("/a/link").status().code(), StatusCode::kNotFound);
  // Renames and links stay inside too.
  ASSERT_TRUE(t->Rename("/a/f", "/moved").ok());
  EXPECT_TRUE(admin_->Stat("/tenant/moved").ok());
  EXPECT_EQ(admin_->Stat("/moved").status().code(), StatusCode::kNotFound);
  // FID-named requests for objects outside: refused.
  const FileId secret = IdOf(admin_->Stat("/other/secret").value());
  const FileId other = IdOf(admin_->Stat("/other").value());
  const FileId inside = IdOf(t->Stat("/a").value());
  EXPECT_EQ(t->GetAttrAt(secret).status().code(), StatusCode::kPermissionDenied);
  FileStat attr;
  EXPECT_EQ(t->OpenAt(secret, O_RDONLY, &attr).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(t->LinkAt(secret, inside, "stolen").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(t->ReadDirAt(other, 0, 100, false).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(t->LookupAt(other, "secret").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(t->MkdirAt(other, "x", 0777).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(t->RenameAt(inside, "link", other, "x", 0).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(t->GetXattrAt(secret, "user.x").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(admin_->ReadFile("/other/secret").value(), "outside");
}

TEST_F(TenantTest, OssRefusesObjectRequestsWithoutAValidCapability) {
  ASSERT_TRUE(admin_->WriteFile("/mine", std::string(4096, 'm')).ok());
  ASSERT_TRUE(admin_->WriteFile("/theirs", std::string(4096, 't')).ok());
  ASSERT_TRUE(admin_->Chmod("/mine", 0644).ok());
  ASSERT_TRUE(admin_->Chmod("/theirs", 0600).ok());
  pb::ClientKeyRecord rec;
  pb::ClientKeyRecord r = Rules("raw");
  r.set_squash_root(true);
  AddKey(r, &rec);
  pb::ClientKeyRecord rec2;
  AddKey(Rules("raw2"), &rec2);
  const uint32_t key = rec.key_id();
  auto oss = Raw(cluster_->oss_port(0), key);
  ASSERT_NE(oss, nullptr);
  auto read = [&](pb::ReadReq req) { return oss->Call(net::MsgType::kRead, req).status(); };

  const pb::Capability mine = CapOf(key, "/mine");
  EXPECT_EQ(mine.rights(), net::kCapRead);
  EXPECT_TRUE(CapOf(key, "/theirs").mac().empty());  // squashed: no right to read it

  pb::ReadReq req = ObjectRead("/theirs");
  EXPECT_EQ(read(req).code(), StatusCode::kPermissionDenied);  // no capability
  *req.mutable_cap() = mine;
  EXPECT_EQ(read(req).code(), StatusCode::kPermissionDenied);  // another file's capability
  pb::Capability forged = mine;
  *forged.mutable_fid() = req.obj().fid();
  *req.mutable_cap() = forged;
  EXPECT_EQ(read(req).code(), StatusCode::kPermissionDenied);  // edited: MAC does not verify

  pb::ReadReq own = ObjectRead("/mine");
  *own.mutable_cap() = mine;
  EXPECT_TRUE(read(own).ok());  // the control: its own capability works
  pb::Capability expired = mine;
  expired.set_expires_ms(net::WallClockMs() - 1);
  net::SignCapability(net::DeriveCapabilityKey(cluster_->admin_secret()), &expired);
  *own.mutable_cap() = expired;
  EXPECT_EQ(read(own).code(), StatusCode::kPermissionDenied);
  // Another key's capability for the same file.
  *own.mutable_cap() = CapOf(rec2.key_id(), "/mine");
  EXPECT_EQ(read(own).code(), StatusCode::kPermissionDenied);
  pb::ObjStatReq os;
  os.set_ost(own.ost());
  *os.mutable_obj() = own.obj();
  EXPECT_EQ(oss->Call(net::MsgType::kObjStat, os).status().code(), StatusCode::kPermissionDenied);
  pb::PunchReq p;
  p.set_ost(own.ost());
  *p.mutable_obj() = own.obj();
  *p.mutable_cap() = mine;  // read-only capability
  EXPECT_EQ(oss->Call(net::MsgType::kPunch, p).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(admin_->ReadFile("/mine").value(), std::string(4096, 'm'));
  // A client key may not pose as an OSS or an admin.
  net::ChannelOptions co;
  co.key_id = key;
  co.secret = net::DeriveClientKey(cluster_->admin_secret(), key);
  co.role = net::Role::kAdmin;
  EXPECT_EQ(net::RpcChannel::Connect(&loop_, HostPort{"127.0.0.1", cluster_->mds_port()}, co)
                .status()
                .code(),
            StatusCode::kPermissionDenied);
}

TEST_F(TenantTest, SharedMemoryReadsNeedTheSameCapability) {
  ASSERT_TRUE(admin_->WriteFile("/theirs", std::string(4096, 't')).ok());
  ASSERT_TRUE(admin_->Chmod("/theirs", 0600).ok());
  pb::ClientKeyRecord rec;
  pb::ClientKeyRecord r = Rules("shm");
  r.set_squash_root(true);
  AddKey(r, &rec);
  auto region = net::ShmRegion::Create(1 << 20);
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  auto reg = net::RegisterShm(fmt::format("127.0.0.1:{}", cluster_->oss_port(0)), **region);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  pb::ReadReq req = ObjectRead("/theirs");
  req.set_shm_token((*reg)->token());
  req.set_shm_offset(0);
  auto oss = Raw(cluster_->oss_port(0), rec.key_id());
  EXPECT_EQ(oss->Call(net::MsgType::kRead, req).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ((*region)->data()[0], 0);  // nothing was placed
  // The admin key (the trusted path) still reads through the same region.
  auto admin_oss = Raw(cluster_->oss_port(0), 1);
  ASSERT_TRUE(admin_oss->Call(net::MsgType::kRead, req).ok());
  EXPECT_EQ((*region)->data()[0], 't');
}

TEST_F(TenantTest, RevokedKeyIsRefusedOnTheMdsAndOss) {
  ASSERT_TRUE(admin_->WriteFile("/f", std::string(4096, 'f')).ok());
  ASSERT_TRUE(admin_->Chmod("/f", 0644).ok());
  pb::ClientKeyRecord rec;
  const std::string file = AddKey(Rules("gone"), &rec);
  auto t = Tenant(file, 1000, 1000);
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->ReadFile("/f").ok());
  const pb::Capability cap = CapOf(rec.key_id(), "/f");
  auto oss = Raw(cluster_->oss_port(0), rec.key_id());
  ASSERT_TRUE(cluster_->RevokeClientKey("gone").ok());
  // The MDS: at once, for the connection already open and for new ones.
  EXPECT_EQ(t->Stat("/f").status().code(), StatusCode::kPermissionDenied);
  ClientOptions o;
  o.cluster_file = file;
  EXPECT_EQ(cluster_->NewClient(o).status().code(), StatusCode::kPermissionDenied);
  // The OSS: within a heartbeat, its connections close and its capabilities stop working.
  pb::ReadReq req = ObjectRead("/f");
  *req.mutable_cap() = cap;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  Status st;
  do {
    st = oss->Call(net::MsgType::kRead, req).status();
    if (st.ok())
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (st.ok() && std::chrono::steady_clock::now() < deadline);
  EXPECT_FALSE(st.ok());
  net::ChannelOptions co;
  co.key_id = rec.key_id();
  co.secret = net::DeriveClientKey(cluster_->admin_secret(), rec.key_id());
  EXPECT_EQ(net::RpcChannel::Connect(&loop_, HostPort{"127.0.0.1", cluster_->oss_port(0)}, co)
                .status()
                .code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(cluster_->RevokeClientKey("gone").code(), StatusCode::kNotFound);
}

TEST(TenantCapTest, ClientRefreshesAnExpiredCapability) {
  MiniClusterOptions o;
  o.num_oss = 1;
  o.mds_in_memory = true;
  o.cap_ttl_ms = 300;
  auto cluster = MiniCluster::Start(o).value();
  auto admin = cluster->NewClient().value();
  ASSERT_TRUE(admin->Mkdir("/pub", 0777).ok());
  pb::ClientKeyRecord r = Rules("short");
  auto f = cluster->AddClientKey(r);
  ASSERT_TRUE(f.ok());
  ClientOptions co;
  co.cluster_file = *f;
  co.uid = 1000;
  co.gid = 1000;
  auto t = cluster->NewClient(co).value();
  ASSERT_TRUE(t->WriteFile("/pub/x", std::string(10000, 'x')).ok());
  FileStat st = t->Stat("/pub/x").value();
  FileLayout layout = t->GetLayoutAt(IdOf(st)).value();
  auto file = t->Open("/pub/x", O_RDWR).value();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // past the capability's life
  std::string buf(10000, '\0');
  auto n = file->Pread(buf.data(), buf.size(), 0);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(buf, std::string(10000, 'x'));
  ASSERT_TRUE(file->Pwrite("yy", 2, 0).ok());
  ASSERT_TRUE(file->Fsync().ok());
  ASSERT_TRUE(file->Close().ok());
  // A layout resolved earlier (the loader's path) works too, after expiry.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto resolved = t->OpenResolved(IdOf(st), layout, st.size, "/pub/x").value();
  n = resolved->Pread(buf.data(), buf.size(), 0);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(buf.substr(0, 3), "yyx");
}

}  // namespace
}  // namespace ciuic::testing
