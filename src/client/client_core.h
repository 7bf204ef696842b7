// ClientCore: the connection machinery shared by a Client and its open Files.
//
// Owns the event loop (network threads), the MDS channel and session (lease renewed in the
// background), the OST map and one channel per OSS address, a timer thread for retry backoff, a
// small pool for blocking work (MDS calls an async path needs, restores) and a separate one for
// what OST calls themselves wait on (connects, map and capability refreshes), so blocking work
// that waits for OST calls cannot starve them.
//
// MDS calls are blocking (user or pool threads only): they carry a ReqCtx with the session, a
// per-session mutation sequence (reused by retries so the MDS reply cache dedups) and the
// caller's identity, reconnect on a broken channel and retry retryable errors with backoff and
// jitter for up to ost_retry_ms.
//
// OST calls are asynchronous: OstCallAsync never blocks; its completion runs on a network, timer
// or pool thread. An OST that is unreachable or answers kUnavailable/kTimedOut is retried with
// backoff and jitter for up to ost_retry_ms, then the call fails with kUnavailable naming the OST.
//
// Thread-safety: all methods are thread-safe. Shutdown() (called by ~ClientImpl) closes the
// session, fails later calls with kAborted and joins every thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ciuic.pb.h"
#include "ciuic/client.h"
#include "client/node_cache.h"
#include "client/range_lock.h"
#include "client/timer_queue.h"
#include "common/config.h"
#include "common/fid.h"
#include "common/thread_pool.h"
#include "common/time_util.h"
#include "net/rpc.h"

namespace ciuic::client {

// One RPC to an OST, retried by the core. The owner fills the public fields and hands it to
// OstCallAsync; `done` runs exactly once.
struct OstCall {
  net::MsgType type = net::MsgType::kRead;
  uint32_t ost = 0;
  std::unique_ptr<google::protobuf::MessageLite> req;
  std::vector<net::ConstSpan> out_data;
  std::span<uint8_t> in_dest;
  std::function<void(Result<net::Reply>)> done;

  // Core's bookkeeping.
  bool shm = false;     // this attempt asked the OSS to place the blocks in shared memory
  bool no_shm = false;  // the OSS did not know the region: the rest of the attempts use TCP
  int attempt = 0;
  bool cap_refreshed = false;  // an OSS refused its capability once and it was fetched again
  int64_t deadline_ms = 0;     // set at the first retryable failure
  Status last_error;
  int timeout_ms = 0;  // per attempt; 0: ClientOptions::io_timeout_ms
  int retry_ms = 0;    // retry window; 0: ClientOptions::ost_retry_ms
  // Replicated reads: copies to pass over (the ones before failed their checksums).
  uint32_t replica_skip = 0;
};

// State this client keeps per file (shared by every File of the same FID in this client).
struct Node {
  explicit Node(const Fid& f) : fid(f) {}
  const Fid fid;

  std::mutex mu;
  std::shared_ptr<const FileLayout> layout;  // CIUIC_GUARDED_BY(mu)
  // Best known size: the MDS's, extended by local writes. Written under mu; atomic so that a
  // read takes it without the lock.
  std::atomic<uint64_t> size{0};
  uint64_t trunc_epoch = 0;  // as last seen from the MDS
  uint64_t data_version = 0;
  // The file is excluded from node caches (Attr.no_node_cache, as last seen from the MDS).
  std::atomic<bool> no_node_cache{false};
  bool size_dirty = false;     // local writes extended `size` past what the MDS was told
  bool unsynced_data = false;  // written since the last fsync
  Timespec mtime;              // of the last local write
  // (ost, object) written since the last sync -> the OSS's durability epoch of the write
  // acknowledgements (0: none yet; kMixedEpochs: acknowledged under two epochs, so some may be
  // lost). The sync names it, and the OSS refuses a sync under another epoch (docs/design.md).
  std::map<std::pair<uint32_t, ObjectId>, uint64_t> touched;  // CIUIC_GUARDED_BY(mu)
  static constexpr uint64_t kMixedEpochs = UINT64_MAX;
  // Replicated objects (a chain in `touched`): the epoch of each member that acknowledged the
  // writes (WriteResp.replica_epochs), checked by each member at the sync.
  std::map<std::pair<uint32_t, ObjectId>, std::map<uint32_t, uint64_t>>
      replica_epochs;  // CIUIC_GUARDED_BY(mu)

  // Bumped when a write starts and when it ends: readahead chunks fetched under an older
  // generation are stale.
  std::atomic<uint64_t> write_gen{0};
  RangeLock ranges;
  std::mutex append_mu;  // serializes O_APPEND writes of this client

  std::shared_ptr<const FileLayout> GetLayout() {
    std::lock_guard<std::mutex> lock(mu);
    return layout;
  }

  // Write buffers of this file's open handles here: before a read or write of a range, every
  // handle's buffered bytes in it are sent (so the handles of one client see each other's data
  // and overlapping writes keep their order).
  // A flusher returns false when !may_wait and it could not flush without waiting.
  using Flusher = std::function<bool(uint64_t offset, uint64_t len, bool may_wait)>;
  uint64_t AddFlusher(Flusher f) {
    std::lock_guard<std::mutex> lock(flush_mu);
    flushers.emplace(next_flusher, std::move(f));
    flusher_count.store(flushers.size(), std::memory_order_release);
    return next_flusher++;
  }
  void RemoveFlusher(uint64_t id) {
    std::lock_guard<std::mutex> lock(flush_mu);
    flushers.erase(id);
    flusher_count.store(flushers.size(), std::memory_order_release);
  }
  // Flushes the overlapping buffered bytes of every handle except the one registered as `except`.
  // With !may_wait (network threads) returns false if some handle was busy: the caller must then
  // redo this with may_wait on a thread that may block.
  bool FlushOverlapping(uint64_t offset, uint64_t len, bool may_wait, uint64_t except = 0) {
    // A file no handle of this client writes (the common read) takes no lock.
    if (flusher_count.load(std::memory_order_acquire) == 0)
      return true;
    std::vector<Flusher> all;
    {
      std::lock_guard<std::mutex> lock(flush_mu);
      if (flushers.empty() || (flushers.size() == 1 && flushers.begin()->first == except))
        return true;
      for (const auto& [id, f] : flushers) {
        if (id != except)
          all.push_back(f);
      }
    }
    bool done = true;
    for (const auto& f : all)
      done = f(offset, len, may_wait) && done;
    return done;
  }

 private:
  std::mutex flush_mu;
  std::map<uint64_t, Flusher> flushers;  // CIUIC_GUARDED_BY(flush_mu)
  std::atomic<size_t> flusher_count{0};  // flushers.size()
  uint64_t next_flusher = 1;             // CIUIC_GUARDED_BY(flush_mu)
};

class ClientCore {
 public:
  static Result<std::shared_ptr<ClientCore>> Create(const ClientOptions& options);
  ~ClientCore();
  ClientCore(const ClientCore&) = delete;
  ClientCore& operator=(const ClientCore&) = delete;

  // Closes the session and joins every thread; later calls fail with kAborted. Idempotent.
  void Shutdown();
  bool shut_down() const { return shutdown_.load(); }
  // Background work that needs the session (a restore by extents' HsmEnd): Shutdown waits up
  // to 5 s for what began to end.
  void BeginBackground();
  void EndBackground();
  // A close the MDS did not get (it was unreachable for the whole retry window): sent again
  // after each successful session renewal and once at Shutdown, so the open does not stay on
  // the MDS for the session's life and a close that wrote still bumps the data version (and
  // queues an export on close). At most 65,536 are kept.
  void DeferClose(pb::CloseReq req);

  const ClientOptions& options() const { return options_; }
  const std::string& cluster_uuid() const { return cluster_uuid_; }
  uint64_t session_id() const { return session_id_.load(); }

  // Sends an MDS request and parses the reply into `resp`. `ctx` is the request's ReqCtx field
  // (filled here; null for requests without one). Mutations get a fresh sequence number that
  // retries reuse. Blocking: never call from a network thread.
  Status MdsCall(net::MsgType type,
                 google::protobuf::Message* req,
                 pb::ReqCtx* ctx,
                 google::protobuf::Message* resp,
                 bool mutation);
  template <typename Req, typename Resp>
  Status Mds(net::MsgType type, Req* req, Resp* resp, bool mutation) {
    pb::ReqCtx* ctx = nullptr;
    if constexpr (requires { req->mutable_ctx(); })
      ctx = req->mutable_ctx();
    return MdsCall(type, req, ctx, resp, mutation);
  }

  // Sends `call` to its OST, retrying as described above. Never blocks.
  void OstCallAsync(std::shared_ptr<OstCall> call);
  // Blocking convenience: runs `calls` concurrently and returns the first error.
  Status OstCallAll(std::vector<std::shared_ptr<OstCall>> calls);

  // "OST 2 (127.0.0.1:7102)".
  std::string OstName(uint32_t ost);
  // Whether a change of file `fid_seq` the MDS acknowledged is not yet known synced (its
  // fsync then syncs the MDS too).
  bool HasUnsyncedMdsChange(uint64_t fid_seq);
  // Fetches the OST map from the MDS and updates the routing table (OSTs and chains).
  Result<std::vector<pb::OstInfo>> RefreshOstMap();
  // The chains this client knows, by id (a copy).
  std::map<uint32_t, pb::Chain> Chains();

  // The Node for `fid`, shared among this client's open Files of that file.
  std::shared_ptr<Node> GetNode(const Fid& fid);
  // The Node for `fid` if a File of it is open here, else null.
  std::shared_ptr<Node> FindNode(const Fid& fid);
  // The root directory's FID (from the session).
  Fid root() const;

  // Blocking-work pool and timers, for the data path.
  ThreadPool& pool() { return *pool_; }
  TimerQueue& timers() { return *timers_; }
  // The node cache, or null when none is configured (or it could not be opened), and the pool
  // that serves asynchronous reads through it (its local IO and fill locks block).
  NodeCache* node_cache() { return node_cache_.get(); }
  ThreadPool& cache_pool() { return *cache_pool_; }

  // Directory path -> FID cache for parent lookups (dentry_cache_ms).
  bool LookupDirCache(const std::string& path, Fid* fid);
  void PutDirCache(const std::string& path, const Fid& fid);
  void ClearDirCache();

  // Attribute cache for Stat/Lstat by path (attr_cache_ms). Every mutation this client sends
  // clears it; `gen` (from AttrCacheGen() before the lookup RPC) keeps a reply that raced with a
  // mutation out of the cache.
  bool LookupAttrCache(const std::string& key, FileStat* st);
  uint64_t AttrCacheGen();
  void PutAttrCache(const std::string& key, const FileStat& st, uint64_t gen);
  // Before a mutation of `type` is sent: clears the path cache and, unless `type` never changes
  // a directory's attributes (close, size updates, ...), the directory attribute cache.
  void ClearAttrCache(net::MsgType type);
  // Directory attributes from this client's own namespace mutations (dir_attr_cache_ms), keyed
  // by FID sequence. `gen` is DirAttrGen() read before the mutation was sent: the entry is kept
  // only if no other directory-changing mutation started since.
  uint64_t DirAttrGen();
  bool LookupDirAttr(uint64_t seq, FileStat* st);
  void PutDirAttr(const FileStat& st, uint64_t gen);

  // Backoff before retry `attempt` (0-based), with jitter, in ms.
  static int64_t BackoffMs(int attempt);

  // Shared-memory reads (shm_reads.cc): a region of `bytes`, registered lazily with each local
  // OSS its reads go to.
  Result<std::shared_ptr<SharedMemory>> NewSharedMemory(size_t bytes);
  Result<std::shared_ptr<SharedMemory>> ImportSharedMemory(int fd);

 private:
  explicit ClientCore(const ClientOptions& options);
  Status Init();
  void OpenNodeCache();
  // Opens a session; when `lost` is non-zero, only if the current session is still that one.
  Status OpenSession(uint64_t lost = 0);
  void RenewLoop();
  // Sends the closes DeferClose kept; those that fail again stay. `once`: one short attempt
  // each on the current channel (Shutdown), else the usual MDS retries.
  void RetryDeferredCloses(bool once);
  // The MDS channel, connected if need be; *epoch gets the MDS's durability epoch, asked once
  // per connection (a restarted MDS is a new connection).
  Result<std::shared_ptr<net::RpcChannel>> MdsChannel(uint64_t* epoch);
  // Namespace durability across MDS power loss (docs/design.md "Durability epochs"): every
  // acknowledged mutation is noted with the epoch of the MDS that acknowledged it; a sync
  // (FsyncDir, a synced size update) answered under another epoch than some of them fails with
  // kIoError, once, since they may have been lost with the MDS's power.
  // Each acknowledgement is noted under the files and directories it touched (`keys`: FID
  // sequences) and reported lost only to a sync of one of them (`key`).
  void NoteMdsAck(uint64_t epoch, const std::vector<uint64_t>& keys);
  uint64_t MdsAcks();
  Status CheckMdsSynced(uint64_t epoch, uint64_t acks_before, uint64_t key);
  // Connects the MDS channel and asks its durability epoch (mds_mu_ held).
  Result<std::shared_ptr<net::RpcChannel>> ConnectMdsLocked();
  void DropMdsChannel(const std::shared_ptr<net::RpcChannel>& ch);
  bool WaitOrStop(int64_t ms);
  static bool IsSessionLost(const Status& st);

  // OST routing.
  struct OssConn {
    std::shared_ptr<net::RpcChannel> ch;
    bool connecting = false;
    std::vector<std::shared_ptr<OstCall>> waiting;
  };
  void Dispatch(std::shared_ptr<OstCall> call);
  // Read batches (docs/formats/wire.md "Read batches"): a read Dispatch may batch is queued
  // per channel; the first one queued posts a flush to the event loop, and every read queued
  // before it runs goes out with it in one ReadBatch frame (a full batch goes at once).
  struct ReadQueue {
    std::vector<std::shared_ptr<OstCall>> calls;
    int timeout_ms = 0;
  };
  bool Batchable(const OstCall& call) const;
  void QueueRead(std::shared_ptr<net::RpcChannel> ch, std::shared_ptr<OstCall> call, int timeout);
  void FlushReads(const std::shared_ptr<net::RpcChannel>& ch);
  void SendReads(std::shared_ptr<net::RpcChannel> ch, ReadQueue q);
  void SendOne(std::shared_ptr<net::RpcChannel> ch, std::shared_ptr<OstCall> call, int timeout);
  // Capabilities (docs/design.md "Tenants and capabilities"): kept from every layout the MDS
  // returns, put into each OSS request for the file's objects, fetched again (GetAttr) when an
  // OSS refuses one (expired, or none known here, as for OpenResolved after eviction).
  void KeepCaps(const google::protobuf::Message& resp);
  void AttachCap(OstCall* call);
  static Fid CallFid(const OstCall& call);
  void OnCallDone(std::shared_ptr<OstCall> call,
                  std::shared_ptr<net::RpcChannel> ch,
                  Result<net::Reply> r);
  void RetryOrFail(std::shared_ptr<OstCall> call, Status st);
  void Fail(std::shared_ptr<OstCall> call, Status st);
  void ConnectOss(std::string addr);
  void ApplyOstMap(const std::vector<pb::OstInfo>& osts);
  // Replicated calls (IsChain(call->ost)): picks the member the attempt goes to (the head for
  // changes, a serving member for reads, another one on each retry) and names it, the chain
  // and its version in the request. False when the chain is unknown here.
  bool RouteChain(OstCall* call, uint32_t* member);  // ost_mu_ held
  // Fetches the OST map in the background, at most every 100 ms (a chain call failed: its
  // chain may have a new version).
  void RefreshChainsSoon();
  // For a read call to the OSS at `addr`: when its destination lies in a live SharedMemory
  // registered (now, if need be) with that OSS, names the region in the request and returns
  // true (the reply then carries no data); otherwise clears those fields and returns false.
  bool PrepareShmRead(const std::string& addr, OstCall* call);
  // The same for a write whose one source span lies in a SharedMemory (not to a chain): the
  // OSS takes the bytes from the region and the request carries no data segment.
  bool PrepareShmWrite(const std::string& addr, OstCall* call);
  // The token of the SharedMemory holding [p, p+len) with OSS `addr` (registering it on first
  // use), and the range's offset in it; 0 when none holds it or it cannot be registered.
  uint64_t ShmToken(const std::string& addr, const void* p, size_t len, uint64_t* region_off);
  // The OSS at `addr` did not know a region: drop this client's registrations with it.
  void ForgetShm(const std::string& addr);
  struct ShmState;
  struct ShmSpare;
  static std::shared_ptr<ShmSpare> NewShmSpare();

  ClientOptions options_;
  ClusterFile cluster_;
  net::ChannelOptions chan_opts_;
  std::string cluster_uuid_;
  std::atomic<bool> shutdown_{false};
  std::mutex background_mu_;
  std::condition_variable background_cv_;
  int background_ = 0;  // CIUIC_GUARDED_BY(background_mu_)

  std::unique_ptr<net::EventLoop> loop_;
  std::unique_ptr<TimerQueue> timers_;
  std::unique_ptr<ThreadPool> pool_;
  // Connects and map / capability refreshes only: never waits on an OST call.
  std::unique_ptr<ThreadPool> ctl_pool_;

  std::mutex closes_mu_;
  std::vector<pb::CloseReq> deferred_closes_;  // CIUIC_GUARDED_BY(closes_mu_)

  std::mutex mds_mu_;
  std::shared_ptr<net::RpcChannel> mds_ch_;  // CIUIC_GUARDED_BY(mds_mu_)
  uint64_t mds_ch_epoch_ = 0;                // CIUIC_GUARDED_BY(mds_mu_)
  struct UnsyncedAcks {
    uint64_t last = 0;   // number (MdsAcks) of the latest
    uint64_t count = 0;  // how many
  };
  std::mutex acks_mu_;
  uint64_t mds_acks_ = 0;  // CIUIC_GUARDED_BY(acks_mu_)
  // epoch -> FID sequence -> acknowledgements not yet synced.
  std::map<uint64_t, std::unordered_map<uint64_t, UnsyncedAcks>> unsynced_;  // acks_mu_
  static constexpr size_t kMaxUnsyncedKeys = 1 << 16;
  std::atomic<uint64_t> session_id_{0};
  std::atomic<uint64_t> seq_{0};
  std::atomic<uint32_t> lease_ms_{30000};
  Fid root_ = kRootFid;            // CIUIC_GUARDED_BY(session_mu_)
  mutable std::mutex session_mu_;  // serializes session re-opening

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::thread renew_thread_;

  std::mutex caps_mu_;
  std::unordered_map<Fid, pb::Capability, FidHash> caps_;  // guarded by caps_mu_
  std::mutex ost_mu_;
  std::unordered_map<uint32_t, std::string> ost_addr_;  // CIUIC_GUARDED_BY(ost_mu_)
  std::map<uint32_t, pb::Chain> chains_;                // CIUIC_GUARDED_BY(ost_mu_)
  uint64_t chains_version_ = 0;                         // CIUIC_GUARDED_BY(ost_mu_)
  int64_t chains_refreshed_ms_ = 0;                     // CIUIC_GUARDED_BY(ost_mu_)
  bool chains_refreshing_ = false;                      // CIUIC_GUARDED_BY(ost_mu_)
  std::map<std::string, OssConn> oss_;                  // CIUIC_GUARDED_BY(ost_mu_)
  bool map_refreshing_ = false;                         // CIUIC_GUARDED_BY(ost_mu_)
  std::vector<std::shared_ptr<OstCall>> map_waiting_;   // CIUIC_GUARDED_BY(ost_mu_)

  bool shm_reads_ = true;
  bool batch_reads_ = true;
  std::mutex rq_mu_;
  // Reads waiting for their channel's flush, by channel (the key is the channel's address: the
  // queued calls hold it). Channels whose OSS answered kNotSupported are in no_batch_.
  std::unordered_map<net::RpcChannel*, ReadQueue> rq_;  // CIUIC_GUARDED_BY(rq_mu_)
  std::unordered_set<net::RpcChannel*> no_batch_;       // CIUIC_GUARDED_BY(rq_mu_)
  std::mutex shm_mu_;
  std::vector<std::weak_ptr<ShmState>> shm_;  // CIUIC_GUARDED_BY(shm_mu_)
  std::shared_ptr<ShmSpare> shm_spare_;
  std::unique_ptr<NodeCache> node_cache_;
  std::unique_ptr<ThreadPool> cache_pool_;

  std::mutex nodes_mu_;
  std::unordered_map<Fid, std::weak_ptr<Node>, FidHash> nodes_;

  std::mutex dir_mu_;
  std::unordered_map<std::string, std::pair<Fid, int64_t>> dir_cache_;  // path -> (fid, expiry)

  std::mutex attr_mu_;
  uint64_t attr_gen_ = 0;
  uint64_t dir_gen_ = 0;                                                 // guarded by attr_mu_
  std::unordered_map<uint64_t, std::pair<FileStat, int64_t>> dir_attr_;  // guarded by attr_mu_
  std::unordered_map<std::string, std::pair<FileStat, int64_t>> attr_cache_;
};

}  // namespace ciuic::client
