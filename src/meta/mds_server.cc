#include "meta/mds_server.h"

#include <exception>

#include <fmt/format.h>

#include "common/config.h"
#include "common/logging.h"
#include "meta/mem_kv_store.h"
#include "meta/meta_service.h"
#include "meta/rocks_kv_store.h"
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

// A read: parse, run on this network thread, answer.
template <typename Req, typename Resp>
net::Handler ReadHandler(MetaService* m, Result<Resp> (MetaService::*fn)(const Req&)) {
  return [m, fn](net::ServerCall call) {
    Req req;
    Status st = call.ParseBody(&req);
    if (!st.ok()) {
      call.ReplyError(st);
      return;
    }
    Result<Resp> r;
    try {
      r = (m->*fn)(req);
    } catch (const std::exception& e) {
      r = Status::Internal(fmt::format("mds: {}", e.what()));
    }
    Answer(call, r);
  };
}

// A mutation: parse, queue to the writer thread, answer from there.
template <typename Req, typename Resp>
net::Handler WriteHandler(MetaService* m, void (MetaService::*fn)(Req, Done<Resp>)) {
  return [m, fn](net::ServerCall call) {
    Req req;
    Status st = call.ParseBody(&req);
    if (!st.ok()) {
      call.ReplyError(st);
      return;
    }
    // ServerCall is move-only and std::function copyable: share it.
    auto shared = std::make_shared<net::ServerCall>(std::move(call));
    (m->*fn)(std::move(req), [shared](Result<Resp> r) { Answer(*shared, r); });
  };
}

}  // namespace

MdsServer::MdsServer(Options options) : options_(std::move(options)) {}

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
  mo.lease_ms = options_.lease_ms;
  mo.heartbeat_ms = options_.heartbeat_ms;
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
  rpc_ = std::make_unique<net::RpcServer>(so);
  RegisterHandlers();
  Status st = rpc_->Start();
  if (!st.ok()) {
    rpc_.reset();
    meta_->Stop();
    meta_.reset();
    return st.WithContext(fmt::format("cannot listen on {}:{}", options_.host, options_.port));
  }
  started_ = true;
  LOG_INFO("mds: serving on {}:{} ({})", options_.host, rpc_->port(),
           options_.in_memory ? "in memory" : options_.data_dir);
  return Status::OK();
}

uint16_t MdsServer::port() const {
  return rpc_ ? rpc_->port() : 0;
}

void MdsServer::Stop() {
  std::lock_guard lock(mu_);
  // Network first (no new requests), then the writer drains what is queued (its replies go
  // nowhere), then the store closes.
  if (rpc_)
    rpc_->Stop();
  if (meta_)
    meta_->Stop();
  meta_.reset();
  rpc_.reset();
  started_ = false;
}

void MdsServer::RegisterHandlers() {
  MetaService* m = meta_.get();
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
  // OST map.
  s.Register(MsgType::kRegisterOss, WriteHandler(m, &M::RegisterOssAsync), kOss);
  s.Register(MsgType::kHeartbeat, WriteHandler(m, &M::HeartbeatAsync), kOss);
  s.Register(MsgType::kGetOstMap, ReadHandler(m, &M::GetOstMap));
}

}  // namespace ciuic::meta
