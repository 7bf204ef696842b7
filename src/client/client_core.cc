#include "client/client_core.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string_view>

#include <fmt/format.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "common/logging.h"
#include "common/time_util.h"
#include "net/pb_convert.h"

namespace ciuic::client {
namespace {

// Threads of the pool that runs blocking work for the data path (connects, map refreshes).
constexpr size_t kPoolThreads = 2;
// Connects, OST map and capability refreshes: what every OST call may wait on. Their own pool,
// so blocking work on pool_ that waits for OST calls (a restore, an instantiation) can never
// take every thread those calls need.
constexpr size_t kCtlPoolThreads = 2;
constexpr size_t kPoolQueue = 4096;
// Threads serving asynchronous reads through the node cache: each may wait on the local disk,
// on another process's fill of a block, or on the OSTs for a miss.
constexpr size_t kCachePoolThreads = 4;

std::string DefaultClientName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0)
    std::snprintf(host, sizeof(host), "unknown");
  return fmt::format("{}:{}", host, ::getpid());
}

// The identity ScopedCaller set on this thread.
struct CallerOverride {
  bool active = false;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;
};

CallerOverride& CurrentCaller() {
  thread_local CallerOverride caller;
  return caller;
}

// Looks `key` up in a cache of (value, expiry in MonoMillis) entries: copies a live value to
// *out; drops an expired one. Caller holds the cache's lock.
template <typename Map, typename Key, typename Value>
bool TakeFresh(Map& cache, const Key& key, Value* out) {
  auto it = cache.find(key);
  if (it == cache.end())
    return false;
  if (it->second.second < MonoMillis()) {
    cache.erase(it);
    return false;
  }
  *out = it->second.first;
  return true;
}

}  // namespace
}  // namespace ciuic::client

namespace ciuic {

ScopedCaller::ScopedCaller(uint32_t uid, uint32_t gid, std::vector<uint32_t> groups) {
  client::CallerOverride& c = client::CurrentCaller();
  c.active = true;
  c.uid = uid;
  c.gid = gid;
  c.groups = std::move(groups);
}

ScopedCaller::~ScopedCaller() {
  client::CallerOverride& c = client::CurrentCaller();
  c.active = false;
  c.groups.clear();
}

}  // namespace ciuic

namespace ciuic::client {

int64_t ClientCore::BackoffMs(int attempt) {
  thread_local std::minstd_rand rng(std::random_device{}());
  const int64_t base = std::min<int64_t>(int64_t{20} << std::min(attempt, 6), 1000);
  std::uniform_int_distribution<int64_t> jitter(base / 2, base + base / 2);
  return jitter(rng);
}

ClientCore::ClientCore(const ClientOptions& options) : options_(options) {
  if (options_.client_name.empty())
    options_.client_name = DefaultClientName();
  if (options_.io_threads < 1)
    options_.io_threads = 1;
  if (options_.ost_retry_ms < 0)
    options_.ost_retry_ms = 0;
  const char* shm = std::getenv("CIUIC_SHM_READS");
  shm_reads_ = options_.shm_reads && !(shm != nullptr && std::string_view(shm) == "0");
  const char* batch = std::getenv("CIUIC_BATCH_READS");
  batch_reads_ = options_.batch_reads && !(batch != nullptr && std::string_view(batch) == "0");
  shm_spare_ = NewShmSpare();
}

Result<std::shared_ptr<ClientCore>> ClientCore::Create(const ClientOptions& options) {
  std::shared_ptr<ClientCore> core(new ClientCore(options));
  Status st = core->Init();
  if (!st.ok()) {
    core->Shutdown();
    return st;
  }
  return core;
}

void ClientCore::OpenNodeCache() {
  const NodeCacheOptions o =
      ResolveNodeCache(options_.node_cache_dir, options_.node_cache_bytes, cluster_.node_cache,
                       cluster_.node_cache_bytes, options_.node_cache_min_free_pct,
                       cluster_.node_cache_min_free_pct);
  if (o.dir.empty())
    return;
  Result<std::unique_ptr<NodeCache>> c = NodeCache::Open(o);
  if (!c.ok()) {
    LOG_WARN("client: {}; running without the node cache", c.status().ToString());
    return;
  }
  node_cache_ = std::move(*c);
  cache_pool_ = std::make_unique<ThreadPool>(kCachePoolThreads, kPoolQueue, "client-cache");
}

Status ClientCore::Init() {
  CIUIC_ASSIGN_OR_RETURN(std::string path, FindClusterFile(options_.cluster_file));
  CIUIC_ASSIGN_OR_RETURN(cluster_, ClusterFile::Load(path));
  chan_opts_.secret = cluster_.SecretBytes();
  chan_opts_.key_id = cluster_.key_id;
  chan_opts_.role = net::Role::kClient;
  chan_opts_.job_id = net::JobIdFromEnv();
  chan_opts_.connect_timeout_ms = std::min(5000, std::max(500, options_.ost_retry_ms));
  loop_ = std::make_unique<net::EventLoop>(options_.io_threads);
  timers_ = std::make_unique<TimerQueue>();
  pool_ = std::make_unique<ThreadPool>(kPoolThreads, kPoolQueue, "client");
  ctl_pool_ = std::make_unique<ThreadPool>(kCtlPoolThreads, kPoolQueue, "client-ctl");
  OpenNodeCache();

  {
    // The first connect fails fast: a client started against a dead cluster should say so.
    std::lock_guard<std::mutex> lock(mds_mu_);
    auto ch = ConnectMdsLocked();
    if (!ch.ok()) {
      return ch.status().WithContext(fmt::format("cannot reach the MDS at {} (cluster file {})",
                                                 cluster_.mds.ToString(), path));
    }
    cluster_uuid_ = mds_ch_->cluster_uuid();
  }
  CIUIC_RETURN_IF_ERROR(OpenSession());
  auto map = RefreshOstMap();
  if (!map.ok())
    return map.status().WithContext("cannot fetch the OST map");
  renew_thread_ = std::thread([this] { RenewLoop(); });
  return Status::OK();
}

ClientCore::~ClientCore() {
  Shutdown();
}

void ClientCore::BeginBackground() {
  std::lock_guard<std::mutex> lock(background_mu_);
  ++background_;
}

void ClientCore::EndBackground() {
  std::lock_guard<std::mutex> lock(background_mu_);
  if (--background_ == 0)
    background_cv_.notify_all();
}

void ClientCore::DeferClose(pb::CloseReq req) {
  constexpr size_t kMaxDeferredCloses = 65536;
  std::lock_guard<std::mutex> lock(closes_mu_);
  if (deferred_closes_.size() >= kMaxDeferredCloses) {
    LOG_WARN("client: {} closes wait for the MDS already; open {} stays until the session ends",
             deferred_closes_.size(), req.open_id());
    return;
  }
  deferred_closes_.push_back(std::move(req));
}

void ClientCore::RetryDeferredCloses(bool once) {
  std::vector<pb::CloseReq> todo;
  {
    std::lock_guard<std::mutex> lock(closes_mu_);
    todo.swap(deferred_closes_);
  }
  if (todo.empty())
    return;
  std::shared_ptr<net::RpcChannel> ch;
  if (once) {
    std::lock_guard<std::mutex> lock(mds_mu_);
    ch = mds_ch_;
  }
  std::vector<pb::CloseReq> left;
  size_t sent = 0;
  for (pb::CloseReq& r : todo) {
    pb::CloseResp resp;
    Status st;
    if (once) {
      if (!ch || !ch->connected()) {
        left.push_back(std::move(r));
        continue;
      }
      auto* ctx = r.mutable_ctx();
      ctx->set_session_id(session_id_.load());
      ctx->set_seq(++seq_);
      ctx->set_uid(options_.uid);
      ctx->set_gid(options_.gid);
      st = ch->CallMsg(net::MsgType::kClose, r, &resp, 2000);
    } else {
      st = Mds(net::MsgType::kClose, &r, &resp, true);
    }
    if (st.ok()) {
      ++sent;
    } else if (st.IsRetryable() && st.code() != StatusCode::kAborted) {
      left.push_back(std::move(r));
    } else {
      LOG_WARN("client: deferred close of open {} refused: {}", r.open_id(), st.ToString());
    }
  }
  if (sent > 0)
    LOG_INFO("client: {} deferred close(s) reached the MDS", sent);
  if (!left.empty()) {
    std::lock_guard<std::mutex> lock(closes_mu_);
    for (pb::CloseReq& r : left)
      deferred_closes_.push_back(std::move(r));
  }
}

void ClientCore::Shutdown() {
  {
    // A restore by extents records its end through the session: let one that is about to
    // end do so (a reader that stops early leaves the rest to the restore's next reader).
    std::unique_lock<std::mutex> lock(background_mu_);
    background_cv_.wait_for(lock, std::chrono::seconds(5), [this] { return background_ == 0; });
  }
  if (shutdown_.load())
    return;
  // Closing the session ends its opens but not as writes: a close that wrote goes first.
  RetryDeferredCloses(/*once=*/true);
  if (shutdown_.exchange(true))
    return;
  if (session_id_.load() != 0) {
    pb::CloseSessionReq req;
    pb::CloseSessionResp resp;
    // One attempt, short: a dead MDS expires the lease by itself.
    std::shared_ptr<net::RpcChannel> ch;
    {
      std::lock_guard<std::mutex> lock(mds_mu_);
      ch = mds_ch_;
    }
    if (ch && ch->connected()) {
      auto* ctx = req.mutable_ctx();
      ctx->set_session_id(session_id_.load());
      ctx->set_seq(++seq_);
      ctx->set_uid(options_.uid);
      ctx->set_gid(options_.gid);
      ch->CallMsg(net::MsgType::kCloseSession, req, &resp, 2000)
          .IgnoreError();  // best effort: the lease expires otherwise
    }
  }
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_cv_.notify_all();
  }
  if (renew_thread_.joinable())
    renew_thread_.join();
  if (timers_)
    timers_->Stop();
  if (cache_pool_)
    cache_pool_->Stop();
  if (pool_)
    pool_->Stop();
  // After pool_: its tasks may still wait on OST calls that wait on a connect.
  if (ctl_pool_)
    ctl_pool_->Stop();
  std::vector<std::shared_ptr<net::RpcChannel>> chans;
  std::vector<std::shared_ptr<OstCall>> orphans;
  {
    std::lock_guard<std::mutex> lock(ost_mu_);
    for (auto& [addr, conn] : oss_) {
      if (conn.ch)
        chans.push_back(conn.ch);
      for (auto& c : conn.waiting)
        orphans.push_back(c);
      conn.waiting.clear();
    }
    oss_.clear();
    for (auto& c : map_waiting_)
      orphans.push_back(c);
    map_waiting_.clear();
  }
  {
    std::lock_guard<std::mutex> lock(mds_mu_);
    if (mds_ch_)
      chans.push_back(mds_ch_);
    mds_ch_.reset();
  }
  for (auto& ch : chans)
    ch->Close();
  for (auto& c : orphans)
    Fail(c, Status::Aborted("client shut down"));
  if (loop_)
    loop_->Stop();
  // Reads queued for a flush that will not run now (QueueRead refuses new ones from here on).
  std::vector<std::shared_ptr<OstCall>> queued;
  {
    std::lock_guard<std::mutex> lock(rq_mu_);
    for (auto& [ch, q] : rq_) {
      for (auto& c : q.calls)
        queued.push_back(std::move(c));
    }
    rq_.clear();
  }
  for (auto& c : queued)
    Fail(c, Status::Aborted("client shut down"));
}

bool ClientCore::WaitOrStop(int64_t ms) {
  std::unique_lock<std::mutex> lock(stop_mu_);
  return !stop_cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return shutdown_.load(); });
}

// ---------------------------------------------------------------------------------------------
// MDS

Result<std::shared_ptr<net::RpcChannel>> ClientCore::MdsChannel(uint64_t* epoch) {
  std::lock_guard<std::mutex> lock(mds_mu_);
  if (shutdown_)
    return Status::Aborted("client shut down");
  if (mds_ch_ && mds_ch_->connected()) {
    *epoch = mds_ch_epoch_;
    return mds_ch_;
  }
  mds_ch_.reset();
  // Connecting under the lock makes concurrent callers wait for one connect instead of racing.
  CIUIC_ASSIGN_OR_RETURN(auto ch, ConnectMdsLocked());
  *epoch = mds_ch_epoch_;
  return ch;
}

Result<std::shared_ptr<net::RpcChannel>> ClientCore::ConnectMdsLocked() {
  CIUIC_ASSIGN_OR_RETURN(auto ch, net::RpcChannel::Connect(loop_.get(), cluster_.mds, chan_opts_));
  // The epoch before anything else on this connection, so every reply on it is under that epoch
  // (the first connection too: acknowledgements noted under no epoch could not be told apart
  // from those of a restarted MDS).
  pb::GetOstMapReq q;
  pb::GetOstMapResp r;
  CIUIC_RETURN_IF_ERROR(ch->CallMsg(net::MsgType::kGetOstMap, q, &r, options_.mds_timeout_ms));
  mds_ch_ = std::move(ch);
  mds_ch_epoch_ = r.mds_epoch();
  return mds_ch_;
}

namespace {

// The files and directories a namespace request or its answer names (their FID sequences): the
// keys its acknowledgement is noted under, and the key a sync reports under.
void AddFidKey(const google::protobuf::Message& m, const char* field, std::vector<uint64_t>* keys) {
  const google::protobuf::FieldDescriptor* f = m.GetDescriptor()->FindFieldByName(field);
  if (f == nullptr || f->type() != google::protobuf::FieldDescriptor::TYPE_MESSAGE ||
      f->is_repeated() || !m.GetReflection()->HasField(m, f)) {
    return;
  }
  const google::protobuf::Message& sub = m.GetReflection()->GetMessage(m, f);
  if (const auto* fid = dynamic_cast<const pb::Fid*>(&sub)) {
    if (fid->seq() != 0)
      keys->push_back(fid->seq());
  } else if (const auto* attr = dynamic_cast<const pb::Attr*>(&sub)) {
    if (attr->fid().seq() != 0)
      keys->push_back(attr->fid().seq());
  }
}

std::vector<uint64_t> FidKeys(const google::protobuf::Message& req,
                              const google::protobuf::Message& resp) {
  std::vector<uint64_t> keys;
  for (const char* f : {"fid", "parent", "src_parent", "dst_parent", "new_parent"})
    AddFidKey(req, f, &keys);
  AddFidKey(resp, "attr", &keys);  // a new file or directory
  std::sort(keys.begin() + (keys.empty() ? 0 : 1), keys.end());
  keys.erase(std::unique(keys.begin() + (keys.empty() ? 0 : 1), keys.end()), keys.end());
  if (keys.size() > 1 && std::find(keys.begin() + 1, keys.end(), keys[0]) != keys.end())
    keys.erase(std::find(keys.begin() + 1, keys.end(), keys[0]));
  return keys;  // the request's own file first (the key a sync reports under), no duplicates
}

}  // namespace

void ClientCore::NoteMdsAck(uint64_t epoch, const std::vector<uint64_t>& keys) {
  std::lock_guard<std::mutex> lock(acks_mu_);
  const uint64_t n = ++mds_acks_;
  auto& by_key = unsynced_[epoch];
  for (uint64_t k : keys) {
    UnsyncedAcks& u = by_key[k];
    u.last = n;
    ++u.count;
  }
  // Bounded: changes nobody syncs are forgotten past this many files and directories (their
  // loss, if it came, is never reported, as a file nobody fsyncs reports nothing).
  size_t total = 0;
  for (const auto& [e, m] : unsynced_)
    total += m.size();
  if (total > kMaxUnsyncedKeys) {
    if (unsynced_.size() > 1) {
      unsynced_.erase(unsynced_.begin());
    } else {
      // One MDS life: forget what the last quarter of the bound's acknowledgements did not
      // touch (a `repo link` of a million objects otherwise kept a million keys until its
      // sync). What is left is under the bound, so this runs once per quarter of it.
      const uint64_t keep_after = n > kMaxUnsyncedKeys / 4 ? n - kMaxUnsyncedKeys / 4 : 0;
      std::erase_if(by_key, [&](const auto& kv) { return kv.second.last <= keep_after; });
    }
  }
}

bool ClientCore::HasUnsyncedMdsChange(uint64_t fid_seq) {
  std::lock_guard<std::mutex> lock(acks_mu_);
  for (const auto& [epoch, by_key] : unsynced_) {
    if (by_key.count(fid_seq))
      return true;
  }
  return false;
}

uint64_t ClientCore::MdsAcks() {
  std::lock_guard<std::mutex> lock(acks_mu_);
  return mds_acks_;
}

Status ClientCore::CheckMdsSynced(uint64_t epoch, uint64_t acks_before, uint64_t key) {
  std::lock_guard<std::mutex> lock(acks_mu_);
  uint64_t lost = 0;
  for (auto it = unsynced_.begin(); it != unsynced_.end();) {
    auto& by_key = it->second;
    if (it->first != epoch) {
      // Acknowledged by an MDS that lost power before syncing them. Reported to the sync of
      // each file or directory they touched, once, as fsync(2) reports a lost writeback to
      // the descriptors of that file: another thread's sync elsewhere must not consume it.
      auto k = by_key.find(key);
      if (k != by_key.end()) {
        lost += k->second.count;
        by_key.erase(k);
      }
    } else {
      // This sync made every change acknowledged before it durable, whatever it touched.
      std::erase_if(by_key, [&](const auto& kv) { return kv.second.last <= acks_before; });
    }
    it = by_key.empty() ? unsynced_.erase(it) : std::next(it);
  }
  if (lost != 0) {
    return Status::IoError(fmt::format(
        "the MDS lost power after acknowledging {} namespace change(s) of this client that were "
        "not yet synced: they may be lost",
        lost));
  }
  return Status::OK();
}

void ClientCore::DropMdsChannel(const std::shared_ptr<net::RpcChannel>& ch) {
  std::lock_guard<std::mutex> lock(mds_mu_);
  if (mds_ch_ == ch)
    mds_ch_.reset();
}

bool ClientCore::IsSessionLost(const Status& st) {
  // The MDS answers kStale for a request whose session it does not know (expired or lost).
  return st.code() == StatusCode::kStale && st.message().find("session") != std::string::npos;
}

Status ClientCore::OpenSession(uint64_t lost) {
  std::lock_guard<std::mutex> lock(session_mu_);
  if (lost != 0 && session_id_.load() != lost)
    return Status::OK();  // another thread did it
  pb::OpenSessionReq req;
  req.set_client_name(options_.client_name);
  req.set_uid(options_.uid);
  pb::OpenSessionResp resp;
  CIUIC_RETURN_IF_ERROR(MdsCall(net::MsgType::kOpenSession, &req, nullptr, &resp, false));
  session_id_ = resp.session_id();
  if (resp.lease_ms() > 0)
    lease_ms_ = resp.lease_ms();
  if (!resp.cluster_uuid().empty())
    cluster_uuid_ = resp.cluster_uuid();
  if (resp.root().seq() != 0)
    root_ = net::FromPb(resp.root());
  LOG_DEBUG("client: session {} lease {} ms", resp.session_id(), resp.lease_ms());
  return Status::OK();
}

Status ClientCore::MdsCall(net::MsgType type,
                           google::protobuf::Message* req,
                           pb::ReqCtx* ctx,
                           google::protobuf::Message* resp,
                           bool mutation) {
  if (ctx != nullptr) {
    ctx->set_session_id(session_id_.load());
    ctx->set_seq(mutation ? ++seq_ : 0);
    const CallerOverride& who = CurrentCaller();
    ctx->set_uid(who.active ? who.uid : options_.uid);
    ctx->set_gid(who.active ? who.gid : options_.gid);
    ctx->clear_groups();
    for (uint32_t g : who.active ? who.groups : options_.groups)
      ctx->add_groups(g);
  }
  if (mutation)
    ClearAttrCache(type);
  const int64_t deadline = MonoMillis() + options_.ost_retry_ms;
  // A sync makes every mutation acknowledged before it durable, if the same MDS epoch served
  // them; the rest are tracked until a sync.
  const bool syncs =
      type == net::MsgType::kFsyncDir ||
      (type == net::MsgType::kUpdateSize && static_cast<const pb::UpdateSizeReq*>(req)->sync());
  const bool tracked = mutation && !syncs && type != net::MsgType::kLock;
  const uint64_t acks_before = syncs ? MdsAcks() : 0;
  bool reopened = false;
  for (int attempt = 0;; ++attempt) {
    if (shutdown_)
      return Status::Aborted("client shut down");
    Status st;
    uint64_t epoch = 0;
    auto ch = MdsChannel(&epoch);
    if (!ch.ok()) {
      st = ch.status();
    } else {
      st = (*ch)->CallMsg(type, *req, resp, options_.mds_timeout_ms);
      if (st.ok()) {
        KeepCaps(*resp);
        if (syncs) {
          const std::vector<uint64_t> key = FidKeys(*req, *resp);
          return CheckMdsSynced(epoch, acks_before, key.empty() ? 0 : key.front());
        }
        if (tracked)
          NoteMdsAck(epoch, FidKeys(*req, *resp));
        return st;
      }
      if (!(*ch)->connected()) {
        DropMdsChannel(*ch);
      } else if (mutation && ctx != nullptr && st.code() == StatusCode::kUnavailable) {
        // The MDS itself answered "not now" (busy, no OST up yet): the mutation was not applied,
        // and a retry under the same sequence could be answered from the reply cache with this
        // very refusal. Only transport failures (lost connection, timeout) keep the sequence.
        ctx->set_seq(++seq_);
      }
    }
    if (ctx != nullptr && !reopened && IsSessionLost(st)) {
      // The MDS lost our session (lease expired while we were cut off, or an in-memory MDS
      // restarted): open a new one and retry once under it with a fresh sequence.
      reopened = true;
      LOG_WARN("client: MDS lost session {}: {}; opening a new one", session_id_.load(),
               st.ToString());
      CIUIC_RETURN_IF_ERROR(OpenSession(ctx->session_id()));
      ctx->set_session_id(session_id_.load());
      if (mutation)
        ctx->set_seq(++seq_);
      continue;
    }
    LOG_DEBUG("client: MDS call {} failed (attempt {}): {}", static_cast<int>(type), attempt,
              st.ToString());
    if (!st.IsRetryable() || st.code() == StatusCode::kAborted)
      return st;
    if (MonoMillis() >= deadline) {
      return Status::Unavailable(
          fmt::format("MDS ({}) unavailable: {}", cluster_.mds.ToString(), st.ToString()));
    }
    if (!WaitOrStop(std::min(BackoffMs(attempt), std::max<int64_t>(1, deadline - MonoMillis())))) {
      return Status::Aborted("client shut down");
    }
  }
}

void ClientCore::RenewLoop() {
  while (WaitOrStop(std::max<uint32_t>(lease_ms_.load() / 3, 100))) {
    pb::RenewSessionReq req;
    pb::RenewSessionResp resp;
    Status st = Mds(net::MsgType::kRenewSession, &req, &resp, false);
    if (st.ok()) {
      if (resp.lease_ms() > 0)
        lease_ms_ = resp.lease_ms();
      RetryDeferredCloses(/*once=*/false);  // the MDS answers again
    } else if (!shutdown_) {
      LOG_WARN("client: renewing session {} failed: {}", session_id_.load(), st.ToString());
    }
  }
}

// ---------------------------------------------------------------------------------------------
// OST map and routing

Result<std::vector<pb::OstInfo>> ClientCore::RefreshOstMap() {
  pb::GetOstMapReq req;
  pb::GetOstMapResp resp;
  CIUIC_RETURN_IF_ERROR(MdsCall(net::MsgType::kGetOstMap, &req, nullptr, &resp, false));
  std::vector<pb::OstInfo> osts(resp.osts().begin(), resp.osts().end());
  ApplyOstMap(osts);
  {
    std::lock_guard<std::mutex> lock(ost_mu_);
    if (resp.chains_version() >= chains_version_) {
      chains_version_ = resp.chains_version();
      for (const auto& c : resp.chains())
        chains_[c.id()] = c;
    }
  }
  return osts;
}

std::map<uint32_t, pb::Chain> ClientCore::Chains() {
  std::lock_guard<std::mutex> lock(ost_mu_);
  return chains_;
}

void ClientCore::RefreshChainsSoon() {
  {
    std::lock_guard<std::mutex> lock(ost_mu_);
    const int64_t now = MonoMillis();
    if (chains_refreshing_ || now - chains_refreshed_ms_ < 100)
      return;
    chains_refreshing_ = true;
    chains_refreshed_ms_ = now;
  }
  bool queued = ctl_pool_->TrySubmit([this] {
    RefreshOstMap().status().IgnoreError();  // the retry reports what is still wrong
    std::lock_guard<std::mutex> lock(ost_mu_);
    chains_refreshing_ = false;
    chains_refreshed_ms_ = MonoMillis();
  });
  if (!queued) {
    std::lock_guard<std::mutex> lock(ost_mu_);
    chains_refreshing_ = false;
  }
}

bool ClientCore::RouteChain(OstCall* call, uint32_t* member) {
  auto it = chains_.find(call->ost);
  if (it == chains_.end())
    return false;
  const pb::Chain& c = it->second;
  std::vector<uint32_t> serving;
  for (const auto& m : c.members()) {
    if (m.state() == 0)
      serving.push_back(m.ost());
  }
  if (serving.empty())
    serving.push_back(c.members(0).ost());  // the OSS answers what is wrong
  const bool read = call->type == net::MsgType::kRead || call->type == net::MsgType::kObjStat;
  uint32_t pick = serving[0];
  auto route = [&](auto* req) {
    if (read) {
      // Spread the objects of a file over the copies; each retry tries the next one.
      const uint64_t h = std::hash<uint64_t>{}(req->obj().fid().seq() * 31 + req->obj().stripe());
      pick =
          serving[(h + static_cast<uint64_t>(call->attempt) + call->replica_skip) % serving.size()];
    }
    req->set_ost(pick);
    req->set_chain(c.id());
    req->set_chain_version(c.version());
  };
  switch (call->type) {
    case net::MsgType::kRead:
      route(static_cast<pb::ReadReq*>(call->req.get()));
      break;
    case net::MsgType::kWrite:
      route(static_cast<pb::WriteReq*>(call->req.get()));
      break;
    case net::MsgType::kPunch:
      route(static_cast<pb::PunchReq*>(call->req.get()));
      break;
    case net::MsgType::kDestroy:
      route(static_cast<pb::DestroyReq*>(call->req.get()));
      break;
    case net::MsgType::kObjStat:
      route(static_cast<pb::ObjStatReq*>(call->req.get()));
      break;
    case net::MsgType::kSync: {
      auto* s = static_cast<pb::SyncReq*>(call->req.get());
      s->set_ost(pick);
      s->set_chain(c.id());
      s->set_chain_version(c.version());
      break;
    }
    default:
      return false;  // HSM requests never name chains (the MDS refuses replicated files)
  }
  *member = pick;
  return true;
}

void ClientCore::ApplyOstMap(const std::vector<pb::OstInfo>& osts) {
  std::lock_guard<std::mutex> lock(ost_mu_);
  for (const auto& o : osts) {
    if (!o.oss_addr().empty())
      ost_addr_[o.index()] = o.oss_addr();
  }
}

std::string ClientCore::OstName(uint32_t ost) {
  std::lock_guard<std::mutex> lock(ost_mu_);
  if (IsChain(ost)) {
    auto c = chains_.find(ost);
    if (c == chains_.end())
      return fmt::format("chain {} (unknown)", ost - kChainBase);
    std::string members;
    for (const auto& m : c->second.members()) {
      auto a = ost_addr_.find(m.ost());
      members += fmt::format("{}OST {}{}{}", members.empty() ? "" : ", ", m.ost(),
                             a == ost_addr_.end() ? "" : " " + a->second,
                             m.state() == 0 ? "" : " (offline)");
    }
    return fmt::format("chain {} ({})", ost - kChainBase, members);
  }
  auto it = ost_addr_.find(ost);
  return it == ost_addr_.end() ? fmt::format("OST {} (address unknown)", ost)
                               : fmt::format("OST {} ({})", ost, it->second);
}

void ClientCore::OstCallAsync(std::shared_ptr<OstCall> call) {
  if (shutdown_) {
    Fail(std::move(call), Status::Aborted("client shut down"));
    return;
  }
  Dispatch(std::move(call));
}

void ClientCore::Dispatch(std::shared_ptr<OstCall> call) {
  std::shared_ptr<net::RpcChannel> ch;
  std::string addr;
  {
    std::unique_lock<std::mutex> lock(ost_mu_);
    if (shutdown_) {
      lock.unlock();
      Fail(std::move(call), Status::Aborted("client shut down"));
      return;
    }
    uint32_t member = call->ost;
    const bool chain_known = !IsChain(call->ost) || RouteChain(call.get(), &member);
    auto it = chain_known ? ost_addr_.find(member) : ost_addr_.end();
    if (it == ost_addr_.end()) {
      // Unknown OST or chain: refresh the map (blocking, so on the pool), then route again.
      map_waiting_.push_back(std::move(call));
      if (map_refreshing_)
        return;
      map_refreshing_ = true;
      lock.unlock();
      bool queued = ctl_pool_->TrySubmit([this] {
        auto r = RefreshOstMap();
        std::vector<std::shared_ptr<OstCall>> calls;
        {
          std::lock_guard<std::mutex> l(ost_mu_);
          map_refreshing_ = false;
          calls.swap(map_waiting_);
        }
        auto known = [this](const std::shared_ptr<OstCall>& c) {
          std::lock_guard<std::mutex> l(ost_mu_);
          uint32_t m = c->ost;
          return (!IsChain(c->ost) || RouteChain(c.get(), &m)) && ost_addr_.count(m) > 0;
        };
        // A call that joined a refresh already under way may name what that map predates (a
        // chain made for the layout it just got): one more refresh before it fails.
        bool again = false;
        for (auto& c : calls)
          again |= !known(c);
        if (again && r.ok())
          r = RefreshOstMap();
        for (auto& c : calls) {
          if (known(c)) {
            Dispatch(c);
          } else {
            Fail(c, r.ok() ? Status::NotFound(fmt::format(
                                 "{} is not in the OST map",
                                 IsChain(c->ost) ? fmt::format("chain {}", c->ost - kChainBase)
                                                 : fmt::format("OST {}", c->ost)))
                           : r.status());
          }
        }
      });
      if (!queued) {
        std::vector<std::shared_ptr<OstCall>> calls;
        {
          std::lock_guard<std::mutex> l(ost_mu_);
          map_refreshing_ = false;
          calls.swap(map_waiting_);
        }
        for (auto& c : calls)
          Fail(c, Status::Aborted("client shut down"));
      }
      return;
    }
    OssConn& conn = oss_[it->second];
    if (conn.ch && conn.ch->connected()) {
      ch = conn.ch;
      addr = it->second;
    } else {
      conn.ch.reset();
      conn.waiting.push_back(std::move(call));
      if (conn.connecting)
        return;
      conn.connecting = true;
      addr = it->second;
      lock.unlock();
      if (!ctl_pool_->TrySubmit([this, addr] { ConnectOss(addr); })) {
        std::vector<std::shared_ptr<OstCall>> calls;
        {
          std::lock_guard<std::mutex> l(ost_mu_);
          OssConn& c = oss_[addr];
          c.connecting = false;
          calls.swap(c.waiting);
        }
        for (auto& c : calls)
          Fail(c, Status::Aborted("client shut down"));
      }
      return;
    }
  }
  OstCall* raw = call.get();
  AttachCap(raw);
  // A read the OSS may place in shared memory is marked (call->shm) for SendOne and batches.
  if (raw->type == net::MsgType::kRead && !raw->in_dest.empty() && shm_reads_)
    PrepareShmRead(addr, raw);
  else if (raw->type == net::MsgType::kWrite && shm_reads_)
    PrepareShmWrite(addr, raw);
  const int timeout = raw->timeout_ms > 0 ? raw->timeout_ms : options_.io_timeout_ms;
  if (batch_reads_ && Batchable(*raw)) {
    QueueRead(std::move(ch), std::move(call), timeout);
    return;
  }
  SendOne(std::move(ch), std::move(call), timeout);
}

void ClientCore::SendOne(std::shared_ptr<net::RpcChannel> ch,
                         std::shared_ptr<OstCall> call,
                         int timeout) {
  OstCall* raw = call.get();
  // A read placed in shared memory offers no destination: the reply carries no blocks. A write
  // taken from shared memory sends none.
  const std::span<uint8_t> in_dest = raw->shm ? std::span<uint8_t>() : raw->in_dest;
  ch->CallAsync(
      raw->type, *raw->req,
      raw->shm && raw->type == net::MsgType::kWrite ? std::vector<net::ConstSpan>() : raw->out_data,
      in_dest,
      [this, call = std::move(call), ch](Result<net::Reply> r) mutable {
        OnCallDone(std::move(call), std::move(ch), std::move(r));
      },
      timeout);
}

// ---------------------------------------------------------------------------------------------
// Read batches

namespace {
// Entries of one ReadBatch (the OSS takes at most 64), and the largest read over TCP that is
// batched: a reply up to this size is read through the connection's buffer anyway (one copy
// either way), where a larger one goes straight into its destination when sent alone.
constexpr size_t kMaxBatchReads = 32;
constexpr size_t kMaxBatchedTcpRead = 16 << 10;
}  // namespace

bool ClientCore::Batchable(const OstCall& call) const {
  if (call.type != net::MsgType::kRead)
    return false;
  return call.shm || (!call.in_dest.empty() && call.in_dest.size() <= kMaxBatchedTcpRead);
}

void ClientCore::QueueRead(std::shared_ptr<net::RpcChannel> ch,
                           std::shared_ptr<OstCall> call,
                           int timeout) {
  ReadQueue full;
  bool post = false;
  {
    std::lock_guard<std::mutex> lock(rq_mu_);
    if (shutdown_.load()) {
      // Shutdown drains the queues once; nothing may join them after.
    } else if (no_batch_.count(ch.get()) != 0) {
      // Its OSS does not know ReadBatch: sent alone below.
    } else {
      ReadQueue& q = rq_[ch.get()];
      post = q.calls.empty();
      q.timeout_ms = q.calls.empty() ? timeout : std::min(q.timeout_ms, timeout);
      q.calls.push_back(std::move(call));
      if (q.calls.size() >= kMaxBatchReads) {
        full = std::move(q);
        rq_.erase(ch.get());
        post = false;
      }
    }
  }
  if (call) {  // not queued (moved from when it was)
    if (shutdown_.load())
      return Fail(std::move(call), Status::Aborted("client shut down"));
    SendOne(std::move(ch), std::move(call), timeout);
    return;
  }
  if (!full.calls.empty()) {
    SendReads(std::move(ch), std::move(full));
    return;
  }
  if (post)
    loop_->Post([this, ch = std::move(ch)] { FlushReads(ch); });
}

void ClientCore::FlushReads(const std::shared_ptr<net::RpcChannel>& ch) {
  ReadQueue q;
  {
    std::lock_guard<std::mutex> lock(rq_mu_);
    auto it = rq_.find(ch.get());
    if (it == rq_.end())
      return;  // sent full meanwhile
    q = std::move(it->second);
    rq_.erase(it);
  }
  SendReads(ch, std::move(q));
}

void ClientCore::SendReads(std::shared_ptr<net::RpcChannel> ch, ReadQueue q) {
  if (q.calls.size() == 1) {
    SendOne(std::move(ch), std::move(q.calls.front()), q.timeout_ms);
    return;
  }
  pb::ReadBatchReq req;
  for (const auto& c : q.calls)
    *req.add_reads() = static_cast<const pb::ReadReq&>(*c->req);
  auto calls = std::make_shared<std::vector<std::shared_ptr<OstCall>>>(std::move(q.calls));
  ch->CallAsync(
      net::MsgType::kReadBatch, req, {}, {},
      [this, ch, calls](Result<net::Reply> r) mutable {
        auto fail_all = [&](const Status& st) {
          for (auto& c : *calls)
            OnCallDone(std::move(c), ch, st);
        };
        if (!r.ok()) {
          if (r.status().code() == StatusCode::kNotSupported) {
            // An OSS without ReadBatch: this channel's reads go one per frame from now on.
            {
              std::lock_guard<std::mutex> lock(rq_mu_);
              no_batch_.insert(ch.get());
            }
            for (auto& c : *calls)
              Dispatch(std::move(c));
            return;
          }
          return fail_all(r.status());
        }
        pb::ReadBatchResp resp;
        Status st = net::Parse(r->body, &resp, "ReadBatchResp");
        if (st.ok() && resp.reads_size() != static_cast<int>(calls->size())) {
          st = Status::Corruption(fmt::format("read batch of {} entries answered with {}",
                                              calls->size(), resp.reads_size()));
        }
        if (!st.ok())
          return fail_all(st);
        uint64_t off = 0;
        for (size_t i = 0; i < calls->size(); ++i) {
          auto& c = (*calls)[i];
          pb::ReadBatchEntry* e = resp.mutable_reads(static_cast<int>(i));
          if (e->has_error()) {
            OnCallDone(std::move(c), ch, net::FromPb(e->error()));
            continue;
          }
          net::Reply one;
          one.body = std::move(*e->mutable_resp());
          const uint64_t len = e->data_len();
          if (len > 0) {
            // Over TCP: its blocks into its destination (Batchable: it offered one).
            if (c->shm || off + len > r->data_len || len > c->in_dest.size()) {
              OnCallDone(std::move(c), ch,
                         Status::Corruption(fmt::format(
                             "read batch entry {} carries {} bytes at {} of a {}-byte data "
                             "segment for a {}-byte destination",
                             i, len, off, r->data_len, c->shm ? 0 : c->in_dest.size())));
              off += len;
              continue;
            }
            std::memcpy(c->in_dest.data(), r->data.data() + off, len);
            one.data_len = len;
            one.data_in_dest = true;
            off += len;
          }
          OnCallDone(std::move(c), ch, std::move(one));
        }
      },
      q.timeout_ms);
}

void ClientCore::ConnectOss(std::string addr) {
  Status st;
  std::shared_ptr<net::RpcChannel> ch;
  auto hp = HostPort::Parse(addr);
  if (!hp.ok()) {
    st = hp.status();
  } else {
    auto r = net::RpcChannel::Connect(loop_.get(), *hp, chan_opts_);
    if (r.ok()) {
      ch = *r;
    } else {
      st = r.status();
    }
  }
  std::vector<std::shared_ptr<OstCall>> calls;
  {
    std::lock_guard<std::mutex> lock(ost_mu_);
    OssConn& conn = oss_[addr];
    conn.connecting = false;
    if (ch)
      conn.ch = ch;
    calls.swap(conn.waiting);
  }
  if (ch) {
    for (auto& c : calls)
      Dispatch(c);
    return;
  }
  // The OSS may have moved: a fresh map routes the retries (best effort).
  RefreshOstMap().status().IgnoreError();  // failures only delay the retry below
  for (auto& c : calls)
    RetryOrFail(c, st);
}

void ClientCore::OnCallDone(std::shared_ptr<OstCall> call,
                            std::shared_ptr<net::RpcChannel> ch,
                            Result<net::Reply> r) {
  if (r.ok()) {
    auto done = std::move(call->done);
    call->done = nullptr;
    done(std::move(r));
    return;
  }
  Status st = std::move(r).status();
  if (call->shm && st.code() == StatusCode::kNotFound) {
    // The OSS does not know the region (it restarted, or dropped it): read over TCP now and
    // register again next time.
    std::string addr;
    {
      std::lock_guard<std::mutex> lock(ost_mu_);
      for (auto& [a, conn] : oss_) {
        if (conn.ch == ch)
          addr = a;
      }
    }
    LOG_INFO("client: OSS {} does not know this client's shared memory ({}); reading over TCP",
             addr, st.ToString());
    if (!addr.empty())
      ForgetShm(addr);
    call->no_shm = true;
    Dispatch(std::move(call));
    return;
  }
  if (st.code() == StatusCode::kPermissionDenied &&
      st.message().find("capability") != std::string::npos && !call->cap_refreshed) {
    // Expired, or never known here: ask the MDS again (blocking, so on the pool), once.
    call->cap_refreshed = true;
    const Fid fid = CallFid(*call);
    auto c = call;
    if (fid.valid() && ctl_pool_->TrySubmit([this, c, fid] {
          pb::GetAttrReq req;
          net::ToPb(fid, req.mutable_fid());
          pb::GetAttrResp resp;
          Status gs = Mds(net::MsgType::kGetAttr, &req, &resp, false);
          if (!gs.ok())
            LOG_DEBUG("client: refreshing the capability of {} failed: {}", fid.ToString(),
                      gs.ToString());
          Dispatch(c);
        })) {
      return;
    }
  }
  if (!ch->connected()) {
    std::lock_guard<std::mutex> lock(ost_mu_);
    for (auto& [addr, conn] : oss_) {
      if (conn.ch == ch)
        conn.ch.reset();
    }
  }
  RetryOrFail(std::move(call), std::move(st));
}

void ClientCore::KeepCaps(const google::protobuf::Message& resp) {
  const auto* d = resp.GetDescriptor();
  const auto* refl = resp.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const auto* f = d->field(i);
    if (f->is_repeated() || f->message_type() != pb::Layout::descriptor() ||
        !refl->HasField(resp, f)) {
      continue;
    }
    const auto& layout = static_cast<const pb::Layout&>(refl->GetMessage(resp, f));
    if (!layout.has_cap() || layout.cap().mac().empty())
      continue;
    std::lock_guard<std::mutex> lock(caps_mu_);
    if (caps_.size() >= 65536)
      caps_.clear();  // bounded; a dropped capability is fetched again when an OSS asks
    caps_[net::FromPb(layout.cap().fid())] = layout.cap();
  }
}

Fid ClientCore::CallFid(const OstCall& call) {
  switch (call.type) {
    case net::MsgType::kRead:
      return net::FromPb(static_cast<const pb::ReadReq&>(*call.req).obj().fid());
    case net::MsgType::kWrite:
      return net::FromPb(static_cast<const pb::WriteReq&>(*call.req).obj().fid());
    case net::MsgType::kPunch:
      return net::FromPb(static_cast<const pb::PunchReq&>(*call.req).obj().fid());
    case net::MsgType::kDestroy:
      return net::FromPb(static_cast<const pb::DestroyReq&>(*call.req).obj().fid());
    case net::MsgType::kObjStat:
      return net::FromPb(static_cast<const pb::ObjStatReq&>(*call.req).obj().fid());
    case net::MsgType::kHsmObj:
      return net::FromPb(static_cast<const pb::HsmObjReq&>(*call.req).obj().fid());
    case net::MsgType::kSync: {
      const auto& s = static_cast<const pb::SyncReq&>(*call.req);
      return s.objs_size() > 0 ? net::FromPb(s.objs(0).fid()) : Fid{};
    }
    default:
      return Fid{};
  }
}

void ClientCore::AttachCap(OstCall* call) {
  std::lock_guard<std::mutex> lock(caps_mu_);
  if (caps_.empty())
    return;  // the admin key needs none (and gets none)
  auto find = [&](const pb::ObjectId& o) -> const pb::Capability* {
    auto it = caps_.find(net::FromPb(o.fid()));
    return it == caps_.end() ? nullptr : &it->second;
  };
  auto set = [&](auto* req) {
    if (const pb::Capability* c = find(req->obj()))
      *req->mutable_cap() = *c;
  };
  switch (call->type) {
    case net::MsgType::kRead:
      return set(static_cast<pb::ReadReq*>(call->req.get()));
    case net::MsgType::kWrite:
      return set(static_cast<pb::WriteReq*>(call->req.get()));
    case net::MsgType::kPunch:
      return set(static_cast<pb::PunchReq*>(call->req.get()));
    case net::MsgType::kDestroy:
      return set(static_cast<pb::DestroyReq*>(call->req.get()));
    case net::MsgType::kObjStat:
      return set(static_cast<pb::ObjStatReq*>(call->req.get()));
    case net::MsgType::kHsmObj:
      return set(static_cast<pb::HsmObjReq*>(call->req.get()));
    case net::MsgType::kSync: {
      auto* s = static_cast<pb::SyncReq*>(call->req.get());
      s->clear_caps();
      std::set<Fid> seen;
      for (const auto& o : s->objs()) {
        const pb::Capability* c = find(o);
        if (c != nullptr && seen.insert(net::FromPb(o.fid())).second)
          *s->add_caps() = *c;
      }
      return;
    }
    default:
      return;
  }
}

void ClientCore::RetryOrFail(std::shared_ptr<OstCall> call, Status st) {
  // A copy's IO error (a failing disk, a power cut the OSS has not died of yet) is retried on
  // the chain as the MDS publishes it next: another copy may serve, and a member that lost
  // writes leaves the chain. The error stands if it outlasts the retry window.
  const bool retryable = st.code() == StatusCode::kUnavailable ||
                         st.code() == StatusCode::kTimedOut ||
                         (IsChain(call->ost) && st.code() == StatusCode::kIoError);
  if (!retryable || shutdown_) {
    Fail(std::move(call),
         shutdown_ ? Status::Aborted("client shut down") : st.WithContext(OstName(call->ost)));
    return;
  }
  const int64_t now = MonoMillis();
  if (call->attempt == 0)
    call->deadline_ms = now + (call->retry_ms > 0 ? call->retry_ms : options_.ost_retry_ms);
  call->last_error = st;
  if (now >= call->deadline_ms) {
    if (st.code() == StatusCode::kIoError) {
      Fail(call, st.WithContext(OstName(call->ost)));
      return;
    }
    Fail(call,
         Status::Unavailable(fmt::format("{} unavailable: {}", OstName(call->ost), st.ToString())));
    return;
  }
  int64_t delay = std::min(BackoffMs(call->attempt), call->deadline_ms - now);
  if (IsChain(call->ost)) {
    // The chain may have changed (a member down, a new version): fetch it before the retry. A
    // read goes to the next copy at once the first time.
    RefreshChainsSoon();
    if (call->attempt == 0 &&
        (call->type == net::MsgType::kRead || call->type == net::MsgType::kObjStat)) {
      delay = 0;
    }
  }
  ++call->attempt;
  LOG_DEBUG("client: {} call {} failed ({}), retry {} in {} ms", OstName(call->ost),
            static_cast<int>(call->type), st.ToString(), call->attempt, delay);
  auto c = call;
  if (!timers_->After(delay, [this, c] { OstCallAsync(c); })) {
    Fail(std::move(call), Status::Aborted("client shut down"));
  }
}

void ClientCore::Fail(std::shared_ptr<OstCall> call, Status st) {
  if (!call->done)
    return;
  auto done = std::move(call->done);
  call->done = nullptr;
  done(std::move(st));
}

Status ClientCore::OstCallAll(std::vector<std::shared_ptr<OstCall>> calls) {
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    size_t left;
    Status first;
  };
  if (calls.empty())
    return Status::OK();
  auto w = std::make_shared<Wait>();
  w->left = calls.size();
  for (auto& c : calls) {
    auto user = std::move(c->done);
    c->done = [w, user = std::move(user)](Result<net::Reply> r) {
      Status st = r.ok() ? Status::OK() : r.status();
      if (user)
        user(std::move(r));
      std::lock_guard<std::mutex> lock(w->mu);
      if (!st.ok() && w->first.ok())
        w->first = st;
      if (--w->left == 0)
        w->cv.notify_all();
    };
  }
  for (auto& c : calls)
    OstCallAsync(c);
  std::unique_lock<std::mutex> lock(w->mu);
  w->cv.wait(lock, [&] { return w->left == 0; });
  return w->first;
}

// ---------------------------------------------------------------------------------------------
// Nodes and the directory cache

std::shared_ptr<Node> ClientCore::GetNode(const Fid& fid) {
  std::lock_guard<std::mutex> lock(nodes_mu_);
  auto& weak = nodes_[fid];
  auto node = weak.lock();
  if (!node) {
    node = std::make_shared<Node>(fid);
    weak = node;
  }
  if (nodes_.size() > 1024) {
    for (auto it = nodes_.begin(); it != nodes_.end();) {
      it = it->second.expired() ? nodes_.erase(it) : std::next(it);
    }
  }
  return node;
}

std::shared_ptr<Node> ClientCore::FindNode(const Fid& fid) {
  std::lock_guard<std::mutex> lock(nodes_mu_);
  auto it = nodes_.find(fid);
  return it == nodes_.end() ? nullptr : it->second.lock();
}

Fid ClientCore::root() const {
  std::lock_guard<std::mutex> lock(session_mu_);
  return root_;
}

bool ClientCore::LookupDirCache(const std::string& path, Fid* fid) {
  if (options_.dentry_cache_ms <= 0)
    return false;
  std::lock_guard<std::mutex> lock(dir_mu_);
  return TakeFresh(dir_cache_, path, fid);
}

void ClientCore::PutDirCache(const std::string& path, const Fid& fid) {
  if (options_.dentry_cache_ms <= 0)
    return;
  std::lock_guard<std::mutex> lock(dir_mu_);
  if (dir_cache_.size() >= 4096)
    dir_cache_.clear();
  dir_cache_[path] = {fid, MonoMillis() + options_.dentry_cache_ms};
}

bool ClientCore::LookupAttrCache(const std::string& key, FileStat* st) {
  if (options_.attr_cache_ms <= 0)
    return false;
  std::lock_guard<std::mutex> lock(attr_mu_);
  return TakeFresh(attr_cache_, key, st);
}

uint64_t ClientCore::AttrCacheGen() {
  std::lock_guard<std::mutex> lock(attr_mu_);
  return attr_gen_;
}

void ClientCore::PutAttrCache(const std::string& key, const FileStat& st, uint64_t gen) {
  if (options_.attr_cache_ms <= 0)
    return;
  std::lock_guard<std::mutex> lock(attr_mu_);
  if (gen != attr_gen_)
    return;
  if (attr_cache_.size() >= 16384)
    attr_cache_.clear();
  attr_cache_[key] = {st, MonoMillis() + options_.attr_cache_ms};
}

void ClientCore::ClearAttrCache(net::MsgType type) {
  if (options_.attr_cache_ms <= 0 && options_.dir_attr_cache_ms <= 0)
    return;
  bool dirs = true;
  switch (type) {
    case net::MsgType::kClose:
    case net::MsgType::kUpdateSize:
    case net::MsgType::kInstantiate:
    case net::MsgType::kTruncateDone:
    case net::MsgType::kFallocate:
    case net::MsgType::kLock:
    case net::MsgType::kFsyncDir:
      dirs = false;  // a regular file's data, size or locks, or a sync: no directory changes
      break;
    default:
      break;
  }
  std::lock_guard<std::mutex> lock(attr_mu_);
  ++attr_gen_;
  attr_cache_.clear();
  if (dirs) {
    ++dir_gen_;
    dir_attr_.clear();
  }
}

uint64_t ClientCore::DirAttrGen() {
  std::lock_guard<std::mutex> lock(attr_mu_);
  return dir_gen_;
}

bool ClientCore::LookupDirAttr(uint64_t seq, FileStat* st) {
  if (options_.dir_attr_cache_ms <= 0)
    return false;
  std::lock_guard<std::mutex> lock(attr_mu_);
  return TakeFresh(dir_attr_, seq, st);
}

void ClientCore::PutDirAttr(const FileStat& st, uint64_t gen) {
  if (options_.dir_attr_cache_ms <= 0 || !st.is_dir())
    return;
  std::lock_guard<std::mutex> lock(attr_mu_);
  // Our own mutation bumped the generation once; any other bump means a mutation raced with it.
  if (dir_gen_ != gen + 1)
    return;
  dir_attr_[st.ino] = {st, MonoMillis() + options_.dir_attr_cache_ms};
}

void ClientCore::ClearDirCache() {
  std::lock_guard<std::mutex> lock(dir_mu_);
  dir_cache_.clear();
}

}  // namespace ciuic::client
