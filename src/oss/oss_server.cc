#include "oss/oss_server.h"

#include <algorithm>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "ciuic.pb.h"
#include "common/fault.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/time_util.h"
#include "net/capability.h"
#include "net/http_server.h"
#include "net/pb_convert.h"
#include "net/rpc.h"
#include "objstore/object_store_factory.h"
#include "oss/hsm_mover.h"
#include "oss/ost_format.h"
#include "oss/ost_store.h"
#include "oss/read_buffer_pool.h"
#include "oss/shm_registry.h"

namespace ciuic::oss {
namespace {

// A reply is at most the frame's data limit; reads are capped so their aligned blocks fit.
constexpr uint64_t kMaxReadLength = (uint64_t{64} << 20) - 2 * kBlockSize;
// Entries of one ReadBatch (docs/formats/wire.md "Read batches").
constexpr int kMaxBatchReads = 64;
// Below this much free space an OST reports itself full (state 2).
constexpr uint64_t kFullThreshold = uint64_t{64} << 20;
constexpr uint32_t kTaskDestroy = 1;
constexpr uint32_t kTaskPunch = 2;
constexpr uint32_t kTaskRelease = 3;
constexpr uint32_t kTaskDropCopy = 4;  // HSM: delete the archived copy (version = length)
// HsmObjReq.op
constexpr uint32_t kHsmArchive = 1;
constexpr uint32_t kHsmVerify = 2;
constexpr uint32_t kHsmRestore = 3;
constexpr uint32_t kHsmRemove = 4;
constexpr uint32_t kHsmRepoRestore = 5;
constexpr uint32_t kHsmRepoVerify = 6;
// Restore by extents: 7 and 8 start restore 3 and 5 in the background and answer once readers
// may wait on it; 9 answers when the object's restore ends (its outcome).
constexpr uint32_t kHsmRestoreStart = 7;
constexpr uint32_t kHsmRepoRestoreStart = 8;
constexpr uint32_t kHsmRestoreWait = 9;

// Returns the budget when the last holder (a reply in the network queue) lets go.
struct BudgetHold {
  std::function<void()> release;
  std::shared_ptr<AlignedBuffer> data;
  ~BudgetHold() { release(); }
};

}  // namespace

OssServer::OssServer(Options options)
    : options_(std::move(options)),
      epoch_(options_.durability_epoch != 0 ? options_.durability_epoch : MachineDurabilityEpoch()),
      metrics_(std::make_unique<metrics::Registry>()) {
  RegisterMetrics();
}

OssServer::~OssServer() {
  Stop();
}

Status OssServer::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (started_)
      return Status::InvalidArgument("OssServer already started");
    started_ = true;
  }
  if (options_.osts.empty())
    return Status::InvalidArgument("no OSTs to serve");
  if (options_.cluster_uuid.empty())
    return Status::InvalidArgument("no cluster uuid");
  if (options_.test_engine != nullptr) {
    engine_ = options_.test_engine;
  } else {
    CIUIC_ASSIGN_OR_RETURN(own_engine_, io::NewDiskIoEngine(options_.io_engine));
    engine_ = own_engine_.get();
  }
  pool_ = std::make_unique<ThreadPool>(8, 4096, "oss-blk");  // see the header: opens wait
  resync_pool_ = std::make_unique<ThreadPool>(1, 256, "oss-resync");
  repair_pool_ = std::make_unique<ThreadPool>(1, 256, "oss-repair");
  read_pool_ = std::make_shared<ReadBufferPool>(options_.read_pool_bytes);
  for (const auto& [index, dir] : options_.osts) {
    if (osts_.count(index) != 0) {
      return Status::InvalidArgument(fmt::format("OST {} is listed twice", index));
    }
    OstStore::Options o;
    o.dir = dir;
    o.index = index;
    o.cluster_uuid = options_.cluster_uuid;
    o.engine = engine_;
    o.blocking_pool = pool_.get();
    o.max_cached_objects = options_.max_open_objects_per_ost;
    o.read_pool = read_pool_;
    o.tombstone_grace = std::chrono::milliseconds(options_.tombstone_grace_ms);
    const int64_t deadline = MonoMillis() + options_.busy_wait_ms;
    Result<std::unique_ptr<OstStore>> opened = OstStore::Open(o);
    bool said = false;
    while (!opened.ok() && opened.status().code() == StatusCode::kBusy && MonoMillis() < deadline) {
      if (!std::exchange(said, true))
        LOG_WARN("{}; waiting up to {} ms for it to exit", opened.status().message(),
                 options_.busy_wait_ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      opened = OstStore::Open(o);
    }
    if (!opened.ok())
      return opened.status();
    osts_[index] = std::move(*opened);
  }
  LOG_INFO("serving {} OST(s) with the {} IO engine", osts_.size(), engine_->name());
  if (!options_.cold_tier_url.empty()) {
    objstore::ObjectStoreConfig cfg;
    Result<std::unique_ptr<objstore::ObjectStore>> cold =
        objstore::OpenObjectStore(options_.cold_tier_url, cfg);
    if (!cold.ok())
      return cold.status().WithContext("cold tier");
    cold_ = std::move(*cold);
    mover_ = std::make_unique<HsmMover>(
        cold_.get(), options_.cluster_uuid, 8,
        options_.hsm_fill_chunk != 0 ? options_.hsm_fill_chunk : kFillChunk);
    hsm_pool_ = std::make_unique<ThreadPool>(2, 1024, "oss-hsm");
    LOG_INFO("cold tier: {}", cold_->Describe());
  }

  net::RpcServer::Options ro;
  ro.host = options_.host;
  ro.port = options_.port;
  ro.buffer_pool_bytes = options_.write_pool_bytes;
  ro.secret = options_.secret;
  ro.key_id = options_.key_id;
  ro.cluster_uuid = options_.cluster_uuid;
  ro.io_threads = 1;
  ro.name = "oss";
  ro.metrics = metrics_.get();
  // Client keys are derived from the admin key, so any client key the MDS made is checked
  // here without a table; what it may touch is decided by the capabilities it brings.
  cap_key_ = net::DeriveCapabilityKey(options_.secret);
  ro.key_lookup = [this](uint32_t key_id, net::Role role) -> Result<std::string> {
    if (key_id == options_.key_id)
      return options_.secret;
    if (key_id < net::kFirstClientKeyId)
      return Status::PermissionDenied(fmt::format("unknown key id {}", key_id));
    if (IsRevoked(key_id))
      return Status::PermissionDenied(fmt::format("client key {} was revoked", key_id));
    if (role != net::Role::kClient)
      return Status::PermissionDenied(
          fmt::format("client key {} may only act as a client", key_id));
    return net::DeriveClientKey(options_.secret, key_id);
  };
  // The client loop runs the MDS channel and the channels to the other members of chains.
  loop_ = std::make_unique<net::EventLoop>(1);
  net::ChannelOptions peer;
  peer.secret = options_.secret;
  peer.key_id = options_.key_id;
  peer.role = net::Role::kOss;
  peer.connect_timeout_ms = 2000;
  router_ = std::make_unique<ChainRouter>(loop_.get(), pool_.get(), peer);
  hb_interval_ms_ = std::max<uint32_t>(options_.heartbeat_ms, 10);
  rpc_ = std::make_unique<net::RpcServer>(std::move(ro));
  RegisterHandlers();
  CIUIC_RETURN_IF_ERROR(rpc_->Start());
  CIUIC_RETURN_IF_ERROR(StartMetricsHttp());
  if (options_.shm_reads) {
    // Co-located clients read through shared memory; without the endpoint they use TCP.
    shm_ = std::make_unique<ShmRegistry>();
    Status st = shm_->Start(ServedAddr());
    if (!st.ok()) {
      LOG_WARN("oss: no shared-memory reads ({}); co-located clients read over TCP", st.ToString());
      shm_.reset();
    }
  }

  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  writeback_ = std::thread([this] { WritebackLoop(); });  // also collects tombstones
  resync_ = std::thread([this] { ResyncLoop(); });
  if (options_.scrub_bytes_per_s > 0)
    scrub_ = std::thread([this] { ScrubLoop(); });
  return Status::OK();
}

uint64_t OssServer::shm_reads() const {
  return shm_ == nullptr ? 0 : shm_->reads.load(std::memory_order_relaxed);
}

uint64_t OssServer::shm_writes() const {
  return shm_ == nullptr ? 0 : shm_->writes.load(std::memory_order_relaxed);
}

uint16_t OssServer::port() const {
  return rpc_ == nullptr ? 0 : rpc_->port();
}

std::string OssServer::ServedAddr() const {
  return HostPort{options_.host, port()}.ToString();
}

void OssServer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_)
      return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (http_ != nullptr)
    http_->Stop();
  if (heartbeat_.joinable())
    heartbeat_.join();
  if (writeback_.joinable())
    writeback_.join();
  if (resync_.joinable())
    resync_.join();
  if (scrub_.joinable())
    scrub_.join();
  if (repair_pool_ != nullptr)
    repair_pool_->Stop();
  if (resync_pool_ != nullptr)
    resync_pool_->Stop();
  if (router_ != nullptr)
    router_->Close();
  if (loop_ != nullptr)
    loop_->Stop();
  if (rpc_ != nullptr)
    rpc_->Stop();
  if (shm_ != nullptr)
    shm_->Stop();
  // Restores in the background write to the OSTs: they end (cut short) before the OSTs close.
  if (hsm_pool_ != nullptr)
    hsm_pool_->Stop();
  mover_.reset();
  for (auto& [index, store] : osts_) {
    Status st = store->Close();
    if (!st.ok())
      LOG_ERROR("{}", st.ToString());
  }
  if (pool_ != nullptr)
    pool_->Stop();
  osts_.clear();
  rpc_.reset();
  router_.reset();
  loop_.reset();
}

OstStore* OssServer::FindOst(uint32_t index) const {
  auto it = osts_.find(index);
  return it == osts_.end() ? nullptr : it->second.get();
}

bool OssServer::AcquireBudget(uint64_t bytes) {
  uint64_t cur = inflight_bytes_.load();
  do {
    // One request may always proceed, however large, so nothing starves.
    if (cur != 0 && cur + bytes > options_.max_inflight_bytes)
      return false;
  } while (!inflight_bytes_.compare_exchange_weak(cur, cur + bytes));
  return true;
}

void OssServer::ReleaseBudget(uint64_t bytes) {
  inflight_bytes_.fetch_sub(bytes);
}

Status OssServer::CheckCap(const net::ServerCall& call,
                           const pb::Capability& cap,
                           const pb::ObjectId& obj,
                           uint32_t rights) const {
  if (call.key_id() == options_.key_id)
    return Status::OK();
  if (IsRevoked(call.key_id()))
    return Status::PermissionDenied(fmt::format("client key {} was revoked", call.key_id()));
  return net::VerifyCapability(cap_key_, cap, net::FromPb(obj.fid()), rights, call.key_id(),
                               net::WallClockMs());
}

bool OssServer::IsRevoked(uint32_t key_id) const {
  std::lock_guard lock(revoked_mu_);
  return revoked_.count(key_id) != 0;
}

void OssServer::SetRevoked(const google::protobuf::RepeatedField<uint32_t>& ids) {
  std::vector<uint32_t> fresh;
  {
    std::lock_guard lock(revoked_mu_);
    for (uint32_t id : ids) {
      if (revoked_.insert(id).second)
        fresh.push_back(id);
    }
  }
  for (uint32_t id : fresh) {
    const size_t n = rpc_->CloseConnectionsOfKey(id);
    LOG_INFO("oss: client key {} revoked; closed {} connection(s)", id, n);
  }
}

void OssServer::RegisterHandlers() {
  using net::MsgType;
  rpc_->Register(MsgType::kWrite, [this](net::ServerCall c) { HandleWrite(std::move(c)); });
  rpc_->Register(MsgType::kRead, [this](net::ServerCall c) { HandleRead(std::move(c)); });
  rpc_->Register(MsgType::kReadBatch, [this](net::ServerCall c) { HandleReadBatch(std::move(c)); });
  rpc_->Register(MsgType::kSync, [this](net::ServerCall c) { HandleSync(std::move(c)); });
  rpc_->Register(MsgType::kPunch, [this](net::ServerCall c) { HandlePunch(std::move(c)); });
  rpc_->Register(MsgType::kDestroy, [this](net::ServerCall c) { HandleDestroy(std::move(c)); });
  rpc_->Register(MsgType::kObjStat, [this](net::ServerCall c) { HandleObjStat(std::move(c)); });
  rpc_->Register(MsgType::kOstStatfs, [this](net::ServerCall c) { HandleStatfs(std::move(c)); });
  rpc_->Register(MsgType::kHsmObj, [this](net::ServerCall c) { HandleHsmObj(std::move(c)); });
  rpc_->Register(MsgType::kResyncCheck,
                 [this](net::ServerCall c) { HandleResyncCheck(std::move(c)); });
  rpc_->Register(MsgType::kResyncPut, [this](net::ServerCall c) { HandleResyncPut(std::move(c)); });
  rpc_->Register(MsgType::kRepair, [this](net::ServerCall c) { HandleRepair(std::move(c)); });
  rpc_->Register(MsgType::kRepairPush,
                 [this](net::ServerCall c) { HandleRepairPush(std::move(c)); });
}

namespace {

Status NoSuchOst(uint32_t index) {
  return Status::NotFound(fmt::format("OST {} is not served here", index));
}

Status Busy() {
  return Status::Unavailable("OSS is busy (in-flight IO budget spent); retry");
}

// File bytes a read of [offset, offset + length) returned (none past the object's end).
uint64_t BytesRead(const ReadResult& r, uint64_t offset, uint64_t length) {
  return r.object_length > offset ? std::min(length, r.object_length - offset) : 0;
}

}  // namespace

void OssServer::HandleWrite(net::ServerCall call) {
  pb::WriteReq req;
  Status st = call.ParseBody(&req);
  if (!st.ok())
    return call.ReplyError(st);
  OstStore* store = FindOst(req.ost());
  if (store == nullptr)
    return call.ReplyError(NoSuchOst(req.ost()));
  st = CheckCap(call, req.cap(), req.obj(), net::kCapWrite);
  if (!st.ok())
    return call.ReplyError(st);
  if (req.shm_token() != 0)
    return WriteFromShm(std::move(call), store, req);
  if (req.chain() != 0)
    return ChainWrite(std::move(call), store, std::move(req));
  const uint64_t bytes = call.data().size();
  if (!AcquireBudget(bytes))
    return call.ReplyError(Busy());
  const ObjectId id = net::FromPb(req.obj());
  auto c = std::make_shared<net::ServerCall>(std::move(call));
  // The request's aligned receive buffer is written in place (no copy); it stays with the call
  // so the network layer recycles it once the call is answered.
  OstCounters* m = CountersOf(req.ost());
  OpBegin(m, OstOp::kWrite);
  store->WriteAsync(id, req.offset(), &c->data(),
                    [this, c, store, id, bytes, m, sync = req.sync()](Result<uint64_t> r) {
                      ReleaseBudget(bytes);
                      OpEnd(m, OstOp::kWrite, r.ok(), 0, bytes);
                      if (!r.ok())
                        return c->ReplyError(r.status());
                      uint64_t length = *r;
                      if (!sync) {
                        pb::WriteResp resp;
                        resp.set_object_length(length);
                        resp.set_epoch(epoch_);
                        return c->Reply(resp);
                      }
                      store->SyncAsync({id}, [this, c, length](Status s) {
                        if (!s.ok())
                          return c->ReplyError(s);
                        pb::WriteResp resp;
                        resp.set_object_length(length);
                        resp.set_epoch(epoch_);
                        c->Reply(resp);
                      });
                    });
}

void OssServer::WriteFromShm(net::ServerCall call, OstStore* store, const pb::WriteReq& req) {
  if (req.chain() != 0 || !call.data().empty() || req.shm_len() > kMaxReadLength) {
    return call.ReplyError(Status::InvalidArgument(
        fmt::format("shared-memory write of {} bytes: {}", req.shm_len(),
                    req.chain() != 0       ? "not to a replicated object"
                    : !call.data().empty() ? "the request carries a data segment too"
                                           : "more than one request may carry")));
  }
  std::shared_ptr<MappedShm> region = shm_ ? shm_->Find(req.shm_token()) : nullptr;
  if (region == nullptr) {
    // The client sends it over TCP instead (and registers again) on kNotFound.
    return call.ReplyError(Status::NotFound(
        fmt::format("shared-memory region {:016x} is not registered here", req.shm_token())));
  }
  const uint8_t* src = region->At(req.shm_offset(), req.shm_len());
  if (src == nullptr) {
    return call.ReplyError(Status::InvalidArgument(
        fmt::format("shared-memory write of {} bytes at region offset {}: outside the {}-byte "
                    "region",
                    req.shm_len(), req.shm_offset(), region->size())));
  }
  const uint64_t bytes = req.shm_len();
  if (!AcquireBudget(bytes))
    return call.ReplyError(Busy());
  auto c = std::make_shared<net::ServerCall>(std::move(call));
  OstCounters* m = CountersOf(req.ost());
  OpBegin(m, OstOp::kWrite);
  const ObjectId id = net::FromPb(req.obj());
  // The region stays mapped until the write is done (the callback holds it).
  store->WriteFromAsync(id, req.offset(), std::span<const uint8_t>(src, bytes),
                        [this, c, store, id, bytes, m, sync = req.sync(),
                         region = std::move(region)](Result<uint64_t> r) {
                          ReleaseBudget(bytes);
                          OpEnd(m, OstOp::kWrite, r.ok(), 0, bytes);
                          if (!r.ok())
                            return c->ReplyError(r.status());
                          // The bytes bypassed the request's data segment: count them for the job.
                          c->AddJobWriteBytes(bytes);
                          shm_->writes.fetch_add(1, std::memory_order_relaxed);
                          const uint64_t length = *r;
                          auto reply = [this, c, length] {
                            pb::WriteResp resp;
                            resp.set_object_length(length);
                            resp.set_epoch(epoch_);
                            c->Reply(resp);
                          };
                          if (!sync)
                            return reply();
                          store->SyncAsync({id}, [c, reply](Status s) {
                            if (!s.ok())
                              return c->ReplyError(s);
                            reply();
                          });
                        });
}

void OssServer::HandleRead(net::ServerCall call) {
  pb::ReadReq req;
  Status st = call.ParseBody(&req);
  if (!st.ok())
    return call.ReplyError(st);
  ServeRead(std::move(call), std::move(req));
}

void OssServer::HandleReadBatch(net::ServerCall call) {
  auto req = std::make_shared<pb::ReadBatchReq>();
  Status st = call.ParseBody(req.get());
  if (!st.ok())
    return call.ReplyError(st);
  const int n = req->reads_size();
  if (n == 0 || n > kMaxBatchReads) {
    return call.ReplyError(Status::InvalidArgument(
        fmt::format("read batch of {} entries; 1 to {} per request", n, kMaxBatchReads)));
  }
  // Its reply is one frame: the bytes read over TCP are bounded as one Read's.
  uint64_t tcp_bytes = 0;
  for (const pb::ReadReq& r : req->reads()) {
    if (r.shm_token() == 0)
      tcp_bytes += std::min<uint64_t>(r.length(), kMaxReadLength + 1);
  }
  if (tcp_bytes > kMaxReadLength) {
    return call.ReplyError(Status::InvalidArgument(fmt::format(
        "read batch of {} bytes over TCP; at most {} per request", tcp_bytes, kMaxReadLength)));
  }
  // The entries' answers are gathered here; the last one to arrive sends the reply (the data
  // segments of entries read over TCP one after the other, each entry's buffer held until the
  // reply is written).
  struct Batch {
    std::mutex mu;
    int left = 0;
    std::vector<net::PartReply> parts;
    net::ServerCall call;
  };
  read_batches_.fetch_add(1, std::memory_order_relaxed);
  auto b = std::make_shared<Batch>();
  b->left = n;
  b->parts.resize(static_cast<size_t>(n));
  b->call = std::move(call);
  auto finish = [b] {
    pb::ReadBatchResp resp;
    std::vector<net::ConstSpan> data;
    auto hold = std::make_shared<std::vector<std::shared_ptr<void>>>();
    for (net::PartReply& p : b->parts) {
      pb::ReadBatchEntry* e = resp.add_reads();
      if (!p.status.ok()) {
        net::ToPb(p.status, e->mutable_error());
        continue;
      }
      e->set_resp(std::move(p.body));
      uint64_t len = 0;
      for (const net::ConstSpan& s : p.data) {
        len += s.size;
        data.push_back(s);
      }
      e->set_data_len(len);
      if (p.keepalive)
        hold->push_back(std::move(p.keepalive));
    }
    b->call.Reply(resp, std::move(data), std::move(hold));
  };
  for (int i = 0; i < n; ++i) {
    net::ServerCall part = b->call.Part(net::MsgType::kRead, [b, i, finish](net::PartReply r) {
      bool last;
      {
        std::lock_guard<std::mutex> lock(b->mu);
        b->parts[static_cast<size_t>(i)] = std::move(r);
        last = --b->left == 0;
      }
      if (last)
        finish();
    });
    ServeRead(std::move(part), std::move(*req->mutable_reads(i)));
  }
}

void OssServer::ServeRead(net::ServerCall call, pb::ReadReq req) {
  Status st;
  OstStore* store = FindOst(req.ost());
  if (store == nullptr)
    return call.ReplyError(NoSuchOst(req.ost()));
  if (req.length() > kMaxReadLength) {
    return call.ReplyError(Status::InvalidArgument(
        fmt::format("read of {} bytes; at most {} per request", req.length(), kMaxReadLength)));
  }
  // Before either path: a shared-memory read is a read like any other.
  st = CheckCap(call, req.cap(), req.obj(), net::kCapRead);
  if (!st.ok())
    return call.ReplyError(st);
  if (req.chain() != 0) {
    ChainRouter::Route route;
    st = ChainGate(req.chain(), req.chain_version(), req.ost(), true, &route);
    if (!st.ok())
      return call.ReplyError(st);
    // Committed bytes only: a range with a chain write in flight here waits for its commit.
    CountRead(req.obj());
    auto c = std::make_shared<net::ServerCall>(std::move(call));
    auto r = std::make_shared<pb::ReadReq>(std::move(req));
    router_->WhenClean(net::FromPb(r->obj()), r->offset(), r->length(),
                       [this, c, r, store] { ReadObject(std::move(*c), store, *r, nullptr); });
    return;
  }
  CountRead(req.obj());
  if (mover_ != nullptr) {
    if (std::shared_ptr<ObjectFill> f = mover_->fills().Find(req.ost(), net::FromPb(req.obj()))) {
      // Restore by extents: the object is being restored; this read waits for its own chunks
      // (fetched next) and reads them from the staging object (hsm_fill.h).
      auto c = std::make_shared<net::ServerCall>(std::move(call));
      auto r = std::make_shared<pb::ReadReq>(std::move(req));
      f->WhenReadable(r->offset(), r->length(), [this, c, r, store, f](Status s, bool staging) {
        if (!s.ok()) {
          // A bad or missing copy is the reader's EIO, never wrong bytes; "not now" stays
          // retryable.
          if (s.code() == StatusCode::kCorruption || s.code() == StatusCode::kNotFound)
            s = Status::IoError(fmt::format("restore failed: {}", s.message()));
          return c->ReplyError(s);
        }
        ReadObject(std::move(*c), store, *r, staging ? f : nullptr);
      });
      return;
    }
  }
  ReadObject(std::move(call), store, req, nullptr);
}

void OssServer::ReadObject(net::ServerCall call,
                           OstStore* store,
                           const pb::ReadReq& req,
                           std::shared_ptr<ObjectFill> staged) {
  const uint64_t bytes = AlignUp(req.length(), kBlockSize) + 2 * kBlockSize;
  if (req.shm_token() != 0)
    return ReadIntoShm(std::move(call), store, req, bytes, std::move(staged));
  if (!AcquireBudget(bytes)) {
    if (staged)
      staged->Unpin();
    return call.ReplyError(Busy());
  }
  auto c = std::make_shared<net::ServerCall>(std::move(call));
  OstCounters* m = CountersOf(req.ost());
  OpBegin(m, OstOp::kRead);
  store->ReadAsync(
      staged ? staged->staging() : net::FromPb(req.obj()), req.offset(), req.length(),
      [this, c, bytes, m, staged, offset = req.offset(),
       length = req.length()](Result<ReadResult> r) {
        if (staged)
          staged->Unpin();
        OpEnd(m, OstOp::kRead, r.ok(), r.ok() ? BytesRead(*r, offset, length) : 0);
        if (!r.ok()) {
          ReleaseBudget(bytes);
          return c->ReplyError(r.status());
        }
        pb::ReadResp resp;
        resp.set_aligned_offset(r->aligned_offset);
        resp.set_object_length(r->object_length);
        resp.set_exists(r->exists || staged != nullptr);
        resp.mutable_block_crcs()->Add(r->block_crcs.begin(), r->block_crcs.end());
        auto hold = std::make_shared<BudgetHold>();
        hold->release = [this, bytes] { ReleaseBudget(bytes); };
        hold->data = r->data;
        // The read buffer goes out as the data segment as is (no copy).
        c->Reply(resp, {net::ConstSpan{r->data->data(), r->data->size()}}, std::move(hold));
      });
}

void OssServer::ReadIntoShm(net::ServerCall call,
                            OstStore* store,
                            const pb::ReadReq& req,
                            uint64_t bytes,
                            std::shared_ptr<ObjectFill> staged) {
  auto unpin = [&staged] {  // a read that does not run gives its pin back
    if (staged)
      staged->Unpin();
  };
  std::shared_ptr<MappedShm> region = shm_ ? shm_->Find(req.shm_token()) : nullptr;
  if (region == nullptr) {
    unpin();
    // The client falls back to TCP (and registers again) on kNotFound for a shared-memory read.
    return call.ReplyError(Status::NotFound(
        fmt::format("shared-memory region {:016x} is not registered here", req.shm_token())));
  }
  const uint64_t a0 = AlignDown(req.offset(), kBlockSize);
  const uint64_t span = AlignUp(req.offset() + req.length(), kBlockSize) - a0;
  uint8_t* dest = region->At(req.shm_offset(), span);
  if (dest == nullptr || req.shm_offset() % kBlockSize != 0) {
    unpin();
    return call.ReplyError(Status::InvalidArgument(
        fmt::format("shared-memory read of {} bytes at region offset {}: outside the {}-byte "
                    "region or not 4 KiB-aligned",
                    span, req.shm_offset(), region->size())));
  }
  // The budget bounds reads in flight (no OSS memory is held, but the disk queue is).
  if (!AcquireBudget(bytes)) {
    unpin();
    return call.ReplyError(Busy());
  }
  auto c = std::make_shared<net::ServerCall>(std::move(call));
  OstCounters* m = CountersOf(req.ost());
  OpBegin(m, OstOp::kRead);
  store->ReadIntoAsync(staged ? staged->staging() : net::FromPb(req.obj()), req.offset(),
                       req.length(), dest,
                       [this, c, bytes, m, staged, offset = req.offset(), length = req.length(),
                        region = std::move(region)](Result<ReadResult> r) {
                         if (staged)
                           staged->Unpin();
                         ReleaseBudget(bytes);
                         OpEnd(m, OstOp::kRead, r.ok(), r.ok() ? BytesRead(*r, offset, length) : 0);
                         if (!r.ok())
                           return c->ReplyError(r.status());
                         // The data bypassed the reply's data segment: count it for the job.
                         c->AddJobReadBytes(BytesRead(*r, offset, length));
                         shm_->reads.fetch_add(1, std::memory_order_relaxed);
                         pb::ReadResp resp;
                         resp.set_aligned_offset(r->aligned_offset);
                         resp.set_object_length(r->object_length);
                         resp.set_exists(r->exists || staged != nullptr);
                         resp.mutable_block_crcs()->Add(r->block_crcs.begin(), r->block_crcs.end());
                         resp.set_in_shm(true);
                         resp.set_shm_len(r->dest_len);
                         c->Reply(resp);
                       });
}

void OssServer::HandleSync(net::ServerCall call) {
  pb::SyncReq req;
  Status st = call.ParseBody(&req);
  if (!st.ok())
    return call.ReplyError(st);
  OstStore* store = FindOst(req.ost());
  if (store == nullptr)
    return call.ReplyError(NoSuchOst(req.ost()));
  std::vector<ObjectId> ids;
  ids.reserve(req.objs_size());
  for (const auto& o : req.objs()) {
    if (call.key_id() != options_.key_id) {
      // Any capability of the object's file will do: a sync changes no data.
      Status cs = Status::PermissionDenied("no capability for a synced object");
      for (const auto& cap : req.caps()) {
        cs = CheckCap(call, cap, o, 0);
        if (cs.ok())
          break;
      }
      if (!cs.ok())
        return call.ReplyError(cs);
    }
    ids.push_back(net::FromPb(o));
  }
  if (req.chain() != 0)
    return ChainSync(std::move(call), store, std::move(req));
  if (req.epoch() != 0 && req.epoch() != epoch_) {
    // Writes acknowledged under another epoch were not synced before this machine lost power
    // (or a crash simulation cut it): they may be gone, and a sync now would claim otherwise.
    return call.ReplyError(Status::IoError(fmt::format(
        "OST {}: the server lost power after acknowledging writes to {} object(s) that were not "
        "yet synced; they may be lost",
        req.ost(), req.objs_size())));
  }
  auto c = std::make_shared<net::ServerCall>(std::move(call));
  OstCounters* m = CountersOf(req.ost());
  OpBegin(m, OstOp::kSync);
  store->SyncAsync(std::move(ids), [this, c, m](Status s) {
    OpEnd(m, OstOp::kSync, s.ok());
    if (!s.ok())
      return c->ReplyError(s);
    c->Reply(pb::SyncResp());
  });
}

void OssServer::HandlePunch(net::ServerCall call) {
  pb::PunchReq req;
  Status st = call.ParseBody(&req);
  if (!st.ok())
    return call.ReplyError(st);
  OstStore* store = FindOst(req.ost());
  if (store == nullptr)
    return call.ReplyError(NoSuchOst(req.ost()));
  st = CheckCap(call, req.cap(), req.obj(), net::kCapWrite);
  if (!st.ok())
    return call.ReplyError(st);
  if (req.chain() != 0)
    return ChainPunch(std::move(call), store, std::move(req));
  auto c = std::make_shared<net::ServerCall>(std::move(call));
  OstCounters* m = CountersOf(req.ost());
  OpBegin(m, OstOp::kPunch);
  store->PunchAsync(net::FromPb(req.obj()), req.length(), [this, c, m](Status s) {
    OpEnd(m, OstOp::kPunch, s.ok());
    if (!s.ok())
      return c->ReplyError(s);
    c->Reply(pb::PunchResp());
  });
}

void OssServer::HandleDestroy(net::ServerCall call) {
  pb::DestroyReq req;
  Status st = call.ParseBody(&req);
  if (!st.ok())
    return call.ReplyError(st);
  OstStore* store = FindOst(req.ost());
  if (store == nullptr)
    return call.ReplyError(NoSuchOst(req.ost()));
  st = CheckCap(call, req.cap(), req.obj(), net::kCapWrite);
  if (!st.ok())
    return call.ReplyError(st);
  if (req.chain() != 0)
    return ChainDestroy(std::move(call), store, std::move(req));
  auto c = std::make_shared<net::ServerCall>(std::move(call));
  OstCounters* m = CountersOf(req.ost());
  OpBegin(m, OstOp::kDestroy);
  store->DestroyAsync(net::FromPb(req.obj()), [this, c, m](Status s) {
    OpEnd(m, OstOp::kDestroy, s.ok());
    if (!s.ok())
      return c->ReplyError(s);
    c->Reply(pb::DestroyResp());
  });
}

void OssServer::HandleObjStat(net::ServerCall call) {
  pb::ObjStatReq req;
  Status st = call.ParseBody(&req);
  if (!st.ok())
    return call.ReplyError(st);
  OstStore* store = FindOst(req.ost());
  if (store == nullptr)
    return call.ReplyError(NoSuchOst(req.ost()));
  st = CheckCap(call, req.cap(), req.obj(), net::kCapRead);
  if (!st.ok())
    return call.ReplyError(st);
  if (req.chain() != 0) {
    ChainRouter::Route route;
    st = ChainGate(req.chain(), req.chain_version(), req.ost(), true, &route);
    if (!st.ok())
      return call.ReplyError(st);
  }
  auto c = std::make_shared<net::ServerCall>(std::move(call));
  OstCounters* m = CountersOf(req.ost());
  OpBegin(m, OstOp::kObjStat);
  store->StatAsync(net::FromPb(req.obj()), [this, c, m](Result<ObjStat> r) {
    OpEnd(m, OstOp::kObjStat, r.ok());
    if (!r.ok())
      return c->ReplyError(r.status());
    pb::ObjStatResp resp;
    resp.set_exists(r->exists);
    resp.set_length(r->length);
    c->Reply(resp);
  });
}

void OssServer::RunDropCopyTask(const pb::OstTask& task) {
  const uint64_t id = task.id();
  if (mover_ == nullptr) {
    // No cold tier here: there is no copy this OSS could delete.
    LOG_WARN("OST {} task {}: no cold tier to delete an archived copy from", task.ost(), id);
    std::lock_guard<std::mutex> lock(hsm_tasks_mu_);
    hsm_tasks_done_.push_back(id);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(hsm_tasks_mu_);
    if (!hsm_tasks_running_.insert(id).second)
      return;  // sent again while still running
  }
  const ObjectId obj = net::FromPb(task.obj());
  const uint64_t version = task.length();
  const bool queued = hsm_pool_->TrySubmit([this, id, obj, version] {
    Status st = mover_->Remove(obj, version);
    std::lock_guard<std::mutex> lock(hsm_tasks_mu_);
    hsm_tasks_running_.erase(id);
    if (st.ok()) {
      hsm_tasks_done_.push_back(id);
    } else {
      LOG_WARN("task {}: deleting the archived copy of {}: {}", id, obj.FileName(),
               st.ToString());  // not acknowledged: the MDS sends it again
    }
  });
  if (!queued) {
    std::lock_guard<std::mutex> lock(hsm_tasks_mu_);
    hsm_tasks_running_.erase(id);
  }
}

void OssServer::HandleHsmObj(net::ServerCall call) {
  pb::HsmObjReq req;
  Status st = call.ParseBody(&req);
  if (!st.ok())
    return call.ReplyError(st);
  OstStore* store = FindOst(req.ost());
  if (store == nullptr)
    return call.ReplyError(NoSuchOst(req.ost()));
  if (mover_ == nullptr) {
    return call.ReplyError(
        Status::NotSupported(fmt::format("the OSS serving OST {} has no cold tier", req.ost())));
  }
  const uint32_t op = req.op();
  if (op < kHsmArchive || op > kHsmRestoreWait)
    return call.ReplyError(Status::InvalidArgument(fmt::format("unknown HSM operation {}", op)));
  // Restoring and checking a copy change nothing the file's readers could see; archiving and
  // removing copies are the owner's (the MDS checked) and need the write right.
  const bool repo = op == kHsmRepoRestore || op == kHsmRepoVerify || op == kHsmRepoRestoreStart;
  const uint32_t rights = op == kHsmArchive || op == kHsmRemove ? net::kCapWrite : net::kCapRead;
  st = CheckCap(call, req.cap(), req.obj(), rights);
  if (!st.ok())
    return call.ReplyError(st);
  RepoSource src;
  if (repo) {
    if (req.source_url().empty() || req.source_key().empty() ||
        req.comp().stripe_count() <= req.obj().stripe() || req.comp().stripe_size() == 0 ||
        req.comp().start() >= req.comp().end()) {
      return call.ReplyError(Status::InvalidArgument(
          "a data repository restore names the object, its URL and its layout component"));
    }
    // A client key fetches only the source the MDS named in its capability.
    if (call.key_id() != options_.key_id &&
        req.cap().source() !=
            net::RepoSourceDigest(req.source_url(), req.source_key(), req.source_etag())) {
      return call.ReplyError(
          Status::PermissionDenied("capability does not name this data repository object"));
    }
    src.url = req.source_url();
    src.key = req.source_key();
    src.etag = req.source_etag();
    src.file_size = req.file_size();
    pb::Layout one;
    *one.add_components() = req.comp();
    FileLayout l = net::FromPb(one);
    src.comp = l.components[0];
  }
  auto c = std::make_shared<net::ServerCall>(std::move(call));
  const ObjectId obj = net::FromPb(req.obj());
  const uint64_t version = req.version();
  // May run while the mover stops (a fill cut short answers from its destructor): everything
  // it needs is captured.
  auto answer = [c, backend = mover_->Describe()](Result<uint64_t> r) {
    if (!r.ok())
      return c->ReplyError(r.status());
    pb::HsmObjResp resp;
    resp.set_length(*r);
    resp.set_backend(backend);
    c->Reply(resp);
  };
  if (op == kHsmRestoreWait) {
    // Tests: the answer of an OSS that restarted between a reader's start and its wait.
    if (Status f = CIUIC_FAULT("oss.hsm.restore_wait"); !f.ok())
      return answer(f);
    // The outcome of the object's restore: in progress, ended lately, or (the OSS restarted
    // meanwhile) whatever the OST holds now: an object there is a complete one.
    if (auto f = mover_->fills().Find(store->index(), obj))
      return f->WhenDone(answer);
    if (auto r = mover_->fills().Recent(store->index(), obj))
      return answer(*r);
    Result<ObjStat> st = store->Stat(obj);
    if (st.ok() && !st->exists) {
      // Aborted, not NotFound: the copy in the cold tier is fine (a restart cut the restore
      // short); the MDS marks a file lost only for a bad or missing copy.
      st = Status::Aborted(
          fmt::format("OST {} object {}: no restore of it is in progress here (was the OSS "
                      "restarted?); open the file again to restore it",
                      store->index(), obj.FileName()));
    }
    return answer(st.ok() ? Result<uint64_t>(st->length) : Result<uint64_t>(st.status()));
  }
  bool queued = hsm_pool_->TrySubmit([this, c, store, obj, op, version, src, answer] {
    if (op == kHsmRestore || op == kHsmRepoRestore || op == kHsmRestoreStart ||
        op == kHsmRepoRestoreStart) {
      // Restores run as fills (hsm_fill.h): the start answers once readers may wait on it, a
      // whole restore when it ends.
      Result<std::shared_ptr<ObjectFill>> f = Status::Internal("no result");
      try {
        f = op == kHsmRestore || op == kHsmRestoreStart ? mover_->StartRestore(store, obj, version)
                                                        : mover_->StartRepoRestore(store, obj, src);
      } catch (const std::exception& e) {
        f = Status::Internal(fmt::format("HSM restore of {}: {}", obj.FileName(), e.what()));
      }
      if (!f.ok()) {
        LOG_WARN("hsm: restore of OST {} object {}: {}", store->index(), obj.FileName(),
                 f.status().ToString());
        return answer(f.status());
      }
      if (op == kHsmRestoreStart || op == kHsmRepoRestoreStart)
        return answer((*f)->length());
      return (*f)->WhenDone(answer);
    }
    Result<uint64_t> r = Status::Internal("no result");
    try {
      switch (op) {
        case kHsmRepoVerify:
          r = mover_->VerifyRepo(src);
          break;
        case kHsmArchive:
          r = mover_->Archive(store, obj, version);
          break;
        case kHsmVerify:
          r = mover_->Verify(store, obj, version);
          break;
        case kHsmRemove:
        default: {
          Status s = mover_->Remove(obj, version);
          r = s.ok() ? Result<uint64_t>(uint64_t{0}) : Result<uint64_t>(s);
        }
      }
    } catch (const std::exception& e) {
      r = Status::Internal(fmt::format("HSM copy of {}: {}", obj.FileName(), e.what()));
    }
    if (!r.ok()) {
      LOG_WARN("hsm: op {} of OST {} object {} version {}: {}", op, store->index(), obj.FileName(),
               version, r.status().ToString());
    }
    answer(std::move(r));
  });
  if (!queued)
    c->ReplyError(Status::Unavailable("OSS HSM queue full; retry"));
}

namespace {

void FillOstInfo(uint32_t index, const std::string& addr, const io::FsStat& fs, pb::OstInfo* out) {
  out->set_index(index);
  out->set_oss_addr(addr);
  out->set_capacity(fs.capacity);
  out->set_free(fs.free);
  out->set_state(fs.free < kFullThreshold ? 2 : 0);
  out->set_device_id(fs.device_id);
}

}  // namespace

void OssServer::HandleStatfs(net::ServerCall call) {
  pb::OstStatfsReq req;
  Status st = call.ParseBody(&req);
  if (!st.ok())
    return call.ReplyError(st);
  OstStore* store = FindOst(req.ost());
  if (store == nullptr)
    return call.ReplyError(NoSuchOst(req.ost()));
  auto c = std::make_shared<net::ServerCall>(std::move(call));
  // statvfs can block on a busy file system: not on the network thread.
  OstCounters* m = CountersOf(req.ost());
  OpBegin(m, OstOp::kStatfs);
  bool queued = pool_->TrySubmit([this, c, store, m] {
    Result<io::FsStat> fs = store->Statfs();
    OpEnd(m, OstOp::kStatfs, fs.ok());
    if (!fs.ok())
      return c->ReplyError(fs.status());
    pb::OstStatfsResp resp;
    FillOstInfo(store->index(), ServedAddr(), *fs, resp.mutable_info());
    c->Reply(resp);
  });
  if (!queued) {
    OpEnd(m, OstOp::kStatfs, false);
    c->ReplyError(Busy());
  }
}

// ---------------------------------------------------------------------------------------------
// Registration and heartbeats.

void OssServer::WritebackLoop() {
  const auto idle = std::chrono::milliseconds(options_.writeback_idle_ms);
  const auto period = options_.writeback_idle_ms > 0
                          ? std::min<std::chrono::milliseconds>(idle, std::chrono::seconds(1))
                          : std::chrono::milliseconds(1000);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, period, [&] { return stopping_; }))
        return;
    }
    // Tombstones past their grace period: bounded work per pass and OST.
    for (const auto& [index, store] : osts_) {
      Result<size_t> n = store->CollectTombstones(256);
      if (!n.ok())
        LOG_WARN("OST {}: tombstone collection: {}", index, n.status().ToString());
    }
    if (options_.writeback_idle_ms == 0)
      continue;
    // Batches of 64 per OST, round robin, until every OST is drained of idle unsynced objects
    // (a batch syncs the directory once) or the server stops.
    bool more = true;
    while (more) {
      more = false;
      for (const auto& [index, store] : osts_) {
        Result<size_t> n = store->SyncIdleObjects(64, idle);
        if (!n.ok()) {
          LOG_WARN("OST {}: background sync: {}", index, n.status().ToString());
          continue;
        }
        more = more || *n == 64;
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_)
        return;
    }
  }
}

void OssServer::CountRead(const pb::ObjectId& obj) {
  const Fid fid = net::FromPb(obj).fid;
  std::lock_guard<std::mutex> lock(reads_mu_);
  auto it = file_reads_.find(fid);
  if (it != file_reads_.end())
    ++it->second;
  else if (file_reads_.size() < kMaxReadFiles)
    file_reads_.emplace(fid, 1);
}

void OssServer::TakeFileReads(pb::HeartbeatReq* req) {
  std::unordered_map<Fid, uint64_t, FidHash> taken;
  {
    std::lock_guard<std::mutex> lock(reads_mu_);
    taken.swap(file_reads_);
  }
  std::vector<std::pair<uint64_t, Fid>> top;
  top.reserve(taken.size());
  for (const auto& [fid, n] : taken)
    top.emplace_back(n, fid);
  if (top.size() > kMaxReportedFiles) {
    std::nth_element(top.begin(), top.begin() + kMaxReportedFiles, top.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    top.resize(kMaxReportedFiles);
  }
  for (const auto& [n, fid] : top) {
    pb::FileReads* fr = req->add_file_reads();
    net::ToPb(fid, fr->mutable_fid());
    fr->set_reads(n);
  }
}

void OssServer::HeartbeatLoop() {
  const std::string addr = ServedAddr();
  std::shared_ptr<net::RpcChannel> mds;
  std::vector<uint64_t> done_tasks;  // run, not yet acknowledged to the MDS
  uint32_t interval_ms = std::max<uint32_t>(options_.heartbeat_ms, 10);
  uint32_t backoff_ms = 50;
  auto fill_osts = [&](google::protobuf::RepeatedPtrField<pb::OstInfo>* out) {
    for (const auto& [index, store] : osts_) {
      Result<io::FsStat> fs = store->Statfs();
      if (!fs.ok()) {
        LOG_WARN("{}", fs.status().ToString());
        continue;
      }
      pb::OstInfo* info = out->Add();
      FillOstInfo(index, addr, *fs, info);
      info->set_incarnation(store->incarnation());
      *info->mutable_scrub() = scrub_stats(index);
    }
  };
  // Waits `ms` or until Stop; returns false when stopping.
  auto wait = [&](uint32_t ms) {
    std::unique_lock<std::mutex> lock(mu_);
    // A request that named a newer chain version ends the wait early: the heartbeat's answer
    // says which version is current, and the map is fetched below. So does a resync's end: the
    // MDS makes the member serving when it hears of it.
    cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] {
      return stopping_ || std::exchange(chain_refresh_, false) ||
             std::exchange(heartbeat_soon_, false);
    });
    return !stopping_;
  };
  // Fetches the OST map (chains and addresses) when the MDS has newer chains than we know.
  auto refresh_chains = [&](uint64_t chains_version, uint64_t map_version) {
    if (chains_version != 0 && chains_version <= router_->chains_version() &&
        map_version <= router_->map_version() && !router_->TakeRefreshWanted()) {
      return;
    }
    pb::GetOstMapReq mreq;
    pb::GetOstMapResp map;
    Status ms = mds->CallMsg(net::MsgType::kGetOstMap, mreq, &map, 5000);
    if (ms.ok()) {
      router_->Update(map);
      // A member may have become syncing: the resync loop looks now, not at its next tick.
      std::lock_guard<std::mutex> lock(mu_);
      resync_wake_ = true;
      cv_.notify_all();
    } else {
      LOG_WARN("oss: fetching the chains from the MDS failed: {}", ms.ToString());
    }
  };
  auto fail = [&](const Status& s, const char* what) {
    if (registered_.exchange(false) || backoff_ms == 50) {
      LOG_WARN("MDS {} {}: {}; retrying", options_.mds.ToString(), what, s.ToString());
    }
    mds.reset();
    uint32_t ms = backoff_ms;
    backoff_ms = std::min<uint32_t>(backoff_ms * 2, std::max<uint32_t>(interval_ms, 2000));
    return wait(ms);
  };

  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_)
        return;
    }
    if (hb_paused_) {
      if (!wait(interval_ms))
        return;
      continue;
    }
    if (mds == nullptr || !mds->connected()) {
      net::ChannelOptions co;
      co.secret = options_.secret;
      co.key_id = options_.key_id;
      co.role = net::Role::kOss;
      co.connect_timeout_ms = 2000;
      Result<std::shared_ptr<net::RpcChannel>> ch =
          net::RpcChannel::Connect(loop_.get(), options_.mds, co);
      if (!ch.ok()) {
        if (!fail(ch.status(), "unreachable"))
          return;
        continue;
      }
      mds = *ch;
      pb::RegisterOssReq req;
      req.set_oss_addr(addr);
      req.set_cluster_uuid(options_.cluster_uuid);
      req.set_host_label(options_.host_label);
      req.set_epoch(epoch_);
      fill_osts(req.mutable_osts());
      pb::RegisterOssResp resp;
      Status st = mds->CallMsg(net::MsgType::kRegisterOss, req, &resp, 5000);
      if (!st.ok()) {
        if (!fail(st, "refused registration"))
          return;
        continue;
      }
      if (resp.heartbeat_ms() > 0)
        interval_ms = std::max<uint32_t>(resp.heartbeat_ms(), 10);
      hb_interval_ms_ = interval_ms;
      last_mds_ok_ms_ = MonoMillis();
      refresh_chains(0, 0);
      registered_ = true;
      backoff_ms = 50;
      LOG_INFO("registered {} OST(s) at {} with the MDS at {}", osts_.size(), addr,
               options_.mds.ToString());
    }
    if (!wait(interval_ms))
      return;

    pb::HeartbeatReq req;
    req.set_oss_addr(addr);
    fill_osts(req.mutable_osts());
    {
      // Copy deletions run on the HSM pool (store requests must not hold up heartbeats).
      std::lock_guard<std::mutex> lock(hsm_tasks_mu_);
      done_tasks.insert(done_tasks.end(), hsm_tasks_done_.begin(), hsm_tasks_done_.end());
      hsm_tasks_done_.clear();
    }
    for (uint64_t id : done_tasks)
      req.add_done_task_ids(id);
    // Counts of a heartbeat that fails are lost: heat is a hint, not an account.
    TakeFileReads(&req);
    {
      std::lock_guard<std::mutex> lock(resync_mu_);
      for (const auto& [key, p] : resyncs_)
        *req.add_resync() = p;
    }
    pb::HeartbeatResp resp;
    Status st = mds->CallMsg(net::MsgType::kHeartbeat, req, &resp, 5000);
    if (!st.ok()) {
      if (!fail(st, "heartbeat failed"))
        return;
      continue;
    }
    heartbeats_.fetch_add(1);
    last_mds_ok_ms_ = MonoMillis();
    refresh_chains(resp.chains_version(), resp.map_version());
    done_tasks.clear();
    SetRevoked(resp.revoked_key_ids());
    // Destroys are gathered per OST and run with one directory sync each (after a data set of
    // 100,000 files is removed, a sync per object kept the disk busy for everyone else);
    // punches run one by one. Tasks are idempotent; a failed one is not acknowledged, so the
    // MDS sends it again.
    std::map<OstStore*, std::vector<std::pair<ObjectId, const pb::OstTask*>>> destroys;
    for (const pb::OstTask& task : resp.tasks()) {
      OstStore* store = FindOst(task.ost());
      if (store == nullptr) {
        LOG_WARN("MDS sent task {} for OST {}, which is not served here", task.id(), task.ost());
        continue;
      }
      const ObjectId obj = net::FromPb(task.obj());
      Status ts;
      if (task.kind() == kTaskDestroy) {
        destroys[store].emplace_back(obj, &task);
        continue;
      }
      if (task.kind() == kTaskPunch) {
        ts = store->Punch(obj, task.length());
      } else if (task.kind() == kTaskRelease) {
        ts = store->Release(obj);
      } else if (task.kind() == kTaskDropCopy) {
        RunDropCopyTask(task);
        continue;  // acknowledged by a later heartbeat, once the store answered
      } else {
        ts = Status::InvalidArgument(fmt::format("unknown task kind {}", task.kind()));
      }
      if (ts.ok()) {
        done_tasks.push_back(task.id());
      } else {
        LOG_WARN("OST {} task {} on {}: {}", task.ost(), task.id(), obj.FileName(), ts.ToString());
      }
    }
    for (auto& [store, list] : destroys) {
      std::vector<ObjectId> ids;
      ids.reserve(list.size());
      for (const auto& item : list)
        ids.push_back(item.first);
      std::vector<Status> results;
      store->DestroyMany(ids, &results);
      for (size_t i = 0; i < list.size(); ++i) {
        const pb::OstTask& task = *list[i].second;
        if (results[i].ok()) {
          done_tasks.push_back(task.id());
        } else {
          LOG_WARN("OST {} task {} on {}: {}", task.ost(), task.id(), ids[i].FileName(),
                   results[i].ToString());
        }
      }
    }
  }
}

}  // namespace ciuic::oss
