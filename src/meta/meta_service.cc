// MetaService core: opening, the writer thread and group commit, sequences, sessions' in-memory
// state and the reply cache. The operations themselves live in ops/*.cc.
#include "meta/meta_service.h"

#include <sys/stat.h>

#include <chrono>
#include <exception>
#include <future>
#include <type_traits>

#include <fmt/format.h>

#include "common/logging.h"
#include "common/time_util.h"
#include "meta/ops/op_util.h"
#include "meta/txn.h"
#include "net/capability.h"

namespace ciuic::meta {

// One queued unit of work for the writer thread.
class Job {
 public:
  virtual ~Job() = default;
  virtual uint64_t session_id() const { return 0; }
  virtual uint64_t seq() const { return 0; }
  virtual Status Apply(MetaService* svc, Txn& t) = 0;
  virtual std::string SerializeResp() const { return {}; }
  virtual void RestoreResp(const std::string& body) { (void)body; }
  // The mutation may ask for a synced WAL write (fsync): it then always goes to the writer
  // thread, never inline on a network thread.
  virtual bool may_sync() const { return false; }
  // Delivers the outcome; called exactly once, on the thread that ran its group (the writer,
  // or the submitting thread for a mutation run inline or refused).
  virtual void Finish(Status st) = 0;
};

template <typename Req>
concept HasCtx = requires(const Req& r) {
  r.ctx().session_id();
};

template <typename Req, typename Resp>
class TypedJob : public Job {
 public:
  TypedJob(Req req, Done<Resp> done) : req_(std::move(req)), done_(std::move(done)) {}
  uint64_t session_id() const override {
    if constexpr (HasCtx<Req>) {
      return req_.ctx().session_id();
    } else {
      return 0;
    }
  }
  uint64_t seq() const override {
    if constexpr (HasCtx<Req>) {
      return req_.ctx().seq();
    } else {
      return 0;
    }
  }
  bool may_sync() const override {
    if constexpr (std::is_same_v<Req, pb::FsyncDirReq> || std::is_same_v<Req, pb::HsmEndReq>) {
      return true;  // HsmEnd of a release is synced (ops/hsm.cc)
    } else if constexpr (requires { req_.sync(); }) {
      return req_.sync();
    } else {
      return false;
    }
  }
  Status Apply(MetaService* svc, Txn& t) override {
    resp_.Clear();
    if constexpr (HasCtx<Req>) {
      // A subtree key's FIDs are checked here, on the thread that applies the mutation, so no
      // rename can move a checked directory out between the check and the change.
      CIUIC_RETURN_IF_ERROR(svc->CheckReach(t, req_));
    }
    return svc->Apply(t, req_, &resp_);
  }
  std::string SerializeResp() const override { return resp_.SerializeAsString(); }
  void RestoreResp(const std::string& body) override {
    resp_.Clear();
    if (!resp_.ParseFromString(body))
      resp_.Clear();
  }
  void Finish(Status st) override {
    if (st.ok()) {
      done_(std::move(resp_));
    } else {
      done_(std::move(st));
    }
  }

 private:
  Req req_;
  Resp resp_;
  Done<Resp> done_;
};

class TickJob : public Job {
 public:
  explicit TickJob(std::function<void(Status)> done) : done_(std::move(done)) {}
  Status Apply(MetaService* svc, Txn& t) override { return svc->ApplyTick(t); }
  void Finish(Status st) override {
    if (!st.ok())
      LOG_ERROR("mds: periodic lease/heartbeat check failed: {}", st.ToString());
    if (done_)
      done_(std::move(st));
  }

 private:
  std::function<void(Status)> done_;
};

namespace {
constexpr uint64_t kSequenceRange = 1024;
}  // namespace

MetaService::MetaService(std::unique_ptr<KvStore> kv, MetaOptions options)
    : kv_(std::move(kv)),
      options_(std::move(options)),
      hasher_(options_.test_name_hash_mask),
      locks_(LockTable::Limits{options_.max_locks_per_file, options_.max_locks_per_session}),
      heat_(options_.heat_half_life_ms, options_.heat_max_files) {}

Result<std::unique_ptr<MetaService>> MetaService::Open(std::unique_ptr<KvStore> kv,
                                                       MetaOptions options) {
  if (options.max_queue == 0 || options.max_group == 0 || options.tick_ms == 0) {
    return Status::InvalidArgument("MetaOptions: queue, group and tick must be non-zero");
  }
  std::unique_ptr<MetaService> svc(new MetaService(std::move(kv), std::move(options)));
  CIUIC_RETURN_IF_ERROR(svc->Load());
  svc->writer_ = std::thread([s = svc.get()] { s->WriterLoop(); });
  return svc;
}

MetaService::~MetaService() {
  Stop();
}

void MetaService::Stop() {
  std::call_once(stop_once_, [this] {
    {
      std::lock_guard lock(q_mu_);
      stopping_ = true;
    }
    q_cv_.notify_all();
    if (writer_.joinable())
      writer_.join();
  });
}

int64_t MetaService::NowMs() const {
  return MonoMillis() + clock_offset_ms_.load();
}

int64_t MetaService::WallMs() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
             .count() +
         clock_offset_ms_.load();
}

Status MetaService::LoadSequence(Sequence* seq, uint64_t first) {
  std::string v;
  Status st = kv_->Get(Cf::kSystem, seq->key, &v);
  if (st.code() == StatusCode::kNotFound) {
    seq->next = seq->hwm = first;
    return Status::OK();
  }
  CIUIC_RETURN_IF_ERROR(st);
  if (v.size() != 8)
    return Status::Corruption(fmt::format("bad counter {}", seq->key));
  seq->next = seq->hwm = std::max(ReadU64(v.data()), first);
  return Status::OK();
}

uint64_t MetaService::Allocate(Txn& txn, Sequence* seq) {
  const uint64_t v = seq->next++;
  if (v >= seq->hwm) {
    // Persist a new high-water mark with the mutation that uses the value: after a crash the
    // counter resumes above every value that any committed mutation used.
    const uint64_t old = seq->hwm;
    seq->hwm = v + kSequenceRange;
    std::string enc;
    AppendU64(&enc, seq->hwm);
    txn.Put(Cf::kSystem, std::string(seq->key), std::move(enc));
    txn.OnAbort([seq, old] { seq->hwm = old; });
  }
  return v;
}

Fid MetaService::NewFid(Txn& txn) {
  return Fid{Allocate(txn, &fid_seq_), options_.mds_index, 0};
}

Status MetaService::Load() {
  CIUIC_RETURN_IF_ERROR(LoadSequence(&fid_seq_, kRootFid.seq + 1));
  CIUIC_RETURN_IF_ERROR(LoadSequence(&task_seq_, 1));
  CIUIC_RETURN_IF_ERROR(LoadSequence(&session_seq_, 1));
  CIUIC_RETURN_IF_ERROR(LoadSequence(&open_seq_, 1));
  CIUIC_RETURN_IF_ERROR(LoadSequence(&client_key_seq_, net::kFirstClientKeyId));
  CIUIC_RETURN_IF_ERROR(LoadClientKeys());

  KvReader r(kv_.get());
  int64_t opens = 0;
  CIUIC_RETURN_IF_ERROR(r.Scan(Cf::kSessions, "O", "P", [&](std::string_view, std::string_view) {
    ++opens;
    return true;
  }));
  open_files_.store(opens);
  pb::InodeRecord root;
  Status st = GetInode(r, kRootFid, &root);
  if (st.code() == StatusCode::kNotFound) {
    Txn t(kv_.get());
    t.BeginMutation();
    const Timespec now = NowTimespec();
    pb::Attr* a = root.mutable_attr();
    net::ToPb(kRootFid, a->mutable_fid());
    a->set_mode(S_IFDIR | 0755);
    a->set_nlink(2);
    for (auto* ts :
         {a->mutable_atime(), a->mutable_mtime(), a->mutable_ctime(), a->mutable_btime()}) {
      SetTs(ts, now);
    }
    net::ToPb(kRootFid, root.mutable_parent());
    PutInode(t, root);
    CIUIC_RETURN_IF_ERROR(AdjustInodeCount(t, 1));
    t.EndMutation(true);
    CIUIC_RETURN_IF_ERROR(kv_->Write(t.TakeBatch(), true));
    LOG_INFO("mds: created the root directory");
  } else {
    CIUIC_RETURN_IF_ERROR(st);
  }

  Status parse = Status::OK();
  CIUIC_RETURN_IF_ERROR(r.Scan(Cf::kSystem, kOstPrefix, PrefixEnd(std::string(kOstPrefix)),
                               [&](std::string_view, std::string_view v) {
                                 pb::OstInfo info;
                                 if (!info.ParseFromArray(v.data(), static_cast<int>(v.size()))) {
                                   parse = Status::Corruption("bad OST record");
                                   return false;
                                 }
                                 osts_.Load(info);
                                 return true;
                               }));
  CIUIC_RETURN_IF_ERROR(parse);
  CIUIC_RETURN_IF_ERROR(r.Scan(Cf::kSystem, kChainPrefix, PrefixEnd(std::string(kChainPrefix)),
                               [&](std::string_view, std::string_view v) {
                                 pb::Chain c;
                                 if (!c.ParseFromArray(v.data(), static_cast<int>(v.size())) ||
                                     c.id() < kChainBase || c.members_size() == 0) {
                                   parse = Status::Corruption("bad chain record");
                                   return false;
                                 }
                                 osts_.LoadChain(c);
                                 return true;
                               }));
  CIUIC_RETURN_IF_ERROR(parse);
  CIUIC_RETURN_IF_ERROR(
      r.Scan(Cf::kSystem, kRepoExportPrefix, PrefixEnd(std::string(kRepoExportPrefix)),
             [&](std::string_view k, std::string_view) {
               if (k.size() == kRepoExportPrefix.size() + kFidKeyLen)
                 export_dirs_.insert(ReadFid(k.data() + kRepoExportPrefix.size()));
               return true;
             }));

  // Sessions of the previous run get a fresh lease: their clients may still be alive.
  const int64_t now = NowMs();
  CIUIC_RETURN_IF_ERROR(r.Scan(Cf::kSessions, "S", "T", [&](std::string_view, std::string_view v) {
    pb::SessionRecord s;
    if (!s.ParseFromArray(v.data(), static_cast<int>(v.size()))) {
      parse = Status::Corruption("bad session record");
      return false;
    }
    SessionState& state = sessions_[s.session_id()];
    state.client_name = s.client_name();
    state.key_id = s.key_id();
    state.expires_ms = now + options_.lease_ms;
    ++sessions_per_key_[s.key_id()];
    return true;
  }));
  CIUIC_RETURN_IF_ERROR(parse);
  // Open records ("O" + session id + open id), counted against their session's cap.
  CIUIC_RETURN_IF_ERROR(r.Scan(Cf::kSessions, "O", "P", [&](std::string_view k, std::string_view) {
    if (k.size() == 17) {
      auto it = sessions_.find(ReadU64(k.data() + 1));
      if (it != sessions_.end())
        ++it->second.opens;
    }
    return true;
  }));

  // Orphans nobody has open any more (their last close raced a crash) are destroyed now.
  std::vector<Fid> orphans;
  CIUIC_RETURN_IF_ERROR(r.Scan(Cf::kSystem, kOrphanPrefix, PrefixEnd(std::string(kOrphanPrefix)),
                               [&](std::string_view k, std::string_view) {
                                 if (k.size() == kOrphanPrefix.size() + kFidKeyLen) {
                                   orphans.push_back(ReadFid(k.data() + kOrphanPrefix.size()));
                                 }
                                 return true;
                               }));
  if (!orphans.empty()) {
    Txn t(kv_.get());
    t.BeginMutation();
    for (const Fid& f : orphans) {
      pb::InodeRecord rec;
      Status gs = GetInode(t, f, &rec);
      if (gs.code() == StatusCode::kNotFound) {
        t.Delete(Cf::kSystem, OrphanKey(f));
        continue;
      }
      CIUIC_RETURN_IF_ERROR(gs);
      if (rec.open_count() == 0)
        CIUIC_RETURN_IF_ERROR(DestroyInode(t, rec));
    }
    t.EndMutation(true);
    if (!t.empty())
      CIUIC_RETURN_IF_ERROR(kv_->Write(t.TakeBatch(), false));
    t.RunCommitHooks();
  }
  return Status::OK();
}

bool MetaService::Enqueue(std::unique_ptr<Job> job) {
  std::unique_lock lock(q_mu_);
  if (stopping_ || queue_.size() >= options_.max_queue) {
    lock.unlock();
    job->Finish(Status::Unavailable("MDS busy: mutation queue full or stopping"));
    return false;
  }
  if (options_.inline_mutations && queue_.empty() && !group_running_ && !job->may_sync()) {
    // Nothing queued and no group running: apply and commit it here, on the submitting (network)
    // thread, rather than wake the writer thread and have it hand the reply back (two context
    // switches per mutation). Under load mutations queue up behind this one and the writer
    // commits them as a group, as before. Synced (fsync) mutations always go to the writer.
    group_running_ = true;
    lock.unlock();
    std::deque<std::unique_ptr<Job>> one;
    one.push_back(std::move(job));
    RunGroup(one);
    lock.lock();
    group_running_ = false;
    // Always: the writer may be waiting for this group to end before its periodic check. With
    // the notify only for a non-empty queue, a writer that woke for its tick during an inline
    // mutation slept on while every later mutation also ran inline: no tick, so no OST was
    // marked down and no chain member caught up, until a mutation happened to queue.
    q_cv_.notify_all();
    return true;
  }
  queue_.push_back(std::move(job));
  q_cv_.notify_all();
  return true;
}

void MetaService::WriterLoop() {
  int64_t next_tick = NowMs() + options_.tick_ms;
  while (true) {
    std::deque<std::unique_ptr<Job>> jobs;
    {
      std::unique_lock lock(q_mu_);
      q_cv_.wait_for(lock, std::chrono::milliseconds(options_.tick_ms),
                     [this] { return stopping_ || (!queue_.empty() && !group_running_); });
      // One group at a time: wait out a mutation running inline on a network thread.
      q_cv_.wait(lock, [this] { return !group_running_; });
      if (queue_.empty() && stopping_)
        break;
      while (!queue_.empty() && jobs.size() < options_.max_group) {
        jobs.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      if (const int64_t now = NowMs(); now >= next_tick) {
        // A late tick delays marking silent OSTs down and chain changes: say so.
        if (now - next_tick > 5 * static_cast<int64_t>(options_.tick_ms) && now - next_tick > 2000)
          LOG_WARN("mds: the periodic check runs {} ms late", now - next_tick);
        jobs.push_front(std::make_unique<TickJob>(nullptr));
        next_tick = now + options_.tick_ms;
      }
      if (jobs.empty())
        continue;
      group_running_ = true;
    }
    RunGroup(jobs);
    {
      std::lock_guard lock(q_mu_);
      group_running_ = false;
    }
    q_cv_.notify_all();
  }
}

void MetaService::RunGroup(std::deque<std::unique_ptr<Job>>& jobs) {
  Txn txn(kv_.get());
  std::vector<Status> results(jobs.size());
  std::vector<std::pair<uint64_t, uint64_t>> cached;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& job = *jobs[i];
    const uint64_t sid = job.session_id();
    const uint64_t seq = job.seq();
    const bool cacheable = sid != 0 && seq != 0;
    if (cacheable) {
      CachedReply c;
      if (FindReply(sid, seq, &c)) {
        if (c.status.ok())
          job.RestoreResp(c.body);
        results[i] = std::move(c.status);
        continue;
      }
    }
    txn.BeginMutation();
    Status st;
    try {
      st = job.Apply(this, txn);
    } catch (const std::exception& e) {
      st = Status::Internal(fmt::format("mutation failed: {}", e.what()));
    }
    txn.EndMutation(st.ok());
    // "Try again" answers (no OST up yet, ...) changed nothing: a retry must run again.
    if (cacheable && !st.IsRetryable()) {
      StoreReply(sid, seq, CachedReply{st, st.ok() ? job.SerializeResp() : std::string()});
      cached.emplace_back(sid, seq);
    }
    results[i] = std::move(st);
  }
  Status commit;
  if (!txn.empty()) {
    commit = kv_->Write(txn.TakeBatch(), txn.sync());
  } else if (txn.sync()) {
    commit = kv_->SyncWal();
  }
  if (!commit.ok()) {
    LOG_ERROR("mds: group commit of {} mutations failed: {}", jobs.size(), commit.ToString());
    txn.RunAbortHooks();
    for (const auto& [sid, seq] : cached)
      EraseReply(sid, seq);
    for (auto& r : results) {
      if (r.ok())
        r = commit;
    }
  } else {
    txn.RunCommitHooks();
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    try {
      jobs[i]->Finish(std::move(results[i]));
    } catch (const std::exception& e) {
      LOG_ERROR("mds: reply callback threw: {}", e.what());
    }
  }
}

template <typename Req, typename Resp>
void MetaService::Submit(Req req, Done<Resp> done) {
  Enqueue(std::make_unique<TypedJob<Req, Resp>>(std::move(req), std::move(done)));
}

template <typename Req, typename Resp>
Result<Resp> MetaService::RunSync(const Req& req) {
  std::promise<Result<Resp>> p;
  auto f = p.get_future();
  Submit<Req, Resp>(req, [&p](Result<Resp> r) { p.set_value(std::move(r)); });
  return f.get();
}

#define CIUIC_META_MUTATION_DEF(Name)                                           \
  Result<pb::Name##Resp> MetaService::Name(const pb::Name##Req& req) {          \
    return RunSync<pb::Name##Req, pb::Name##Resp>(req);                         \
  }                                                                             \
  void MetaService::Name##Async(pb::Name##Req req, Done<pb::Name##Resp> done) { \
    Submit<pb::Name##Req, pb::Name##Resp>(std::move(req), std::move(done));     \
  }
CIUIC_META_MUTATION_DEF(OpenSession)
CIUIC_META_MUTATION_DEF(CloseSession)
CIUIC_META_MUTATION_DEF(SetAttr)
CIUIC_META_MUTATION_DEF(Create)
CIUIC_META_MUTATION_DEF(Mkdir)
CIUIC_META_MUTATION_DEF(Unlink)
CIUIC_META_MUTATION_DEF(Rename)
CIUIC_META_MUTATION_DEF(Symlink)
CIUIC_META_MUTATION_DEF(Link)
CIUIC_META_MUTATION_DEF(Open)
CIUIC_META_MUTATION_DEF(Close)
CIUIC_META_MUTATION_DEF(UpdateSize)
CIUIC_META_MUTATION_DEF(Instantiate)
CIUIC_META_MUTATION_DEF(SetLayout)
CIUIC_META_MUTATION_DEF(Fallocate)
CIUIC_META_MUTATION_DEF(FsyncDir)
CIUIC_META_MUTATION_DEF(SetXattr)
CIUIC_META_MUTATION_DEF(RemoveXattr)
CIUIC_META_MUTATION_DEF(TruncateDone)
CIUIC_META_MUTATION_DEF(RegisterOss)
CIUIC_META_MUTATION_DEF(Heartbeat)
CIUIC_META_MUTATION_DEF(AddClient)
CIUIC_META_MUTATION_DEF(RevokeClient)
CIUIC_META_MUTATION_DEF(HsmBegin)
CIUIC_META_MUTATION_DEF(HsmEnd)
CIUIC_META_MUTATION_DEF(HsmImport)
CIUIC_META_MUTATION_DEF(RepoQueue)
#undef CIUIC_META_MUTATION_DEF

// ResolvePath (ops/lookup.cc) runs its opening form through the writer.
template Result<pb::ResolvePathResp> MetaService::RunSync<pb::ResolvePathReq, pb::ResolvePathResp>(
    const pb::ResolvePathReq& req);

void MetaService::ResolvePathAsync(pb::ResolvePathReq req, Done<pb::ResolvePathResp> done) {
  if (!req.open()) {
    done(ResolvePath(req));
    return;
  }
  Submit<pb::ResolvePathReq, pb::ResolvePathResp>(std::move(req), std::move(done));
}

Status MetaService::TEST_Tick() {
  std::promise<Status> p;
  auto f = p.get_future();
  Enqueue(std::make_unique<TickJob>([&p](Status st) { p.set_value(std::move(st)); }));
  return f.get();
}

size_t MetaService::TEST_OrphanCount() {
  KvReader r(kv_.get());
  size_t n = 0;
  r.Scan(Cf::kSystem, kOrphanPrefix, PrefixEnd(std::string(kOrphanPrefix)),
         [&](std::string_view, std::string_view) {
           ++n;
           return true;
         })
      .IgnoreError();  // a count for tests
  return n;
}

MetaService::Stats MetaService::GetStats() {
  Stats s;
  {
    std::lock_guard lock(sess_mu_);
    s.sessions = sessions_.size();
    s.locks = locks_.size();
  }
  {
    std::lock_guard lock(q_mu_);
    s.queued_mutations = queue_.size();
  }
  s.open_files = open_files_.load(std::memory_order_relaxed);
  s.store = kv_->Properties();
  return s;
}

size_t MetaService::TEST_SessionCount() {
  std::lock_guard lock(sess_mu_);
  return sessions_.size();
}

size_t MetaService::TEST_LockCount() {
  std::lock_guard lock(sess_mu_);
  return locks_.size();
}

// ---------------------------------------------------------------------------------------------
// Sessions' in-memory state and the reply cache.

bool MetaService::FindReply(uint64_t session_id, uint64_t seq, CachedReply* out) {
  std::lock_guard lock(sess_mu_);
  auto s = sessions_.find(session_id);
  if (s == sessions_.end())
    return false;
  auto it = s->second.replies.find(seq);
  if (it == s->second.replies.end())
    return false;
  *out = it->second;
  return true;
}

void MetaService::StoreReply(uint64_t session_id, uint64_t seq, CachedReply reply) {
  std::lock_guard lock(sess_mu_);
  auto s = sessions_.find(session_id);
  if (s == sessions_.end())
    return;
  SessionState& st = s->second;
  if (!st.replies.emplace(seq, std::move(reply)).second)
    return;
  st.reply_order.push_back(seq);
  while (st.reply_order.size() > options_.reply_cache_per_session) {
    st.replies.erase(st.reply_order.front());
    st.reply_order.pop_front();
  }
}

void MetaService::EraseReply(uint64_t session_id, uint64_t seq) {
  std::lock_guard lock(sess_mu_);
  auto s = sessions_.find(session_id);
  if (s == sessions_.end())
    return;
  s->second.replies.erase(seq);
  std::erase(s->second.reply_order, seq);
}

std::vector<uint64_t> MetaService::ExpiredSessions(int64_t now_ms, size_t max) {
  std::lock_guard lock(sess_mu_);
  std::vector<uint64_t> out;
  for (const auto& [sid, s] : sessions_) {
    if (s.expires_ms < now_ms || s.ending)
      out.push_back(sid);
    if (out.size() >= max)
      break;
  }
  return out;
}

Result<pb::RenewSessionResp> MetaService::RenewSession(const pb::RenewSessionReq& req) {
  std::lock_guard lock(sess_mu_);
  auto s = sessions_.find(req.ctx().session_id());
  if (s == sessions_.end() || s->second.ending) {
    return Status::Stale(
        fmt::format("session {} is unknown or expired; open a new one", req.ctx().session_id()));
  }
  s->second.expires_ms = NowMs() + options_.lease_ms;
  pb::RenewSessionResp resp;
  resp.set_lease_ms(options_.lease_ms);
  return resp;
}

Status MetaService::ApplyTick(Txn& t) {
  const int64_t now = NowMs();
  // At most session_end_batch opens released per tick, over all ending sessions.
  size_t budget = options_.session_end_batch;
  for (uint64_t sid : ExpiredSessions(now, 64)) {
    LOG_INFO("mds: session {} lease expired or closed; closing its files", sid);
    CIUIC_ASSIGN_OR_RETURN(bool gone, EndSession(t, sid, &budget));
    if (!gone)
      break;  // out of budget: the next tick goes on
  }
  const int down = osts_.ExpireSilent(now, int64_t{3} * options_.heartbeat_ms);
  if (down > 0)
    LOG_WARN("mds: {} OSTs missed 3 heartbeats and are marked down", down);
  // Chains: members on OSTs down for the dead time leave them; every change is synced before
  // the tick ends, so a restarted MDS never publishes an older membership.
  const std::vector<pb::Chain> changed =
      osts_.ExpireChainMembers(now, int64_t{3} * options_.heartbeat_ms);
  for (const pb::Chain& c : changed) {
    std::string members;
    for (const auto& m : c.members())
      members += fmt::format(" {}:{}", m.ost(),
                             m.state() == kMemberServing   ? "serving"
                             : m.state() == kMemberSyncing ? "syncing"
                                                           : "offline");
    LOG_WARN("mds: chain {} version {}:{}", c.id() - kChainBase, c.version(), members);
    t.Put(Cf::kSystem, ChainKey(c.id()), c.SerializeAsString());
  }
  if (!changed.empty())
    t.RequireSync();
  return Status::OK();
}

}  // namespace ciuic::meta
