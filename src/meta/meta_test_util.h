// Test fixture for MetaService: the same tests run over MemKvStore and RocksKvStore
// (TYPED_TEST), with helpers that build requests. Tests only.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/fid.h"
#include "meta/mem_kv_store.h"
#include "meta/meta_service.h"
#include "meta/rocks_kv_store.h"
#include "net/pb_convert.h"

namespace ciuic::meta::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ciuic-meta-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Backends: Make() returns a store holding the data of every earlier Make() (a reopen).
struct MemBackend {
  std::shared_ptr<MemKvStore::State> state = std::make_shared<MemKvStore::State>();
  std::unique_ptr<KvStore> Make() { return std::make_unique<MemKvStore>(state); }
  static constexpr bool kDurable = false;
};

struct RocksBackend {
  TempDir dir;
  std::unique_ptr<KvStore> Make() {
    RocksKvStore::Options o;
    o.path = dir.path() + "/db";
    auto r = RocksKvStore::Open(o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::unique_ptr<KvStore>(std::move(r).value()) : nullptr;
  }
  static constexpr bool kDurable = true;
};

inline pb::ReqCtx Ctx(uint32_t uid = 0, uint32_t gid = 0, std::vector<uint32_t> groups = {}) {
  pb::ReqCtx c;
  c.set_uid(uid);
  c.set_gid(gid);
  for (auto g : groups)
    c.add_groups(g);
  return c;
}

inline pb::Fid PbFid(const Fid& f) {
  pb::Fid o;
  net::ToPb(f, &o);
  return o;
}

inline Fid F(const pb::Fid& f) {
  return net::FromPb(f);
}

#define ASSERT_OK(expr)                                      \
  do {                                                       \
    auto&& _s = (expr);                                      \
    ASSERT_TRUE(_s.ok()) << ::ciuic::meta::testing::Str(_s); \
  } while (0)
#define EXPECT_CODE(expr, code_)                                            \
  do {                                                                      \
    auto&& _s = (expr);                                                     \
    EXPECT_EQ(::ciuic::meta::testing::Code(_s), ::ciuic::StatusCode::code_) \
        << ::ciuic::meta::testing::Str(_s);                                 \
  } while (0)

inline std::string Str(const Status& s) {
  return s.ToString();
}
template <typename T>
std::string Str(const Result<T>& r) {
  return r.status().ToString();
}
inline StatusCode Code(const Status& s) {
  return s.code();
}
template <typename T>
StatusCode Code(const Result<T>& r) {
  return r.status().code();
}

template <typename B>
class MetaTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }
  void TearDown() override { svc_.reset(); }

  void Open() {
    auto kv = backend_.Make();
    ASSERT_NE(kv, nullptr);
    MetaOptions o = options_;
    if (o.cluster_uuid.empty())
      o.cluster_uuid = "test-cluster";
    auto r = MetaService::Open(std::move(kv), o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    svc_ = std::move(r).value();
  }
  void Reopen() {
    svc_.reset();
    Open();
  }
  MetaService& svc() { return *svc_; }

  // --- request helpers ---
  Result<pb::MkdirResp> Mkdir(const pb::Fid& parent,
                              const std::string& name,
                              uint32_t mode = 0755,
                              pb::ReqCtx ctx = Ctx()) {
    pb::MkdirReq q;
    *q.mutable_ctx() = ctx;
    *q.mutable_parent() = parent;
    q.set_name(name);
    q.set_mode(mode);
    return svc_->Mkdir(q);
  }
  Result<pb::CreateResp> Create(const pb::Fid& parent,
                                const std::string& name,
                                uint32_t mode = 0644,
                                pb::ReqCtx ctx = Ctx(),
                                bool exclusive = true) {
    pb::CreateReq q;
    *q.mutable_ctx() = ctx;
    *q.mutable_parent() = parent;
    q.set_name(name);
    q.set_mode(mode);
    q.set_exclusive(exclusive);
    return svc_->Create(q);
  }
  Result<pb::LookupResp> Lookup(const pb::Fid& parent,
                                const std::string& name,
                                pb::ReqCtx ctx = Ctx()) {
    pb::LookupReq q;
    *q.mutable_ctx() = ctx;
    *q.mutable_parent() = parent;
    q.set_name(name);
    return svc_->Lookup(q);
  }
  Result<pb::GetAttrResp> GetAttr(const pb::Fid& fid) {
    pb::GetAttrReq q;
    *q.mutable_fid() = fid;
    return svc_->GetAttr(q);
  }
  Status Unlink(const pb::Fid& parent,
                const std::string& name,
                bool dir = false,
                pb::ReqCtx ctx = Ctx()) {
    pb::UnlinkReq q;
    *q.mutable_ctx() = ctx;
    *q.mutable_parent() = parent;
    q.set_name(name);
    q.set_dir(dir);
    return svc_->Unlink(q).status();
  }
  Status Rename(const pb::Fid& sp,
                const std::string& sn,
                const pb::Fid& dp,
                const std::string& dn,
                uint32_t flags = 0,
                pb::ReqCtx ctx = Ctx()) {
    pb::RenameReq q;
    *q.mutable_ctx() = ctx;
    *q.mutable_src_parent() = sp;
    q.set_src_name(sn);
    *q.mutable_dst_parent() = dp;
    q.set_dst_name(dn);
    q.set_flags(flags);
    return svc_->Rename(q).status();
  }
  Result<pb::ResolvePathResp> Resolve(const std::string& path,
                                      bool follow_last = true,
                                      pb::ReqCtx ctx = Ctx()) {
    pb::ResolvePathReq q;
    *q.mutable_ctx() = ctx;
    q.set_path(path);
    q.set_follow_last(follow_last);
    return svc_->ResolvePath(q);
  }
  // Registers `n` OSTs (indexes 0..n-1) served by `addr`, each with `free` bytes free.
  void RegisterOsts(int n,
                    const std::string& addr = "oss0:7000",
                    uint64_t free = 100ull << 30,
                    uint64_t device_base = 100) {
    pb::RegisterOssReq q;
    q.set_oss_addr(addr);
    q.set_cluster_uuid("test-cluster");
    for (int i = 0; i < n; ++i) {
      auto* o = q.add_osts();
      o->set_index(static_cast<uint32_t>(i));
      o->set_capacity(1ull << 40);
      o->set_free(free);
      o->set_device_id(device_base + static_cast<uint64_t>(i));
    }
    ASSERT_OK(svc_->RegisterOss(q));
  }
  uint64_t CountCf(Cf cf) {
    auto it = svc_->TEST_kv()->NewIterator(cf, "");
    uint64_t n = 0;
    for (it->Seek(""); it->Valid(); it->Next())
      ++n;
    return n;
  }

  pb::Fid root() { return PbFid(kRootFid); }
  // A world-writable directory "/pub" for tests acting as non-root users.
  pb::Fid Pub() {
    auto l = Lookup(root(), "pub");
    if (l.ok())
      return l->attr().fid();
    auto m = Mkdir(root(), "pub", 0777);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? m->attr().fid() : pb::Fid();
  }

  MetaOptions options_;
  B backend_;
  std::unique_ptr<MetaService> svc_;
};

using Backends = ::testing::Types<MemBackend, RocksBackend>;

}  // namespace ciuic::meta::testing
