// OstStore: one OST, i.e. one directory of stripe objects with per-block checksums
// (docs/formats/ost-disk.md, Decisions 1, 2, 3, 5 and 6 of the architecture).
//
// - The directory carries a stamp (cluster uuid, OST index, format version) checked on every
//   open and held with an exclusive lock, so two processes never serve one OST.
// - An object is created by its first write, is a file named ObjectId::FileName() under
//   objects/, and is read and written with O_DIRECT through the IoEngine. Its exact length
//   lives in the header of its checksum file.
// - Every 4 KiB block has a CRC32C with two slots (new and previous) so a crash between data and
//   checksum never makes synced data look corrupt; a durable dirty log marks object regions
//   written since their last sync, and recovery after an unclean stop recomputes the blocks of
//   those regions that match neither slot.
// - Destroyed objects leave tombstones; later writes to them fail with kStale.
//
// Threads: async operations run their IO on the engine's threads and their blocking steps
// (opening objects, fsync, unlink) on a small blocking pool; callbacks run on either. Writes
// update the checksum file with small buffered writes of whole 4 KiB pages (page cache, no
// read-before-write) on the calling thread.
// Thread-safety: all methods may be called concurrently. One client never has two overlapping
// writes in flight (Decision 6); writes that share a partial block are serialized here.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/buffer.h"
#include "common/fid.h"
#include "common/status.h"
#include "common/thread_pool.h"
#include "io/io_engine.h"
#include "oss/dirty_log.h"
#include "oss/read_buffer_pool.h"

namespace ciuic::oss {

// Objects whose FID version has this bit are read and written through the page cache even on
// an OST that uses O_DIRECT: HSM staging objects (HsmStagingId), which a restore fills and its
// readers read back at once, so the read-back costs no second trip to the disk.
inline constexpr uint32_t kBufferedVerBit = 0x80000000u;

struct ObjStat {
  bool exists = false;
  uint64_t length = 0;
};

// What a read returns: the whole 4 KiB blocks covering the request, zero-filled past the
// object's end, and for each block its two stored checksums.
struct ReadResult {
  uint64_t aligned_offset = 0;
  uint64_t object_length = 0;
  bool exists = false;
  std::shared_ptr<AlignedBuffer> data;  // size = 4 KiB * blocks (null for ReadIntoAsync)
  uint64_t dest_len = 0;                // ReadIntoAsync: bytes of whole blocks placed in dest
  // Two real CRC32C values per block, in block order: slot 0 (latest write), slot 1 (previous).
  // A block is intact when its CRC32C equals either.
  std::vector<uint32_t> block_crcs;
};

// Returns OK when each block of `r` matches one of its two checksums, else kCorruption naming
// `ost`, the object and the offset of the first bad block.
Status VerifyReadResult(const ReadResult& r, uint32_t ost, const ObjectId& id);

class OstStore {
 public:
  struct Options {
    std::string dir;
    uint32_t index = 0;
    std::string cluster_uuid;
    io::IoEngine* engine = nullptr;       // not owned; must outlive the store
    ThreadPool* blocking_pool = nullptr;  // not owned; null: the store makes its own
    // Open objects kept (two fds each). Beyond it the least recently used idle objects are
    // closed, unsynced ones after syncing them; only objects with operations in flight can
    // exceed it. Must be at least 1.
    size_t max_cached_objects = 4096;
    // How long a tombstone (left by Destroy) keeps refusing writes before CollectTombstones
    // may delete it: longer than any write to the destroyed object can still arrive (a client
    // session lease + the client's retry window + a request's time; docs/formats/ost-disk.md).
    // Counted from the destroy, or from the start of the store for tombstones found on disk.
    std::chrono::milliseconds tombstone_grace{std::chrono::hours(1)};
    // Tests only: when set, the tombstone clock reads this many milliseconds instead of the
    // steady clock, so a grace period never depends on how fast the test runs (ASan, load).
    const std::atomic<int64_t>* test_clock_ms = nullptr;
    // Recycles the buffers reads land in. An OSS passes one pool to all its OSTs, so the idle
    // memory it keeps is bounded per process, not per OST. Null: the store makes its own.
    std::shared_ptr<ReadBufferPool> read_pool;
  };

  // Opens (formatting on first use) the OST at `options.dir`, locks it, and recovers from an
  // unclean stop. Errors: kInvalidArgument "belongs to another cluster" / "is OST n, not m",
  // kBusy "in use by another process", kCorruption for a damaged stamp, kIoError.
  static Result<std::unique_ptr<OstStore>> Open(Options options);
  // Close()s.
  ~OstStore();
  OstStore(const OstStore&) = delete;
  OstStore& operator=(const OstStore&) = delete;

  // Refuses new operations, waits for those in flight, syncs every object with unsynced
  // writes, and writes the clean-shutdown marker. Idempotent. Returns the first sync error.
  Status Close();

  uint32_t index() const { return options_.index; }
  const std::string& dir() const { return options_.dir; }
  // The stamp's incarnation (0 for OSTs formatted before it existed).
  uint64_t incarnation() const { return incarnation_; }

  using WriteCallback = std::function<void(Result<uint64_t>)>;  // the object length after it
  using ReadCallback = std::function<void(Result<ReadResult>)>;
  using StatusCallback = std::function<void(Status)>;
  using StatCallback = std::function<void(Result<ObjStat>)>;

  // Writes `data` (its size() bytes) at `offset` of object `id`, creating the object. `data` is
  // borrowed until `cb` runs. When `offset` is 4 KiB-aligned and the buffer's capacity reaches
  // the next 4 KiB boundary, it is written in place with O_DIRECT (zero copies; the bytes between
  // size() and that boundary get overwritten with zeros); other writes go through a bounce
  // buffer. Errors: kStale (object destroyed), kNoSpace (OST full; nothing already written is
  // lost), kInvalidArgument (range beyond 16 TiB), kIoError, kUnavailable (closing or busy).
  // `chain`: the replication chain the write came through; an object it creates records it.
  void WriteAsync(const ObjectId& id,
                  uint64_t offset,
                  AlignedBuffer* data,
                  WriteCallback cb,
                  uint32_t chain = 0);
  // As WriteAsync, from memory this never writes to (a client's shared-memory region): whole
  // 4 KiB-aligned blocks at an aligned offset go to disk straight from `src`, anything else
  // through a bounce buffer. `src` is borrowed until `cb` runs; bytes that change meanwhile may
  // be stored under a checksum of other bytes, which reads then report as corrupt (the writer's
  // contract, as with O_DIRECT). Not for replicated objects (no chain).
  void WriteFromAsync(const ObjectId& id,
                      uint64_t offset,
                      std::span<const uint8_t> src,
                      WriteCallback cb);
  // Reads [offset, offset+length) as whole blocks with their checksums. Does not verify (the
  // consumer does). A never-written object reads as zeros with exists=false.
  void ReadAsync(const ObjectId& id, uint64_t offset, uint64_t length, ReadCallback cb);
  // As ReadAsync, but the covering blocks land in `dest` (4 KiB-aligned, room for them; borrowed
  // until `cb` runs): the result has no `data`, and `dest_len` bytes of blocks in dest (blocks
  // past the object's end are zeros there too).
  void ReadIntoAsync(
      const ObjectId& id, uint64_t offset, uint64_t length, uint8_t* dest, ReadCallback cb);
  // Makes every acknowledged write to `ids` durable (fdatasync of data and checksum files, and
  // of the directory after a creation).
  void SyncAsync(std::vector<ObjectId> ids, StatusCallback cb);
  // Truncates the object to `length` (zeroing the partial last block and fixing its checksum,
  // Decision 5), durably. A missing object is fine.
  void PunchAsync(const ObjectId& id, uint64_t length, StatusCallback cb);
  // Deletes the object and its checksum file, durably, leaving a tombstone. Idempotent.
  void DestroyAsync(const ObjectId& id, StatusCallback cb);
  void StatAsync(const ObjectId& id, StatCallback cb);

  // Background writeback: syncs, as a client fsync would, up to `max` cached objects (least
  // recently used first) that hold unsynced writes and were not written for `idle`. Returns how
  // many it synced. Unsynced data then does not wait for the object to be evicted (which makes
  // the reader that needs the room pay for the sync) and crash recovery has less to check.
  // Blocking; call it from a thread of its own.
  Result<size_t> SyncIdleObjects(size_t max, std::chrono::milliseconds idle);

  // Deletes up to `max` tombstones older than tombstone_grace, oldest first, and returns how
  // many. The deletions are not synced: one lost to a crash is found again at the next start
  // and collected a grace period later. Blocking; call it from a background thread.
  Result<size_t> CollectTombstones(size_t max);
  // Tombstones waiting for collection.
  size_t tombstones_pending();

  // Blocking forms. Never call them from an engine or blocking-pool thread.
  Result<uint64_t> Write(const ObjectId& id,
                         uint64_t offset,
                         std::span<const uint8_t> data,
                         uint32_t chain = 0);
  Result<ReadResult> Read(const ObjectId& id, uint64_t offset, uint64_t length);
  Status Sync(std::vector<ObjectId> ids);
  Status Punch(const ObjectId& id, uint64_t length);
  Status Destroy(const ObjectId& id);
  // Deletes the object and its checksum file, durably, WITHOUT a tombstone: HSM release, whose
  // file lives on and whose object a restore writes again. Idempotent.
  Status Release(const ObjectId& id);
  // Renames object `from` (synced by the caller) to `to`, replacing whatever `to` was, durably:
  // the checksum file first, then the data file, so `to` never exists as a data file without
  // its checksums, and a reader sees either no object `to` or all of it (HSM restore stages a
  // whole object under another name, then adopts it). `from` must have no IO in flight.
  Status Adopt(const ObjectId& from, const ObjectId& to);
  // Destroys many objects with one directory sync for all of them (the MDS's destroy tasks after
  // a large data set is removed): a directory fsync per object would take the disk from every
  // other writer. (*results)[i] is the outcome of ids[i]; each is durable once this returns.
  void DestroyMany(const std::vector<ObjectId>& ids, std::vector<Status>* results);
  Result<ObjStat> Stat(const ObjectId& id);

  // Resync (docs/design.md "Replication"). The objects created under `chain` (their checksum
  // headers say so), in name order. Blocking.
  Result<std::vector<ObjectId>> ListChainObjects(uint32_t chain);
  // Every object with the chain it was created under (0: none), in name order (the scrubber).
  Result<std::vector<std::pair<ObjectId, uint32_t>>> ListObjects();
  struct Digest {
    bool exists = false;
    uint64_t length = 0;
    uint32_t crc = 0;  // CRC32C over the length and the latest checksum of every block
  };
  // What two copies of an object compare to find whether they differ: equal digests mean equal
  // lengths and equal block checksums. Blocking.
  Result<Digest> ObjectDigest(const ObjectId& id);
  // Reads and verifies [offset, offset+length) here (tests, scrub): kCorruption naming the OST,
  // the object and the offset of the first bad block, which is also logged.
  Status VerifyRange(const ObjectId& id, uint64_t offset, uint64_t length);
  // Capacity, free bytes and device id of the OST's file system.
  Result<io::FsStat> Statfs();

  // Makes the next Close() behave like a crash: no sync, no clean-shutdown marker.
  void TEST_SkipCleanShutdown() { skip_clean_shutdown_ = true; }
  size_t TEST_CachedObjects();
  // Memory the store keeps between requests (metrics; docs/design.md, "OSS memory"): open
  // objects (at most max_cached_objects unless in use) and the checksum pages of all stores in
  // this process (4 KiB each, one per 2 MiB of a cached object that was touched).
  size_t cached_objects() { return TEST_CachedObjects(); }
  static size_t crc_pages_in_memory();
  size_t read_pool_idle_bytes() const { return read_pool_->idle_bytes(); }
  // Objects closed by the cache so far, and how many of them had to be synced first.
  uint64_t TEST_Evictions() const { return evictions_.load(); }
  uint64_t TEST_DirtyEvictions() const { return dirty_evictions_.load(); }
  uint64_t background_syncs() const { return background_syncs_.load(); }
  // Runs `fn` in every eviction that syncs unsynced objects, just before that sync (a test holds
  // an eviction there). Set it before the store is used concurrently.
  void TEST_SetBeforeEvictionSync(std::function<void()> fn) {
    test_before_eviction_sync_ = std::move(fn);
  }

 private:
  struct Object;
  struct SlotPage;
  struct WriteOp;
  struct ReadOp;
  using ObjectRef = std::shared_ptr<Object>;
  using ObjectCallback = std::function<void(Result<ObjectRef>)>;

  explicit OstStore(Options options);
  // WriteAsync and WriteFromAsync: `data` (may be written in place) or null, `src`/`len` the
  // bytes.
  void WriteImpl(const ObjectId& id,
                 uint64_t offset,
                 AlignedBuffer* data,
                 const uint8_t* src,
                 size_t len,
                 WriteCallback cb,
                 uint32_t chain);
  Status OpenImpl();
  Status Recover(const std::vector<DirtyLog::Region>& dirty);
  Status RecoverObject(const ObjectId& id, const std::vector<uint32_t>& regions);

  std::string ObjectPath(const ObjectId& id) const;
  Status OstError(const Status& s, const ObjectId* id, std::string_view what) const;

  // Returns the cached object, or loads it on the blocking pool (creating it if `create`).
  // A missing object gives a null ref when !create.
  void GetObjectAsync(const ObjectId& id, bool create, ObjectCallback cb, uint32_t chain = 0);
  Result<ObjectRef> LoadObject(const ObjectId& id, bool create, uint32_t chain = 0);
  ObjectRef CachedObject(const ObjectId& id);
  void CacheInsertLocked(const ObjectRef& obj, bool recent);
  // When more than `trigger` objects are cached, closes least recently used idle ones until at
  // most `keep` stay, syncing at most `max_dirty` unsynced ones first (an object whose sync
  // fails stays cached). The unsynced ones wait in evicting_ during their sync, which holds
  // no store lock (only OpenObjectFile's out-of-descriptors path calls this under a load lock):
  // a lookup of one of them in the meantime takes it back into
  // the cache (the same open object, so nothing is reopened from a half-synced state).
  void EvictObjects(size_t trigger, size_t keep, size_t max_dirty);
  // engine_->Open for object files; caller holds the object's load lock. Out of descriptors
  // (EMFILE/ENFILE, kUnavailable from the engine): evicts half the cache and tries once more; if
  // that fails too, kUnavailable "out of file descriptors ... retry".
  Result<io::FileHandle> OpenObjectFile(const std::string& path, int flags);
  // Loads the slot pages covering blocks [first, end) of `obj`; `done` runs when they are in.
  void EnsurePagesAsync(const ObjectRef& obj,
                        uint64_t first,
                        uint64_t end,
                        std::function<void(Status)> done);
  Status EnsurePagesSync(Object* obj, uint64_t first, uint64_t end);
  Status WriteSlotPagesLocked(Object* obj, uint64_t first, uint64_t end);
  Status WriteHeaderLocked(Object* obj, uint64_t length);

  // Write pipeline.
  void WriteMark(WriteOp* op);
  void WriteLocked(WriteOp* op);
  void WritePrepare(WriteOp* op);
  void WriteData(WriteOp* op);
  void WriteDone(WriteOp* op, Status st);
  void ResyncSlotsLocked(WriteOp* op);
  void ReadStart(ReadOp* op);
  void ReadIo(ReadOp* op, uint64_t obj_len);
  void ReadFinish(ReadOp* op, Result<size_t> got);

  // Blocking steps, run on the pool.
  Status SyncObjects(const std::vector<ObjectRef>& objs);
  Status PunchImpl(const ObjectId& id, uint64_t length);
  // sync_dir: make the removal durable now (else the caller syncs the objects directory).
  // tombstone: refuse later writes (destroy); false for an HSM release.
  Status DestroyImpl(const ObjectId& id, bool sync_dir = true, bool tombstone = true);
  Status AdoptImpl(const ObjectId& from, const ObjectId& to);
  // Takes `id` out of the object cache (under its load lock); returns it (null if not cached).
  ObjectRef UncacheLocked(const ObjectId& id);
  void AcquireExclusive(const ObjectRef& obj, std::function<void()> fn);
  void ReleaseExclusive(const ObjectRef& obj);
  void AcquireExclusiveBlocking(const ObjectRef& obj);

  // Tombstones (ost_tombstones.cc): queues one for collection; lists those on disk at start.
  void NoteTombstone(std::string name);
  Status LoadTombstones();
  std::chrono::steady_clock::time_point Now() const {
    if (options_.test_clock_ms != nullptr)
      return std::chrono::steady_clock::time_point(
          std::chrono::milliseconds(options_.test_clock_ms->load()));
    return std::chrono::steady_clock::now();
  }

  // Counts an operation in flight; false when closing (the caller answers kUnavailable).
  bool BeginOp();
  void EndOp();
  // Ends the operation BeginOp counted when it goes out of scope.
  struct OpScope {
    OstStore* store;
    ~OpScope() { store->EndOp(); }
  };
  // Runs `fn` on the blocking pool; false when its queue is full.
  bool RunBlocking(std::function<void()> fn);

  Options options_;
  io::IoEngine* const engine_;
  std::unique_ptr<ThreadPool> own_pool_;
  ThreadPool* pool_ = nullptr;
  std::string objects_dir_;
  io::FileHandle stamp_fh_ = -1;
  bool direct_io_ = true;
  uint64_t incarnation_ = 0;
  // O_DIRECT for this object's data file (never for staging objects: kBufferedVerBit).
  bool DirectFor(const ObjectId& id) const {
    return direct_io_ && (id.fid.ver & kBufferedVerBit) == 0;
  }
  std::unique_ptr<DirtyLog> dirty_log_;
  std::shared_ptr<ReadBufferPool> read_pool_;

  std::mutex cache_mu_;
  std::unordered_map<ObjectId, ObjectRef, ObjectIdHash> cache_;  // guarded by cache_mu_
  std::list<Object*> lru_;  // cache_'s objects, most recently used first; guarded by cache_mu_
  // Unsynced objects an eviction took out of the cache and is syncing before it closes them;
  // guarded by cache_mu_. CachedObject() finds them here too.
  std::unordered_map<ObjectId, ObjectRef, ObjectIdHash> evicting_;
  // Serialize loads of an object (open/create/tombstone checks) with its destroy and adopt:
  // striped by object, so loads of different objects (each an open of two files, cold ones a
  // disk read) run side by side on the blocking pool. Never held across an eviction's sync.
  static constexpr size_t kLoadStripes = 64;
  std::array<std::mutex, kLoadStripes> load_mu_;
  std::mutex& LoadMu(const ObjectId& id) { return load_mu_[ObjectIdHash{}(id) % kLoadStripes]; }
  std::atomic<uint64_t> evictions_{0};
  std::atomic<uint64_t> dirty_evictions_{0};
  std::atomic<uint64_t> background_syncs_{0};

  // Operations in flight, counted without a lock on the hot path; Close waits on ops_cv_.
  std::mutex ops_mu_;
  std::condition_variable ops_cv_;
  std::atomic<uint64_t> ops_in_flight_{0};
  std::atomic<bool> closing_{false};
  bool closed_ = false;  // guarded by ops_mu_
  std::atomic<bool> skip_clean_shutdown_{false};
  std::function<void()> test_before_eviction_sync_;

  // Tombstone file names with the time each may be collected, in that order (a FIFO: every
  // entry gets now + the same grace). Bounded by the destroys of one grace period.
  std::mutex tomb_mu_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::string>>
      tombstones_;  // guarded by tomb_mu_
};

}  // namespace ciuic::oss
