// OssServer: serves one or more OSTs over RPC (kWrite, kRead, kSync, kPunch, kDestroy, kObjStat,
// kOstStatfs) and keeps them registered with the MDS (kRegisterOss, then kHeartbeat with fresh
// space figures; OST tasks - destroy, punch, release - that heartbeats return are run and
// acknowledged), and copies stripe objects to and from the cold tier for HSM (kHsmObj).
//
// Threads: one RPC network thread (handlers never block: disk IO is submitted to the IoEngine
// and the reply is sent from its completion), the engine's thread(s), an eight-thread blocking
// pool for fsync/unlink/open (opening an object not cached waits on the disk: one file per
// sample keeps several opens in flight), a two-thread HSM pool (cold-tier copies), a heartbeat
// thread and its client event loop thread. Memory: at most 256 MiB of request/reply data in flight;
// beyond that requests get kUnavailable (clients retry with backoff). Thread-safety:
// Start/Stop/port may be called from any thread; Stop is idempotent.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ciuic.pb.h"
#include "common/config.h"
#include "common/fid.h"
#include "common/status.h"
#include "common/thread_pool.h"
#include "io/io_engine.h"
#include "oss/chain_router.h"

namespace ciuic::pb {
class ReadReq;
}  // namespace ciuic::pb

namespace ciuic::net {
class RpcServer;
class ServerCall;
class EventLoop;
class HttpServer;
}  // namespace ciuic::net

namespace ciuic::metrics {
class Counter;
class Registry;
}  // namespace ciuic::metrics

namespace ciuic::objstore {
class ObjectStore;
}  // namespace ciuic::objstore

namespace ciuic::oss {

class OstStore;
class ReadBufferPool;
class ShmRegistry;
class HsmMover;
class ObjectFill;

class OssServer {
 public:
  struct Options {
    std::vector<std::pair<uint32_t, std::string>> osts;  // (OST index, directory)
    HostPort mds;                                        // where to register
    std::string host = "127.0.0.1";
    uint16_t port = 0;   // 0 = ephemeral
    std::string secret;  // raw key bytes
    uint32_t key_id = 1;
    std::string cluster_uuid;
    io::IoEngineKind io_engine = io::IoEngineKind::kAuto;
    uint32_t heartbeat_ms = 1000;
    // Tests: run every OST on this engine (not owned) instead of a new disk engine, e.g. a
    // MemIoEngine to simulate power loss.
    io::IoEngine* test_engine = nullptr;
    // Bytes of request and reply data in flight before requests get kUnavailable.
    uint64_t max_inflight_bytes = uint64_t{256} << 20;
    // Open objects kept per OST (two fds each), see OstStore::Options::max_cached_objects.
    size_t max_open_objects_per_ost = 4096;
    // Idle buffers kept for reuse, for the whole OSS (docs/design.md, "OSS memory"): those that
    // OST reads land in, and those that request data (writes) is received into.
    size_t read_pool_bytes = size_t{32} << 20;
    size_t write_pool_bytes = size_t{64} << 20;
    // Background writeback: objects not written for this long are synced (up to 64 per OST
    // every second) rather than when they are evicted or the client fsyncs. 0 turns it off.
    uint32_t writeback_idle_ms = 5000;
    // Tombstones of destroyed objects are deleted this long after the destroy (up to 256 per
    // OST per second, on the writeback thread). Must exceed the longest a write to a destroyed
    // object can still arrive: the MDS's client lease (30 s) + the client's OST retry window
    // (ost_retry_ms, 30 s) + one request's time, and the capability lifetime (10 min) for client
    // keys. docs/formats/ost-disk.md.
    uint32_t tombstone_grace_ms = 3600 * 1000;
    // Serve reads into the shared memory of clients on this host (shm_registry.h).
    bool shm_reads = true;
    // Durability epoch sent with every write acknowledgement and checked by every sync
    // (WriteResp.epoch, SyncReq.epoch); 0: the machine's (MachineDurabilityEpoch). Tests that
    // simulate power loss give each power cycle its own.
    uint64_t durability_epoch = 0;
    // The cold tier (objstore::OpenObjectStore URL: file:///dir, s3://bucket/prefix,
    // mem://name) HSM copies stripe objects to and from; "" = none (HSM requests fail with
    // kNotSupported).
    std::string cold_tier_url;
    // Bytes per chunk of a restore by extents (hsm_fill.h); 0: kFillChunk (4 MiB). Tests.
    uint64_t hsm_fill_chunk = 0;
    // Serve Prometheus metrics over HTTP (GET /metrics) on this port of `host`: -1 off, 0 any
    // free port (docs/design.md, "Observability").
    int metrics_port = -1;
    // Failure domain sent to the MDS: OSSes with one label hold no two copies of an object
    // (docs/design.md "Replication"); "" = this OSS is its own domain.
    std::string host_label;
    // Resync (docs/design.md "Replication"): bytes per second this OSS copies to members that
    // catch up or are rebuilt, so the copy leaves the disks to the jobs. 0: unbounded.
    uint64_t resync_bytes_per_s = uint64_t{128} << 20;
    // Scrubbing (docs/design.md "Scrubbing"): bytes per second the scrubber re-reads and
    // verifies, over all OSTs (0: no scrubber), and the pause between two whole passes.
    uint64_t scrub_bytes_per_s = uint64_t{16} << 20;
    uint32_t scrub_pause_ms = 3600 * 1000;
    // An OST whose lock another process holds is tried again for this long before Start fails
    // with kBusy: a killed predecessor's last threads may still be exiting (its main thread a
    // zombie already) when a supervisor starts the next one.
    uint32_t busy_wait_ms = 0;
  };

  explicit OssServer(Options options);
  ~OssServer();  // Stop()
  OssServer(const OssServer&) = delete;
  OssServer& operator=(const OssServer&) = delete;

  // Opens the OSTs, binds, serves, and starts registering with the MDS (retrying in the
  // background while the MDS is down). Errors name the OST: "OST 2 at DIR belongs to another
  // cluster (...)", "... is in use by another process"; kUnavailable if the port is taken.
  Status Start();
  // The bound port (after Start).
  uint16_t port() const;
  // Stops serving, waits for IO in flight, syncs, and writes each OST's clean-shutdown marker.
  // Idempotent.
  void Stop();

  // For tests: whether the MDS accepted the registration, and heartbeats answered so far.
  bool registered() const { return registered_.load(); }
  // Reads answered into a client's shared memory so far.
  uint64_t shm_reads() const;
  // Writes whose bytes came from a co-located client's registered region.
  uint64_t shm_writes() const;
  // ReadBatch requests served so far (each several reads).
  uint64_t read_batches() const { return read_batches_.load(std::memory_order_relaxed); }
  uint64_t heartbeats() const { return heartbeats_.load(); }
  // Tests: while paused the OSS neither registers nor heartbeats, as if cut off from the MDS
  // (clients still reach it).
  void TEST_PauseHeartbeats(bool paused) { hb_paused_ = paused; }
  // Resyncs this OSS ran as a chain's head: objects it copied and bytes, since start.
  uint64_t resync_objects_copied() const { return resync_copied_.load(); }
  uint64_t resync_bytes_copied() const { return resync_bytes_.load(); }
  // The scrubber's counts for OST `ost` (zeros when it has none).
  pb::ScrubStats scrub_stats(uint32_t ost) const;
  // The RPC server, for requests made in-process (RpcServer::TEST_Dispatch; fuzzing).
  net::RpcServer* TEST_rpc() { return rpc_.get(); }
  // The bound metrics port (after Start; 0 when metrics are off).
  uint16_t metrics_port() const;
  // The server's metrics (RPC, per OST); rendered by GET /metrics.
  metrics::Registry* metrics() { return metrics_.get(); }

 private:
  // Operations counted per OST (oss_metrics.cc).
  enum class OstOp { kRead, kWrite, kSync, kPunch, kDestroy, kObjStat, kStatfs };
  static constexpr int kNumOstOps = 7;
  struct OstCounters {
    metrics::Counter* ops[kNumOstOps] = {};
    metrics::Counter* errors[kNumOstOps] = {};
    metrics::Counter* read_bytes = nullptr;
    metrics::Counter* write_bytes = nullptr;
  };
  // Creates the metric families and each OST's counters (before the RPC server starts).
  void RegisterMetrics();
  // Starts the HTTP endpoint when options_.metrics_port >= 0.
  Status StartMetricsHttp();
  // Counts an OST operation submitted to its store, then its outcome and data bytes.
  OstCounters* CountersOf(uint32_t ost) const;
  void OpBegin(OstCounters* c, OstOp op);
  void OpEnd(OstCounters* c, OstOp op, bool ok, uint64_t read_bytes = 0, uint64_t write_bytes = 0);

  void RegisterHandlers();
  OstStore* FindOst(uint32_t index) const;
  // Checks that the caller may touch objects of `obj`'s file with `rights` (net/capability.h):
  // the admin key always may; a client key needs a capability of the MDS for that file.
  Status CheckCap(const net::ServerCall& call,
                  const pb::Capability& cap,
                  const pb::ObjectId& obj,
                  uint32_t rights) const;
  bool IsRevoked(uint32_t key_id) const;
  void SetRevoked(const google::protobuf::RepeatedField<uint32_t>& ids);
  // Reserves `bytes` of the in-flight budget; false when it is spent.
  bool AcquireBudget(uint64_t bytes);
  void ReleaseBudget(uint64_t bytes);

  void HandleWrite(net::ServerCall call);
  // Replicated requests (oss_chain.cc).
  Status ChainGate(
      uint32_t chain, uint64_t version, uint32_t ost, bool read, ChainRouter::Route* route);
  void ChainWrite(net::ServerCall call, OstStore* store, pb::WriteReq req);
  void ChainSync(net::ServerCall call, OstStore* store, pb::SyncReq req);
  void ChainPunch(net::ServerCall call, OstStore* store, pb::PunchReq req);
  void ChainDestroy(net::ServerCall call, OstStore* store, pb::DestroyReq req);
  // Resync (oss_resync.cc): the member side of a head's check and copy, and the head's loop.
  // Resync and repair requests come from the cluster's key only (peer OSSes).
  Status CheckPeer(const net::ServerCall& call) const;
  // The OST a resync request names, after the peer and chain checks; a serving member only
  // when `may_serve` (a repair).
  Result<OstStore*> ResyncTarget(
      const net::ServerCall& call, uint32_t chain, uint64_t version, uint32_t ost, bool may_serve);
  void HandleResyncCheck(net::ServerCall call);
  void HandleResyncPut(net::ServerCall call);
  void ResyncLoop();
  // Brings `w.member` up to date with this OSS's copy; false when cut short (stopping, or the
  // chain changed), to be started again.
  bool RunResync(const ChainRouter::ResyncWork& w);
  // Copies one object to the member under the head's write order. Adds the bytes sent.
  Status CopyObject(const ChainRouter::ResyncWork& w, OstStore* store, const ObjectId& id);
  // Sends this OSS's copy of `id` on OST `from` (verified) to member `to` of `chain` at
  // `to_addr` in ResyncPut pieces; the caller holds the head's write order of the object.
  // `current` gives the chain's version, false when the copy is no longer wanted.
  struct Pacer {
    int64_t start_ms = 0;
    uint64_t bytes = 0;
  };
  Status SendCopy(uint32_t chain,
                  OstStore* from,
                  const ObjectId& id,
                  uint32_t to,
                  const std::string& to_addr,
                  bool repair,
                  const std::function<bool(uint64_t*)>& current,
                  uint64_t rate,
                  Pacer* pacer,
                  bool lock_pieces = false);
  // Sleeps as long as `rate` bytes/s asks for `bytes` more; false when stopping.
  bool Pace(Pacer* p, uint64_t rate, uint64_t bytes);
  // A request to a peer OSS, waited for (resync thread only).
  Result<net::Reply> CallPeer(const std::string& addr,
                              net::MsgType type,
                              std::shared_ptr<google::protobuf::MessageLite> req,
                              std::vector<net::ConstSpan> data,
                              int timeout_ms = 20000);
  // Whether `w` is still to do: the member syncing since w.since and a local OST the head.
  bool ResyncCurrent(const ChainRouter::ResyncWork& w, uint64_t* version) const;
  bool Stopping();
  // Scrubbing (oss_scrub.cc).
  void ScrubLoop();
  // Verifies one object; a bad one is repaired from a good copy when it has one. Counts in st.
  void ScrubObject(OstStore* store, const ObjectId& id, uint32_t chain, pb::ScrubStats* st);
  // Asks the head of `chain` (this OSS, or another) to rewrite this OSS's copy on `bad`.
  Status RequestRepair(uint32_t chain, uint32_t bad, const ObjectId& id);
  // At the head: rewrites member `bad`'s copy from the first good one, under the write order.
  Status Repair(uint32_t chain, uint32_t bad, const ObjectId& id);
  void HandleRepair(net::ServerCall call);
  void HandleRepairPush(net::ServerCall call);
  void HandleRead(net::ServerCall call);
  // One read, parsed (a Read's body, or an entry of a ReadBatch answered through a part call).
  void ServeRead(net::ServerCall call, pb::ReadReq req);
  // Several reads in one frame: each entry served as its own Read, one reply for all.
  void HandleReadBatch(net::ServerCall call);
  // Reads the object (or, `staged`, the staging object of its restore in progress: a pin the
  // read gives back when it is over).
  void ReadObject(net::ServerCall call,
                  OstStore* store,
                  const pb::ReadReq& req,
                  std::shared_ptr<ObjectFill> staged);
  // A write whose bytes are in the client's registered region (WriteReq.shm_token).
  void WriteFromShm(net::ServerCall call, OstStore* store, const pb::WriteReq& req);
  void ReadIntoShm(net::ServerCall call,
                   OstStore* store,
                   const pb::ReadReq& req,
                   uint64_t bytes,
                   std::shared_ptr<ObjectFill> staged);
  void HandleSync(net::ServerCall call);
  void HandlePunch(net::ServerCall call);
  void HandleDestroy(net::ServerCall call);
  void HandleObjStat(net::ServerCall call);
  void HandleStatfs(net::ServerCall call);
  // HSM: one stripe object between its OST and the cold tier (hsm_mover.h), on hsm_pool_.
  void HandleHsmObj(net::ServerCall call);
  // OST work log kind 4: deletes the archived copy of a destroyed file's object on hsm_pool_;
  // the id is acknowledged with the heartbeat after the store answered.
  void RunDropCopyTask(const pb::OstTask& task);

  // Per-file read counts for the MDS's heat (docs/design.md "HSM policy"): one per read
  // request, at most kMaxReadFiles files between two heartbeats (later new files are not
  // counted until the next one); TakeFileReads moves the busiest kMaxReportedFiles into `req`.
  static constexpr size_t kMaxReadFiles = 16384;
  static constexpr size_t kMaxReportedFiles = 1024;
  void CountRead(const pb::ObjectId& obj);
  void TakeFileReads(pb::HeartbeatReq* req);

  void HeartbeatLoop();
  void WritebackLoop();
  std::string ServedAddr() const;

  Options options_;
  uint64_t epoch_ = 0;  // durability epoch, fixed at construction
  std::unique_ptr<io::IoEngine> own_engine_;
  io::IoEngine* engine_ = nullptr;
  std::unique_ptr<ThreadPool> pool_;
  std::shared_ptr<ReadBufferPool> read_pool_;  // shared by every OST
  // HSM copies block for long (whole objects through the store): threads of their own.
  std::unique_ptr<ThreadPool> hsm_pool_;
  std::unique_ptr<objstore::ObjectStore> cold_;
  std::unique_ptr<HsmMover> mover_;
  std::mutex hsm_tasks_mu_;
  std::set<uint64_t> hsm_tasks_running_;  // guarded by hsm_tasks_mu_
  std::vector<uint64_t> hsm_tasks_done_;  // guarded by hsm_tasks_mu_; for the next heartbeat
  std::map<uint32_t, std::unique_ptr<OstStore>> osts_;
  std::unique_ptr<net::RpcServer> rpc_;
  std::unique_ptr<ShmRegistry> shm_;  // null: no shared-memory reads
  std::unique_ptr<net::EventLoop> loop_;
  std::unique_ptr<ChainRouter> router_;
  std::atomic<int64_t> last_mds_ok_ms_{0};  // MonoMillis of the last answer of the MDS
  std::atomic<uint32_t> hb_interval_ms_{1000};
  std::atomic<bool> hb_paused_{false};
  bool chain_refresh_ = false;   // guarded by mu_: a request named a newer chain version
  bool heartbeat_soon_ = false;  // guarded by mu_: a resync is done; report it now
  bool resync_wake_ = false;     // guarded by mu_: the chains changed; look for resync work
  std::thread heartbeat_;
  std::thread writeback_;
  std::thread resync_;
  std::unique_ptr<ThreadPool> resync_pool_;  // the member's digests, a source's repair pushes
  std::unique_ptr<ThreadPool> repair_pool_;  // repairs this OSS runs as a chain's head
  std::thread scrub_;
  mutable std::mutex scrub_mu_;
  std::map<uint32_t, pb::ScrubStats> scrub_stats_;      // by OST; guarded by scrub_mu_
  std::set<std::pair<uint32_t, ObjectId>> scrub_lost_;  // (OST, object); guarded by scrub_mu_
  Pacer scrub_pace_;                                    // scrub thread only
  Pacer repair_pace_;                                   // repair pool (one thread) only
  Pacer push_pace_;                                     // resync pool (one thread) only
  // Resyncs as head, by (chain, member, since): their progress for the heartbeat. Entries stay
  // (done ones too, resent) until the member is no longer syncing. Guarded by resync_mu_.
  std::mutex resync_mu_;
  std::map<std::tuple<uint32_t, uint32_t, uint64_t>, pb::ResyncProgress> resyncs_;
  std::atomic<uint64_t> resync_copied_{0};
  std::atomic<uint64_t> resync_bytes_{0};
  Pacer resync_pace_;  // resync thread only

  std::unique_ptr<metrics::Registry> metrics_;
  std::map<uint32_t, OstCounters> ost_counters_;  // fixed after Start
  std::atomic<int64_t> io_queue_{0};              // OST operations submitted, not completed
  std::unique_ptr<net::HttpServer> http_;

  std::atomic<uint64_t> inflight_bytes_{0};
  std::atomic<bool> registered_{false};
  std::atomic<uint64_t> heartbeats_{0};
  std::atomic<uint64_t> read_batches_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;   // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  std::string cap_key_;    // verifies capabilities (derived from the admin key)
  std::mutex reads_mu_;
  std::unordered_map<Fid, uint64_t, FidHash> file_reads_;  // guarded by reads_mu_
  mutable std::mutex revoked_mu_;
  std::set<uint32_t> revoked_;  // client keys the MDS revoked; guarded by revoked_mu_
};

}  // namespace ciuic::oss
