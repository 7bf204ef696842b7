// MetaService: the MDS's namespace, sessions, layouts and OST map over a KvStore, without the
// network (MdsServer binds it to an RpcServer).
//
// One method per operation, taking and returning the wire messages of src/proto/ciuic.proto.
// Reads (Lookup, GetAttr, ReadDir, ...) run on the calling thread straight from the store.
// Mutations run one group at a time, in order: queued ones on ONE writer thread, which
// validates and applies them and commits each group with a single atomic WriteBatch (one WAL
// write): no check-then-write races. A mutation submitted while nothing is queued or running
// (and that cannot ask for fsync) is applied and committed on the submitting thread instead
// (inline_mutations): the same code, without two thread hand-offs. Each mutation comes in two
// forms: `Create(req)` blocks until the result is committed; `CreateAsync(req, done)` calls
// `done` once it is committed, on the thread that ran it (writer or submitter; kUnavailable at
// once when the queue is full). A mutation whose ReqCtx carries a session and
// a non-zero seq is answered from the session's reply cache when retried.
//
// Durability: mutations use an unsynced WAL write except UpdateSize(sync) and FsyncDir, whose
// group is written with a synced WAL write (which also makes every earlier write durable).
//
// Thread-safety: every public method may be called from any thread, except that the blocking
// mutation forms must not be called from a `done` callback.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "ciuic.pb.h"
#include "common/fid.h"
#include "common/status.h"
#include "meta/heat_table.h"
#include "meta/keys.h"
#include "meta/kv_store.h"
#include "meta/lock_table.h"
#include "meta/ost_map.h"

namespace ciuic::meta {

class Txn;
class Reader;
class Job;

struct MetaOptions {
  std::string cluster_uuid;
  // The admin key (cluster secret): client keys are derived from it (net/capability.h).
  std::string admin_secret;
  uint32_t mds_index = 0;
  uint32_t lease_ms = 30000;
  uint32_t heartbeat_ms = 1000;  // an OSS missing 3 heartbeats is down
  // Copies of each object of a component whose layout does not say (1..kMaxReplicas).
  uint32_t default_replicas = 1;
  // Sent to clients with the OST map (GetOstMapResp.mds_epoch): changes only when unsynced
  // mutations may have been lost (MdsServer: the machine's boot epoch; tests: a power cycle).
  uint64_t durability_epoch = 0;
  // Punches in the OST work log wait this long before an OSS is told to apply them, so the
  // client that truncated applies them first.
  uint32_t punch_grace_ms = 2000;
  size_t max_queue = 4096;  // queued mutations before kUnavailable
  size_t max_group = 256;   // mutations per group commit
  size_t reply_cache_per_session = 256;
  // Caps on the state one client can make the MDS hold; hitting one is kNoSpace naming the cap
  // and its value ("too many open files in this session (cap 65536)").
  uint32_t max_sessions_per_key = 16384;   // sessions open at once per client key (admin too)
  uint32_t max_opens_per_session = 65536;  // files one session holds open
  uint32_t max_locks_per_file = 4096;      // lock ranges held on one file, all owners together
  uint32_t max_locks_per_session = 65536;  // lock ranges one session holds, all files together
  // Opens released per commit when a session ends (close or lease expiry): a session holding
  // more ends over several ticks instead of in one unbounded write batch.
  uint32_t session_end_batch = 1024;
  uint32_t max_tasks_per_heartbeat = 1024;
  uint32_t max_readdir_entries = 4096;
  uint32_t tick_ms = 200;  // lease and heartbeat checks
  // Per-file heat (heat_table.h): the half-life of an access, and the files tracked at most
  // (about 100 bytes each; the coldest are dropped past it).
  int64_t heat_half_life_ms = 3600 * 1000;
  size_t heat_max_files = 1 << 20;
  // A mutation that finds the queue empty and no group running is applied and committed on the
  // thread that submits it (the MDS network thread) instead of the writer thread.
  bool inline_mutations = true;
  // Tests only: squeeze name hashes into [3, 3 + mask] to force readdir cookie collisions.
  uint64_t test_name_hash_mask = 0;
};

template <typename T>
using Done = std::function<void(Result<T>)>;

class MetaService {
 public:
  // Opens the namespace in `kv`, creating the root directory (seq 1) on first start, loading
  // sessions, OSTs and orphans. Starts the writer thread. kCorruption on unreadable records.
  static Result<std::unique_ptr<MetaService>> Open(std::unique_ptr<KvStore> kv,
                                                   MetaOptions options);
  ~MetaService();
  MetaService(const MetaService&) = delete;
  MetaService& operator=(const MetaService&) = delete;

  // Refuses new mutations (kUnavailable), finishes the queued ones and joins the writer.
  // Idempotent.
  void Stop();

  // --- Reads: inline, from the committed state. ---
  // RenewSession only touches in-memory state. kStale when the session is unknown or expired.
  Result<pb::RenewSessionResp> RenewSession(const pb::RenewSessionReq& req);
  Result<pb::LookupResp> Lookup(const pb::LookupReq& req);
  // With req.open the open is a mutation: use the blocking form or ResolvePathAsync.
  Result<pb::ResolvePathResp> ResolvePath(const pb::ResolvePathReq& req);
  Result<pb::GetAttrResp> GetAttr(const pb::GetAttrReq& req);
  Result<pb::ReadlinkResp> Readlink(const pb::ReadlinkReq& req);
  Result<pb::ReadDirResp> ReadDir(const pb::ReadDirReq& req);
  Result<pb::StatfsResp> Statfs(const pb::StatfsReq& req);
  Result<pb::GetXattrResp> GetXattr(const pb::GetXattrReq& req);
  Result<pb::ListXattrResp> ListXattr(const pb::ListXattrReq& req);
  Result<pb::GetOstMapResp> GetOstMap(const pb::GetOstMapReq& req);
  // Advisory locks (lock_table.h), in memory: granted or the conflicting lock (never waits;
  // F_SETLKW callers retry). kStale when the session is unknown or expired.
  Result<pb::LockResp> Lock(const pb::LockReq& req);
  Result<pb::ListClientsResp> ListClients(const pb::ListClientsReq& req);
  // HSM state of a file (ops/hsm.cc): its attributes and HsmRecord (state 0 when none).
  Result<pb::HsmStateResp> HsmState(const pb::HsmStateReq& req);

  // --- Tenants (ops/clients.cc). ---
  // The rules of client key `key_id`, or null when there is no such key. Revoked keys are
  // returned with `revoked` set. Thread-safe, from memory.
  std::shared_ptr<const pb::ClientKeyRecord> FindClientKey(uint32_t key_id) const;
  // Every revoked key id (OSSes get them with heartbeats).
  std::vector<uint32_t> RevokedKeyIds() const;
  // Checks that every FID named at the top level of `req` lies inside `req.ctx.root` (a subtree
  // key's "/"), by walking directory parents. OK when the request has no root. Returns
  // kPermissionDenied "outside the client's subtree", kNotFound for an unknown FID.
  Status CheckReach(Reader& r, const google::protobuf::Message& req);
  Status CheckReach(const google::protobuf::Message& req);
  // The key id that opened session `session_id`; kStale when it is unknown.
  Result<uint32_t> SessionKeyId(uint64_t session_id);

  // --- Mutations: the writer thread. ---
#define CIUIC_META_MUTATION(Name)                        \
  Result<pb::Name##Resp> Name(const pb::Name##Req& req); \
  void Name##Async(pb::Name##Req req, Done<pb::Name##Resp> done);
  CIUIC_META_MUTATION(OpenSession)
  CIUIC_META_MUTATION(CloseSession)
  CIUIC_META_MUTATION(SetAttr)
  CIUIC_META_MUTATION(Create)
  CIUIC_META_MUTATION(Mkdir)
  CIUIC_META_MUTATION(Unlink)
  CIUIC_META_MUTATION(Rename)
  CIUIC_META_MUTATION(Symlink)
  CIUIC_META_MUTATION(Link)
  CIUIC_META_MUTATION(Open)
  CIUIC_META_MUTATION(Close)
  CIUIC_META_MUTATION(UpdateSize)
  CIUIC_META_MUTATION(Instantiate)
  CIUIC_META_MUTATION(SetLayout)
  CIUIC_META_MUTATION(Fallocate)
  CIUIC_META_MUTATION(FsyncDir)
  CIUIC_META_MUTATION(SetXattr)
  CIUIC_META_MUTATION(RemoveXattr)
  CIUIC_META_MUTATION(TruncateDone)
  CIUIC_META_MUTATION(RegisterOss)
  CIUIC_META_MUTATION(Heartbeat)
  // Client keys (ops/clients.cc; the admin key only, MdsServer checks).
  CIUIC_META_MUTATION(AddClient)
  CIUIC_META_MUTATION(RevokeClient)
  // HSM (ops/hsm.cc, docs/design.md "HSM"): HsmBegin checks an operation and marks the file
  // busy with it; HsmEnd records its outcome in the namespace's batch.
  CIUIC_META_MUTATION(HsmBegin)
  CIUIC_META_MUTATION(HsmEnd)
  // A released file backed by a data repository object (ciuic repo link/sync).
  CIUIC_META_MUTATION(HsmImport)
  // Export on close of a data repository (ops/repo.cc).
  CIUIC_META_MUTATION(RepoQueue)
#undef CIUIC_META_MUTATION
  // ResolvePath with req.open: queued like a mutation (without it, answered inline).
  void ResolvePathAsync(pb::ResolvePathReq req, Done<pb::ResolvePathResp> done);

  // --- Test hooks. ---
  // Moves this service's clocks (leases, heartbeats, punch grace) forward by `ms`.
  void TEST_AdvanceClock(int64_t ms) {
    clock_offset_ms_ += ms;
  }
  // Runs the lease and heartbeat checks now (on the writer thread) and waits for them.
  Status TEST_Tick();
  KvStore* TEST_kv() {
    return kv_.get();
  }
  // Cheap figures for the metrics endpoint (docs/design.md, "Observability"). Any thread.
  struct Stats {
    size_t sessions = 0;
    size_t locks = 0;
    size_t queued_mutations = 0;  // the writer's queue
    int64_t open_files = 0;       // tracked opens (OpenRecords) of live sessions
    std::vector<std::pair<std::string, uint64_t>> store;  // KvStore::Properties()
  };
  Stats GetStats();

  size_t TEST_OrphanCount();
  size_t TEST_SessionCount();
  size_t TEST_LockCount();

 private:
  template <typename Req, typename Resp>
  friend class TypedJob;
  friend class TickJob;

  // One persistent, never-reused counter (fids, task ids, sessions, opens): values are handed
  // out from memory and the high-water mark in the system column family is raised a range at
  // a time, in the same batch as the mutation that needs it.
  struct Sequence {
    std::string_view key;
    uint64_t next = 1;
    uint64_t hwm = 1;
  };
  struct CachedReply {
    Status status;
    std::string body;
  };
  struct SessionState {
    uint32_t key_id = 0;
    std::string client_name;
    int64_t expires_ms = 0;
    size_t opens = 0;     // open records, committed or in a pending mutation
    bool ending = false;  // closed or expired; its opens are being released batch by batch
    std::unordered_map<uint64_t, CachedReply> replies;
    std::deque<uint64_t> reply_order;
  };

  MetaService(std::unique_ptr<KvStore> kv, MetaOptions options);
  Status Load();
  Status LoadSequence(Sequence* seq, uint64_t first);
  void WriterLoop();
  void RunGroup(std::deque<std::unique_ptr<Job>>& jobs);
  bool Enqueue(std::unique_ptr<Job> job);
  template <typename Req, typename Resp>
  void Submit(Req req, Done<Resp> done);
  template <typename Req, typename Resp>
  Result<Resp> RunSync(const Req& req);

  int64_t NowMs() const;   // monotonic: leases and heartbeats
  int64_t WallMs() const;  // wall clock: stored in the OST work log
  uint64_t Hash(std::string_view name) const {
    return hasher_(name);
  }

  uint64_t Allocate(Txn& txn, Sequence* seq);
  Fid NewFid(Txn& txn);

  // Reply cache (guarded by sess_mu_).
  bool FindReply(uint64_t session_id, uint64_t seq, CachedReply* out);
  void StoreReply(uint64_t session_id, uint64_t seq, CachedReply reply);
  void EraseReply(uint64_t session_id, uint64_t seq);
  std::vector<uint64_t> ExpiredSessions(int64_t now_ms, size_t max);

  // Applies one mutation (definitions live in ops/*.cc).
  Status Apply(Txn& t, const pb::OpenSessionReq& req, pb::OpenSessionResp* resp);
  Status Apply(Txn& t, const pb::CloseSessionReq& req, pb::CloseSessionResp* resp);
  Status Apply(Txn& t, const pb::SetAttrReq& req, pb::SetAttrResp* resp);
  Status Apply(Txn& t, const pb::CreateReq& req, pb::CreateResp* resp);
  Status Apply(Txn& t, const pb::MkdirReq& req, pb::MkdirResp* resp);
  Status Apply(Txn& t, const pb::UnlinkReq& req, pb::UnlinkResp* resp);
  Status Apply(Txn& t, const pb::RenameReq& req, pb::RenameResp* resp);
  Status Apply(Txn& t, const pb::SymlinkReq& req, pb::SymlinkResp* resp);
  Status Apply(Txn& t, const pb::LinkReq& req, pb::LinkResp* resp);
  Status Apply(Txn& t, const pb::OpenReq& req, pb::OpenResp* resp);
  Status Apply(Txn& t, const pb::CloseReq& req, pb::CloseResp* resp);
  Status Apply(Txn& t, const pb::UpdateSizeReq& req, pb::UpdateSizeResp* resp);
  Status Apply(Txn& t, const pb::InstantiateReq& req, pb::InstantiateResp* resp);
  Status Apply(Txn& t, const pb::SetLayoutReq& req, pb::SetLayoutResp* resp);
  Status Apply(Txn& t, const pb::FallocateReq& req, pb::FallocateResp* resp);
  Status Apply(Txn& t, const pb::FsyncDirReq& req, pb::FsyncDirResp* resp);
  Status Apply(Txn& t, const pb::SetXattrReq& req, pb::SetXattrResp* resp);
  Status Apply(Txn& t, const pb::RemoveXattrReq& req, pb::RemoveXattrResp* resp);
  Status Apply(Txn& t, const pb::TruncateDoneReq& req, pb::TruncateDoneResp* resp);
  Status Apply(Txn& t, const pb::RegisterOssReq& req, pb::RegisterOssResp* resp);
  Status Apply(Txn& t, const pb::HeartbeatReq& req, pb::HeartbeatResp* resp);
  Status Apply(Txn& t, const pb::AddClientReq& req, pb::AddClientResp* resp);
  Status Apply(Txn& t, const pb::RevokeClientReq& req, pb::RevokeClientResp* resp);
  Status Apply(Txn& t, const pb::HsmBeginReq& req, pb::HsmBeginResp* resp);
  Status Apply(Txn& t, const pb::HsmEndReq& req, pb::HsmEndResp* resp);
  Status Apply(Txn& t, const pb::HsmImportReq& req, pb::HsmImportResp* resp);
  Status Apply(Txn& t, const pb::RepoQueueReq& req, pb::RepoQueueResp* resp);
  // A close that wrote regular file `rec`: queues it for export when a directory above it
  // exports on close (ops/repo.cc).
  Status QueueExportOnClose(Txn& t, const pb::InodeRecord& rec);
  // Directory `d` no longer exports on close: its key and its queue go (switched off, removed).
  Status DropExportDir(Txn& t, const Fid& d);
  // The path of `fid` below directory `top` ("a/b"), from the names and parents inodes record;
  // "" when it has none there (removed, moved out, or a name the inode no longer records).
  Result<std::string> PathBelow(Reader& r, const Fid& fid, const Fid& top);
  // HSM side of a truncate of `rec` (ops/hsm.cc): a released file may only be emptied, once
  // its release tasks are done; the file then is no longer released.
  Status HsmOnTruncate(Txn& t, pb::InodeRecord* rec, uint64_t size);
  // Statfs with_tiers: the cold tier's files and bytes from the HSM records.
  Status SumTiers(Reader& r, pb::StatfsResp* resp);
  Status LoadClientKeys();
  Status Apply(Txn& t, const pb::ResolvePathReq& req, pb::ResolvePathResp* resp);
  // Lease expiry and silent-OSS detection (the periodic tick).
  Status ApplyTick(Txn& t);

  // --- Helpers of the operations (ops/*.cc). ---
  // Walks `path` from the root for `ctx` (search permission on each directory, symlinks in
  // the middle followed, in the last component when `follow_last`, at most 40 -> kLoop).
  Status Resolve(Reader& r,
                 const pb::ReqCtx& ctx,
                 std::string_view path,
                 bool follow_last,
                 pb::InodeRecord* out,
                 Fid* parent);
  // Records an open of `rec` by `session_id`: an OpenRecord and open_count + 1 in `rec` (the
  // caller stores rec). Returns the open id. kStale when the session is unknown or ending,
  // kNoSpace when it already holds max_opens_per_session.
  Result<uint64_t> AddOpen(Txn& t, uint64_t session_id, pb::InodeRecord* rec, uint32_t flags);
  // Counts one open of `session_id` less (its record was deleted, or never committed).
  void DropOpenCount(uint64_t session_id);
  // Ends the open `open_id` of `session_id`; destroys an orphan at its last close.
  // Ends an open. With `close` (a client's CloseReq), fills its sole_version.
  Status EndOpen(Txn& t,
                 uint64_t session_id,
                 uint64_t open_id,
                 const Fid& fid,
                 bool wrote,
                 const pb::CloseReq* close = nullptr,
                 pb::CloseResp* resp = nullptr);
  // Closes up to *budget opens of `session_id` (counting them off *budget) and, once none is
  // left, deletes the session. A session with opens left is marked ending: dead for its client
  // at once, finished by the next ticks. Returns whether the session is gone.
  Result<bool> EndSession(Txn& t, uint64_t session_id, size_t* budget);
  // Checks permissions for opening `rec` with O_* `flags`, applies O_TRUNC and records the
  // open (open_id 0 for untracked opens: directories, devices, session 0). Stores rec.
  Status OpenInode(Txn& t,
                   const pb::ReqCtx& ctx,
                   pb::InodeRecord* rec,
                   uint32_t flags,
                   uint64_t* open_id,
                   google::protobuf::RepeatedPtrField<pb::OstTask>* punches);
  // Drops one link of `rec` (already unlinked from its directory): nlink - 1; at 0 the inode
  // becomes an orphan if open, else it is destroyed.
  Status DropLink(Txn& t, pb::InodeRecord* rec);
  // Deletes an inode, its xattrs and orphan mark, logging destroy tasks for its objects.
  Status DestroyInode(Txn& t, const pb::InodeRecord& rec);
  // Appends a task to the OST work log; fills *out when not null.
  void LogTask(Txn& t,
               uint32_t ost,
               const pb::Fid& fid,
               uint32_t comp,
               uint32_t stripe,
               uint32_t kind,
               uint64_t length,
               pb::OstTask* out);
  // Sets the size of regular file `rec` to `size`: new trunc epoch and data version, punches
  // for instantiated objects that may hold data past `size` (logged and appended to
  // `punches`), mtime/ctime now. A never-written adaptive file gets a layout for `size`.
  Status Truncate(Txn& t,
                  pb::InodeRecord* rec,
                  uint64_t size,
                  google::protobuf::RepeatedPtrField<pb::OstTask>* punches);
  // Chooses OSTs for the uninstantiated components of `rec` that start below `end`.
  // kUnavailable when no OST is up.
  // Places the components covering [0, end); replicated ones on chains, whose records are put
  // in `t` with the layout.
  Status InstantiateUpTo(Txn& t, pb::InodeRecord* rec, uint64_t end);
  // Replaces the layout of a never-written adaptive file with one sized for `size_hint`.
  void ApplySizeHint(Txn& t, pb::InodeRecord* rec, uint64_t size_hint, bool random_access);

  std::unique_ptr<KvStore> kv_;
  MetaOptions options_;
  NameHasher hasher_;
  OstMap osts_;
  // Set while a data repository import creates a file: its components get one copy (mutations
  // are applied one at a time).
  bool single_copy_ = false;
  // The OSTs a task for `target` goes to: the OST itself, or every member of a chain.
  std::vector<uint32_t> TaskOsts(uint32_t target) const;
  // kInvalidArgument when a component asks for more replicas than the cluster has failure
  // domains, or names OSTs for a replicated component.
  Status CheckReplicas(const FileLayout& l) const;
  std::atomic<int64_t> clock_offset_ms_{0};

  Sequence fid_seq_{kFidHwmKey};
  Sequence task_seq_{kTaskHwmKey};
  Sequence session_seq_{kSessionHwmKey};
  Sequence open_seq_{kOpenHwmKey};
  Sequence client_key_seq_{kClientKeyHwmKey};

  mutable std::mutex keys_mu_;
  // Client keys by id, revoked ones included (ids are never reused). Guarded by keys_mu_.
  std::unordered_map<uint32_t, std::shared_ptr<const pb::ClientKeyRecord>> client_keys_;

  std::mutex sess_mu_;
  std::unordered_map<uint64_t, SessionState> sessions_;  // guarded by sess_mu_
  // Sessions per client key, committed or in a pending mutation; guarded by sess_mu_.
  std::unordered_map<uint32_t, size_t> sessions_per_key_;
  LockTable locks_;  // guarded by sess_mu_
  // Per OST, the first work log key a heartbeat scan must look at: everything below was done
  // (deleted) when it was last scanned, and new tasks get higher ids. Spares heartbeats from
  // walking the tombstones of finished tasks. Writer thread only; rebuilt after a restart.
  std::unordered_map<uint32_t, uint64_t> ostlog_floor_;

  // HSM operations in progress (HsmBegin .. HsmEnd), one per file, each with its token; an
  // entry past its expiry (a client that died mid-copy) no longer blocks. Guarded by hsm_mu_.
  struct HsmBusy {
    uint64_t token = 0;
    uint32_t op = 0;
    uint64_t data_version = 0;
    int64_t expires_ms = 0;
  };
  std::mutex hsm_mu_;
  std::unordered_map<Fid, HsmBusy, FidHash> hsm_busy_;
  // Decayed access counts per file: opens (OpenInode) and OSS read reports (Heartbeat).
  HeatTable heat_;
  uint64_t hsm_next_token_ = 1;
  // Linked directories that export on close ("repoexp/" keys, loaded at start); guarded by
  // repo_mu_.
  std::mutex repo_mu_;
  std::unordered_set<Fid, FidHash> export_dirs_;

  std::mutex q_mu_;
  std::condition_variable q_cv_;
  std::deque<std::unique_ptr<Job>> queue_;  // guarded by q_mu_
  bool stopping_ = false;                   // guarded by q_mu_
  bool group_running_ = false;  // a group commit is running (writer or inline); guarded by q_mu_
  std::thread writer_;
  std::once_flag stop_once_;
  // OpenRecords stored: counted at Load, then changed by the commits that add or end opens.
  std::atomic<int64_t> open_files_{0};
};

}  // namespace ciuic::meta
