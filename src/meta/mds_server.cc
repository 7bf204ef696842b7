#include "meta/mds_server.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <exception>
#include <thread>

#include <fmt/format.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "common/config.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "meta/mem_kv_store.h"
#include "meta/meta_service.h"
#include "meta/perm.h"
#include "meta/rocks_kv_store.h"
#include "net/capability.h"
#include "net/frame.h"
#include "net/http_server.h"
#include "net/msg_types.h"
#include "net/rpc.h"

namespace ciuic::meta {
namespace {

using net::MsgType;
using net::Role;

const std::vector<Role> kClients = {Role::kClient, Role::kAdmin};
const std::vector<Role> kOss = {Role::kOss};

template <typename Resp>
void Answer(net::ServerCall& call, Result<Resp>& r) {
  if (r.ok()) {
    call.Reply(*r);
  } else {
    call.ReplyError(r.status());
  }
}

// Identity rules of a connection's key (ARCHITECTURE Decision 13).
std::shared_ptr<const pb::ClientKeyRecord> kAdminRules;  // null: the admin key

}  // namespace

struct Tenancy {
  MetaService* m = nullptr;
  uint32_t admin_key_id = 1;
  std::string cap_key;
  uint32_t cap_ttl_ms = 600000;

  // Rewrites the request's ReqCtx for the call's key and refuses what the key may not do.
  // Sets *rules to the key's rules (null for the admin key).
  Status Bind(const net::ServerCall& call,
              google::protobuf::Message* req,
              std::shared_ptr<const pb::ClientKeyRecord>* rules) const;
  // Attaches a capability to the layout in `resp` (client keys only).
  void AttachCap(const pb::ReqCtx& ctx,
                 const google::protobuf::Message& req,
                 google::protobuf::Message* resp) const;
};

namespace {

pb::ReqCtx* MutableCtx(google::protobuf::Message* m) {
  const auto* f = m->GetDescriptor()->FindFieldByName("ctx");
  if (f == nullptr || f->message_type() != pb::ReqCtx::descriptor())
    return nullptr;
  return static_cast<pb::ReqCtx*>(m->GetReflection()->MutableMessage(m, f));
}

uint32_t MapUid(const pb::ClientKeyRecord& r, uint32_t uid) {
  for (const auto& e : r.uid_map()) {
    if (e.from() == uid)
      return e.to();
  }
  return r.map_others() ? r.others_uid() : uid;
}

bool WantsWrite(uint32_t flags) {
  return (flags & O_ACCMODE) != O_RDONLY || (flags & (O_TRUNC | O_CREAT)) != 0;
}

// Whether a read-only key may send this request.
bool AllowedReadOnly(MsgType type, const google::protobuf::Message& req) {
  switch (type) {
    case MsgType::kOpenSession:
    case MsgType::kRenewSession:
    case MsgType::kCloseSession:
    case MsgType::kLookup:
    case MsgType::kGetAttr:
    case MsgType::kReadlink:
    case MsgType::kReadDir:
    case MsgType::kStatfs:
    case MsgType::kGetXattr:
    case MsgType::kListXattr:
    case MsgType::kClose:
    case MsgType::kLock:
    case MsgType::kGetOstMap:
    case MsgType::kHsmState:
      return true;
    // Reading a released file restores it: a read-only key may, and only that.
    case MsgType::kHsmBegin:
      return static_cast<const pb::HsmBeginReq&>(req).op() == 3;
    case MsgType::kHsmEnd:
      return static_cast<const pb::HsmEndReq&>(req).op() == 3;
    case MsgType::kOpen:
      return !WantsWrite(static_cast<const pb::OpenReq&>(req).flags());
    case MsgType::kResolvePath: {
      const auto& r = static_cast<const pb::ResolvePathReq&>(req);
      return !r.open() || !WantsWrite(r.open_flags());
    }
    default:
      return false;
  }
}

// A read: parse, run on this network thread, answer.
template <typename Req, typename Resp>
net::Handler ReadHandler(const Tenancy* tn, Result<Resp> (MetaService::*fn)(const Req&)) {
  return [tn, fn](net::ServerCall call) {
    MetaService* m = tn->m;
    Req req;
    Status st = call.ParseBody(&req);
    std::shared_ptr<const pb::ClientKeyRecord> rules;
    if (st.ok())
      st = tn->Bind(call, &req, &rules);
    if (st.ok() && rules != nullptr)
      st = m->CheckReach(req);
    if (!st.ok()) {
      call.ReplyError(st);
      return;
    }
    Result<Resp> r;
    try {
      r = (m->*fn)(req);
      if (r.ok() && rules != nullptr) {
        if constexpr (requires { req.ctx(); })
          tn->AttachCap(req.ctx(), req, &*r);
      }
    } catch (const std::exception& e) {
      r = Status::Internal(fmt::format("mds: {}", e.what()));
    }
    Answer(call, r);
  };
}

// A mutation: parse, queue to the writer thread, answer from there.
template <typename Req, typename Resp>
net::Handler WriteHandler(const Tenancy* tn, void (MetaService::*fn)(Req, Done<Resp>)) {
  return [tn, fn](net::ServerCall call) {
    MetaService* m = tn->m;
    Req req;
    Status st = call.ParseBody(&req);
    std::shared_ptr<const pb::ClientKeyRecord> rules;
    if (st.ok())
      st = tn->Bind(call, &req, &rules);
    if (!st.ok()) {
      call.ReplyError(st);
      return;
    }
    // ServerCall is move-only and std::function copyable: share it.
    auto shared = std::make_shared<net::ServerCall>(std::move(call));
    if (rules == nullptr) {
      (m->*fn)(std::move(req), [shared](Result<Resp> r) { Answer(*shared, r); });
      return;
    }
    auto kept = std::make_shared<Req>(req);
    (m->*fn)(std::move(req), [tn, shared, kept](Result<Resp> r) {
      (void)tn;  // used only for requests with a ctx (clang warns the capture is unused)
      if (r.ok()) {
        if constexpr (requires { kept->ctx(); })
          tn->AttachCap(kept->ctx(), *kept, &*r);
      }
      Answer(*shared, r);
    });
  };
}

}  // namespace

MdsServer::MdsServer(Options options)
    : options_(std::move(options)), metrics_(std::make_unique<metrics::Registry>()) {
  RegisterMetrics();
}

MdsServer::~MdsServer() {
  Stop();
}

Status MdsServer::Start() {
  std::lock_guard lock(mu_);
  if (started_ || meta_ != nullptr)
    return Status::InvalidArgument("MdsServer already started");
  std::unique_ptr<KvStore> kv;
  if (options_.in_memory) {
    kv = std::make_unique<MemKvStore>();
  } else {
    if (options_.data_dir.empty())
      return Status::InvalidArgument("no data directory given");
    RocksKvStore::Options ro;
    ro.path = options_.data_dir;
    ro.env = options_.env;
    CIUIC_ASSIGN_OR_RETURN(kv, RocksKvStore::Open(ro));
  }
  MetaOptions mo;
  mo.cluster_uuid = options_.cluster_uuid;
  mo.admin_secret = options_.secret;
  mo.lease_ms = options_.lease_ms;
  mo.heartbeat_ms = options_.heartbeat_ms;
  mo.default_replicas = options_.default_replicas;
  mo.max_sessions_per_key = options_.max_sessions_per_key;
  mo.max_opens_per_session = options_.max_opens_per_session;
  mo.max_locks_per_file = options_.max_locks_per_file;
  mo.max_locks_per_session = options_.max_locks_per_session;
  mo.session_end_batch = options_.session_end_batch;
  mo.heat_half_life_ms = options_.heat_half_life_ms;
  mo.durability_epoch =
      options_.durability_epoch != 0 ? options_.durability_epoch : MachineDurabilityEpoch();
  CIUIC_ASSIGN_OR_RETURN(meta_, MetaService::Open(std::move(kv), mo));

  net::RpcServer::Options so;
  so.host = options_.host;
  so.port = options_.port;
  so.secret = options_.secret;
  so.key_id = options_.key_id;
  so.cluster_uuid = options_.cluster_uuid;
  so.name = "mds";
  tenancy_ = std::make_unique<Tenancy>();
  tenancy_->m = meta_.get();
  tenancy_->admin_key_id = options_.key_id;
  tenancy_->cap_key = net::DeriveCapabilityKey(options_.secret);
  tenancy_->cap_ttl_ms = options_.cap_ttl_ms;
  so.key_lookup = [m = meta_.get(), admin = options_.key_id, secret = options_.secret](
                      uint32_t key_id, Role role) -> Result<std::string> {
    if (key_id == admin)
      return secret;
    auto rules = m->FindClientKey(key_id);
    if (rules == nullptr)
      return Status::PermissionDenied(fmt::format("unknown key id {}", key_id));
    if (rules->revoked())
      return Status::PermissionDenied(fmt::format("client key {} was revoked", key_id));
    if (role != Role::kClient)
      return Status::PermissionDenied(
          fmt::format("client key {} may only act as a client", key_id));
    return net::DeriveClientKey(secret, key_id);
  };
  so.metrics = metrics_.get();
  rpc_ = std::make_unique<net::RpcServer>(so);
  RegisterHandlers();
  Status st = rpc_->Start();
  if (!st.ok()) {
    rpc_.reset();
    meta_->Stop();
    meta_.reset();
    return st.WithContext(fmt::format("cannot listen on {}:{}", options_.host, options_.port));
  }
  {
    std::lock_guard stats_lock(stats_mu_);
    stats_meta_ = meta_.get();
  }
  if (options_.metrics_port >= 0) {
    http_ = std::make_unique<net::HttpServer>(
        net::HttpServer::Options{.host = options_.host,
                                 .port = static_cast<uint16_t>(options_.metrics_port),
                                 .name = "mds-metrics"});
    http_->Handle("/metrics", net::kPrometheusContentType,
                  [r = metrics_.get()] { return r->Render(); });
    if (Status hs = http_->Start(); !hs.ok()) {
      http_.reset();
      rpc_->Stop();
      rpc_.reset();
      meta_->Stop();
      meta_.reset();
      return hs.WithContext("cannot serve metrics");
    }
  }
  started_ = true;
  LOG_INFO("mds: serving on {}:{} ({})", options_.host, rpc_->port(),
           options_.in_memory ? "in memory" : options_.data_dir);
  return Status::OK();
}

uint16_t MdsServer::port() const {
  return rpc_ ? rpc_->port() : 0;
}

uint16_t MdsServer::metrics_port() const {
  return http_ ? http_->port() : 0;
}

void MdsServer::RegisterMetrics() {
  // Read at scrape time from the MetaService (a few mutex-guarded sizes and RocksDB's
  // in-memory properties), so the request path pays nothing for them.
  auto stat = [this](auto field) {
    return [this, field](metrics::Emitter& e) {
      std::lock_guard lock(stats_mu_);
      if (stats_meta_ != nullptr)
        e.Add({}, static_cast<double>(field(stats_meta_->GetStats())));
    };
  };
  using Stats = MetaService::Stats;
  metrics_->AddCallback("ciuic_mds_sessions", "Client sessions open.", metrics::Type::kGauge, {},
                        stat([](const Stats& s) { return s.sessions; }));
  metrics_->AddCallback("ciuic_mds_open_files", "Files open by live sessions (tracked opens).",
                        metrics::Type::kGauge, {},
                        stat([](const Stats& s) { return s.open_files; }));
  metrics_->AddCallback("ciuic_mds_locks", "Advisory locks held.", metrics::Type::kGauge, {},
                        stat([](const Stats& s) { return s.locks; }));
  metrics_->AddCallback("ciuic_mds_writer_queue_depth",
                        "Mutations queued for the MDS writer thread.", metrics::Type::kGauge, {},
                        stat([](const Stats& s) { return s.queued_mutations; }));
  metrics_->AddCallback("ciuic_mds_store", "Figures of the metadata store (RocksDB properties).",
                        metrics::Type::kGauge, {"property"}, [this](metrics::Emitter& e) {
                          std::lock_guard lock(stats_mu_);
                          if (stats_meta_ == nullptr)
                            return;
                          for (const auto& [name, v] : stats_meta_->GetStats().store)
                            e.Add({name}, static_cast<double>(v));
                        });
}

void MdsServer::Stop() {
  std::lock_guard lock(mu_);
  // Network first (no new requests), then the writer drains what is queued (its replies go
  // nowhere), then the store closes.
  if (http_)
    http_->Stop();
  {
    std::lock_guard stats_lock(stats_mu_);
    stats_meta_ = nullptr;
  }
  if (rpc_)
    rpc_->Stop();
  if (meta_)
    meta_->Stop();
  meta_.reset();
  rpc_.reset();
  started_ = false;
}

void MdsServer::RegisterHandlers() {
  const Tenancy* m = tenancy_.get();
  net::RpcServer& s = *rpc_;
  using M = MetaService;
  // Sessions.
  s.Register(MsgType::kOpenSession, WriteHandler(m, &M::OpenSessionAsync), kClients);
  s.Register(MsgType::kRenewSession, ReadHandler(m, &M::RenewSession), kClients);
  s.Register(MsgType::kCloseSession, WriteHandler(m, &M::CloseSessionAsync), kClients);
  // Namespace reads.
  s.Register(MsgType::kLookup, ReadHandler(m, &M::Lookup), kClients);
  s.Register(MsgType::kResolvePath, WriteHandler(m, &M::ResolvePathAsync), kClients);
  s.Register(MsgType::kGetAttr, ReadHandler(m, &M::GetAttr), kClients);
  s.Register(MsgType::kReadlink, ReadHandler(m, &M::Readlink), kClients);
  s.Register(MsgType::kReadDir, ReadHandler(m, &M::ReadDir), kClients);
  s.Register(MsgType::kStatfs, ReadHandler(m, &M::Statfs), kClients);
  s.Register(MsgType::kGetXattr, ReadHandler(m, &M::GetXattr), kClients);
  s.Register(MsgType::kListXattr, ReadHandler(m, &M::ListXattr), kClients);
  // Namespace mutations.
  s.Register(MsgType::kSetAttr, WriteHandler(m, &M::SetAttrAsync), kClients);
  s.Register(MsgType::kCreate, WriteHandler(m, &M::CreateAsync), kClients);
  s.Register(MsgType::kMkdir, WriteHandler(m, &M::MkdirAsync), kClients);
  s.Register(MsgType::kUnlink, WriteHandler(m, &M::UnlinkAsync), kClients);
  s.Register(MsgType::kRename, WriteHandler(m, &M::RenameAsync), kClients);
  s.Register(MsgType::kSymlink, WriteHandler(m, &M::SymlinkAsync), kClients);
  s.Register(MsgType::kLink, WriteHandler(m, &M::LinkAsync), kClients);
  s.Register(MsgType::kOpen, WriteHandler(m, &M::OpenAsync), kClients);
  s.Register(MsgType::kClose, WriteHandler(m, &M::CloseAsync), kClients);
  s.Register(MsgType::kUpdateSize, WriteHandler(m, &M::UpdateSizeAsync), kClients);
  s.Register(MsgType::kInstantiate, WriteHandler(m, &M::InstantiateAsync), kClients);
  s.Register(MsgType::kSetLayout, WriteHandler(m, &M::SetLayoutAsync), kClients);
  s.Register(MsgType::kFallocate, WriteHandler(m, &M::FallocateAsync), kClients);
  s.Register(MsgType::kFsyncDir, WriteHandler(m, &M::FsyncDirAsync), kClients);
  s.Register(MsgType::kSetXattr, WriteHandler(m, &M::SetXattrAsync), kClients);
  s.Register(MsgType::kRemoveXattr, WriteHandler(m, &M::RemoveXattrAsync), kClients);
  s.Register(MsgType::kTruncateDone, WriteHandler(m, &M::TruncateDoneAsync), kClients);
  // Advisory locks (in memory, answered inline).
  s.Register(MsgType::kLock, ReadHandler(m, &M::Lock), kClients);
  s.Register(MsgType::kHsmState, ReadHandler(m, &M::HsmState), kClients);
  s.Register(MsgType::kHsmBegin, WriteHandler(m, &M::HsmBeginAsync), kClients);
  s.Register(MsgType::kHsmEnd, WriteHandler(m, &M::HsmEndAsync), kClients);
  s.Register(MsgType::kHsmImport, WriteHandler(m, &M::HsmImportAsync), kClients);
  s.Register(MsgType::kRepoQueue, WriteHandler(m, &M::RepoQueueAsync), kClients);
  // OST map.
  s.Register(MsgType::kRegisterOss, WriteHandler(m, &M::RegisterOssAsync), kOss);
  s.Register(MsgType::kHeartbeat, WriteHandler(m, &M::HeartbeatAsync), kOss);
  s.Register(MsgType::kGetOstMap, ReadHandler(m, &M::GetOstMap));
  // Client keys: the admin key only (Tenancy::Bind refuses other keys).
  const std::vector<Role> admin = {Role::kAdmin};
  s.Register(MsgType::kAddClient, WriteHandler(m, &M::AddClientAsync), admin);
  s.Register(MsgType::kListClients, ReadHandler(m, &M::ListClients), admin);
  s.Register(
      MsgType::kRevokeClient,
      [tn = m, rpc = rpc_.get()](net::ServerCall call) {
        pb::RevokeClientReq req;
        std::shared_ptr<const pb::ClientKeyRecord> rules;
        Status st = call.ParseBody(&req);
        if (st.ok())
          st = tn->Bind(call, &req, &rules);
        if (!st.ok())
          return call.ReplyError(st);
        auto shared = std::make_shared<net::ServerCall>(std::move(call));
        // Requests of a revoked key are refused from the commit on (Bind looks the key up each
        // time); its open connections are closed too, so it must handshake again, and fails.
        tn->m->RevokeClientAsync(std::move(req), [shared, rpc](Result<pb::RevokeClientResp> r) {
          if (r.ok())
            rpc->CloseConnectionsOfKey(r->record().key_id());
          Answer(*shared, r);
        });
      },
      admin);
}

Status Tenancy::Bind(const net::ServerCall& call,
                     google::protobuf::Message* req,
                     std::shared_ptr<const pb::ClientKeyRecord>* rules) const {
  pb::ReqCtx* ctx = MutableCtx(req);
  if (ctx != nullptr) {
    // Server-only fields are never taken from the wire.
    ctx->clear_root();
    ctx->clear_read_only();
    ctx->set_key_id(call.key_id());
  }
  const MsgType type = call.type();
  if (call.key_id() == admin_key_id) {
    *rules = kAdminRules;
    return Status::OK();
  }
  if (type == MsgType::kAddClient || type == MsgType::kRevokeClient ||
      type == MsgType::kListClients) {
    return Status::PermissionDenied("client keys are managed with the admin key only");
  }
  if (type == MsgType::kHsmImport || type == MsgType::kRepoQueue) {
    // The OSSes fetch whatever URL an import names, with their own credentials.
    return Status::PermissionDenied("data repositories are linked with the admin key only");
  }
  auto r = m->FindClientKey(call.key_id());
  if (r == nullptr || r->revoked())
    return Status::PermissionDenied(fmt::format("client key {} was revoked", call.key_id()));
  *rules = r;
  if (r->read_only() && !AllowedReadOnly(type, *req)) {
    return Status::PermissionDenied(fmt::format("client '{}' has a read-only key: {} refused",
                                                r->name(),
                                                net::MsgTypeName(static_cast<uint16_t>(type))));
  }
  if (ctx == nullptr)
    return Status::OK();
  uint32_t uid = MapUid(*r, ctx->uid());
  uint32_t gid = ctx->gid();
  if (r->squash_root()) {
    if (uid == 0)
      uid = r->squash_uid();
    if (gid == 0)
      gid = r->squash_gid();
    for (int i = 0; i < ctx->groups_size(); ++i) {
      if (ctx->groups(i) == 0)
        ctx->set_groups(i, r->squash_gid());
    }
  }
  ctx->set_uid(uid);
  ctx->set_gid(gid);
  if (r->has_root())
    *ctx->mutable_root() = r->root();
  ctx->set_read_only(r->read_only());
  if (ctx->session_id() != 0) {
    // Sessions belong to the key that opened them: no closing or renewing someone else's.
    Result<uint32_t> owner = m->SessionKeyId(ctx->session_id());
    if (owner.ok() && *owner != call.key_id()) {
      return Status::PermissionDenied(
          fmt::format("session {} belongs to another key", ctx->session_id()));
    }
  }
  return Status::OK();
}

void Tenancy::AttachCap(const pb::ReqCtx& ctx,
                        const google::protobuf::Message& req,
                        google::protobuf::Message* resp) const {
  const auto* d = resp->GetDescriptor();
  const auto* refl = resp->GetReflection();
  const auto* lf = d->FindFieldByName("layout");
  if (lf == nullptr || lf->message_type() != pb::Layout::descriptor())
    return;
  pb::Attr attr;
  const auto* af = d->FindFieldByName("attr");
  if (af != nullptr && af->message_type() == pb::Attr::descriptor() && refl->HasField(*resp, af)) {
    attr = static_cast<const pb::Attr&>(refl->GetMessage(*resp, af));
  } else {
    const auto* ff = req.GetDescriptor()->FindFieldByName("fid");
    if (ff == nullptr || ff->message_type() != pb::Fid::descriptor())
      return;
    pb::GetAttrReq g;
    *g.mutable_fid() = static_cast<const pb::Fid&>(req.GetReflection()->GetMessage(req, ff));
    auto a = m->GetAttr(g);
    if (!a.ok())
      return;
    attr = a->attr();
  }
  if (!S_ISREG(attr.mode()))
    return;
  uint32_t rights = 0;
  if (CheckAccess(attr, ctx, kMayRead, "file").ok())
    rights |= net::kCapRead;
  if (CheckAccess(attr, ctx, kMayWrite, "file").ok())
    rights |= net::kCapWrite;
  const auto* cf = d->FindFieldByName("created");
  if (cf != nullptr && refl->GetBool(*resp, cf))
    rights |= net::kCapRead | net::kCapWrite;  // the creator may write what it made (open(2))
  if (ctx.read_only())
    rights &= ~net::kCapWrite;
  if (rights == 0)
    return;
  auto* layout = static_cast<pb::Layout*>(refl->MutableMessage(resp, lf));
  pb::Capability* cap = layout->mutable_cap();
  *cap->mutable_fid() = attr.fid();
  cap->set_rights(rights);
  cap->set_expires_ms(net::WallClockMs() + cap_ttl_ms);
  cap->set_key_id(ctx.key_id());
  // HsmBegin of a file from a data repository: the OSSes fetch the source the record names,
  // and for a client key only that one.
  const auto* rf = d->FindFieldByName("record");
  if (rf != nullptr && rf->message_type() == pb::HsmRecord::descriptor() &&
      refl->HasField(*resp, rf)) {
    const auto& rec = static_cast<const pb::HsmRecord&>(refl->GetMessage(*resp, rf));
    if (!rec.source_key().empty()) {
      cap->set_source(net::RepoSourceDigest(rec.source_url(), rec.source_key(), rec.source_etag()));
    }
  }
  net::SignCapability(cap_key, cap);
}

}  // namespace ciuic::meta
