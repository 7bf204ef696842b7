// The node cache (docs/design.md "Node cache", ARCHITECTURE Decision 14): one directory per
// machine, shared by every ciuic client process on it, holding 1 MiB blocks of files keyed by
// (FID, data_version, block index). Any change to a file moves its data_version, so a block is
// never served for another version of the file.
//
// Layout: DIR/blocks/<fan>/<mds>-<seq>-<ver>/<data_version>-<index> (docs/formats/node-cache.md):
// a header naming the key, the CRC32C of every 4 KiB slice, then the bytes. A block is written
// whole under a temporary name and renamed into place: the name is the index entry, so a filler
// killed mid-way leaves only a temporary file (removed at the next scan), never a visible half
// block. Every hit is verified against its CRCs; a bad block is removed and reported as a miss.
//
// Cross-process exclusion: fills of one block take an flock on one of kLockStripes lock files
// (DIR/locks/NNNN, chosen by the key's hash), so N processes reading one block fetch it once.
// Size: at most max_bytes of blocks, and at least min_free_ratio of the device left free; the
// least recently used blocks (by mtime, which a hit refreshes) go first.
//
// Thread-safe. Every failure of the cache itself (a full, missing or corrupt device) is logged
// once a minute and answered as a miss: a read never fails because of the cache.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/fid.h"
#include "common/status.h"

namespace ciuic::client {

inline constexpr uint64_t kNodeCacheBlock = uint64_t{1} << 20;

struct NodeCacheOptions {
  std::string dir;
  uint64_t max_bytes = uint64_t{8} << 30;
  double min_free_ratio = 0.10;  // of the cache device
};

// The node cache a client uses: `dir` (ClientOptions::node_cache_dir), else $CIUIC_NODE_CACHE,
// else the cluster file's node_cache; "none" or "off" at any step means none (dir empty). The
// size: `bytes`, else $CIUIC_NODE_CACHE_BYTES, else the cluster file's, else 8 GiB.
// The free share of the device (percent): `min_free_pct` if not negative, else
// $CIUIC_NODE_CACHE_MIN_FREE, else the cluster file's, else 10.
NodeCacheOptions ResolveNodeCache(const std::string& dir,
                                  uint64_t bytes,
                                  const std::string& cluster_dir,
                                  uint64_t cluster_bytes,
                                  double min_free_pct = -1,
                                  double cluster_min_free_pct = -1);

// Counters of every process that used the cache directory since it was made (DIR/stats, shared
// memory; docs/formats/node-cache.md).
struct NodeCacheCounters {
  uint64_t hits = 0;  // reads served from the cache
  uint64_t hit_bytes = 0;
  uint64_t fills = 0;  // blocks fetched from the OSTs and stored
  uint64_t fill_bytes = 0;
  uint64_t corrupt = 0;        // blocks that failed their checksums (removed)
  uint64_t evicted_bytes = 0;  // removed to keep the size cap or the free ratio
  uint64_t put_failures = 0;   // stores that failed (full or broken device)
  uint64_t written = 0;        // blocks cached by write-through (a writer's close)
  uint64_t written_bytes = 0;
};

struct NodeCacheStats {
  NodeCacheCounters counters;
  uint64_t blocks = 0;
  uint64_t bytes = 0;  // of block files, headers included
  uint64_t max_bytes = 0;
  uint64_t device_free = 0;
  uint64_t device_total = 0;
};

class NodeCache {
 public:
  // Creates the directories if needed, removes temporary files of dead fillers and counts what
  // the cache holds.
  static Result<std::unique_ptr<NodeCache>> Open(const NodeCacheOptions& options);
  ~NodeCache();

  // Reads block `index` of (fid, data_version) into `dst` (room for `room` bytes). Returns its
  // length, or NotFound on a miss (a corrupt block counts as one, and is removed; a block longer
  // than `room` is a miss too).
  Result<size_t> Get(const Fid& fid,
                     uint64_t data_version,
                     uint64_t index,
                     uint8_t* dst,
                     size_t room = kNodeCacheBlock);
  // Reads bytes [offset, offset + want) of block `index` into `dst`, reading and checking only
  // the 4 KiB slices that hold them (a whole block, offset 0 and want >= its length, is read
  // straight into `dst`). Returns the bytes copied (fewer when the block ends first) and sets
  // `*length` to the block's length; NotFound on a miss, as Get.
  Result<size_t> GetRange(const Fid& fid,
                          uint64_t data_version,
                          uint64_t index,
                          uint64_t offset,
                          uint64_t want,
                          uint8_t* dst,
                          size_t* length);
  // Stores a block (1..kNodeCacheBlock bytes). Best effort: a failure is logged and returned,
  // and the caller goes on without the cache.
  Status Put(
      const Fid& fid, uint64_t data_version, uint64_t index, const uint8_t* data, size_t len);

  // An exclusive lock on the fill of one block, across processes; unlocked when destroyed.
  class FillLock {
   public:
    FillLock() = default;
    explicit FillLock(int fd) : fd_(fd) {}
    FillLock(FillLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    FillLock& operator=(FillLock&& o) noexcept;
    ~FillLock();
    bool held() const { return fd_ >= 0; }

   private:
    int fd_ = -1;
  };
  // Waits for the lock (blocking). `wait` false: returns a FillLock not held if another
  // process or thread holds it.
  FillLock LockFill(const Fid& fid, uint64_t data_version, uint64_t index, bool wait = true);
  // Waits until no one holds the block's fill lock (a shared lock, taken and dropped), so the
  // readers waiting for one fill all go on at once instead of taking turns.
  void WaitFill(const Fid& fid, uint64_t data_version, uint64_t index);
  // LockFill without waiting, and when another holds the lock, WaitFill, on one open of the
  // lock file: a held lock, or one not held once the other filler let go.
  FillLock LockOrWaitFill(const Fid& fid, uint64_t data_version, uint64_t index);

  // Removes least recently used blocks until the cache holds at most `target` bytes and the
  // device has its free ratio and `room` bytes more; returns how many bytes went.
  Result<uint64_t> Evict(uint64_t target, uint64_t room = 0);
  // Removes every block (of FID `fid` only when it is valid).
  Result<uint64_t> Drop(const Fid& fid = Fid{});
  Result<NodeCacheStats> Stats();
  const std::string& dir() const { return options_.dir; }

  // A block fetched from the OSTs for a reader (a miss): counted in the shared counters, and a
  // use of the block in the plan.
  void CountFill(const Fid& fid, uint64_t data_version, uint64_t index, size_t bytes);

  // The order in which this process will read blocks (a data loader's epoch plan): while one is
  // set, eviction keeps the blocks needed soonest (Belady's rule) instead of the most recently
  // used. Blocks the plan does not need again go first (least recently used first among them),
  // then those needed latest. Each Get/GetRange hit and each CountFill of a planned block uses
  // up its next occurrence. An empty plan goes back to LRU.
  struct BlockRef {
    Fid fid;
    uint64_t data_version = 0;
    uint64_t index = 0;
  };
  void SetPlan(const std::vector<BlockRef>& order);
  // Notes a use of a block outside Get/GetRange/CountFill (a fill whose read failed, ...).
  void NoteUse(const Fid& fid, uint64_t data_version, uint64_t index);
  // The order Evict would remove the cached blocks in, first to go first (for tests and tools).
  Result<std::vector<BlockRef>> EvictionOrder();

  // Write-through: the blocks one handle writes, staged in the cache directory under temporary
  // names (a dead process's are removed by the next scan) until its close says under which
  // data version they are the file's bytes (CloseResp::sole_version). Thread-safe.
  class WriteStage {
   public:
    ~WriteStage();  // removes what was not committed
    // Copies the handle's bytes [offset, offset + len) into the staged blocks. Best effort: a
    // block that cannot be staged is left out; past the budget, new blocks are left out.
    void Write(const uint8_t* data, size_t len, uint64_t offset);
    // Moves every block the handle wrote whole (the file's last one up to `size`) into the
    // cache under `data_version`, and removes the rest. Returns how many blocks it cached.
    size_t Commit(uint64_t data_version, uint64_t size);
    // Bytes staged so far (whole blocks).
    uint64_t staged() const;

   private:
    friend class NodeCache;
    WriteStage(NodeCache* cache, const Fid& fid, uint64_t budget)
        : cache_(cache), fid_(fid), budget_(budget) {}
    struct Block {
      int fd = -1;
      std::string tmp;
      std::map<uint64_t, uint64_t> covered;  // start -> end, merged
    };
    void DropBlock(Block* b);
    NodeCache* const cache_;
    const Fid fid_;
    const uint64_t budget_;
    mutable std::mutex mu_;
    std::map<uint64_t, Block> blocks_;
    std::set<uint64_t> skipped_;  // blocks left out: never cached by this stage
    uint64_t staged_ = 0;
  };
  // A stage for a handle of `fid` open for writing; at most half the cache's size is staged.
  std::unique_ptr<WriteStage> StageWrites(const Fid& fid);

  // Counters of this process.
  uint64_t hits() const { return hits_.load(); }
  uint64_t misses() const { return misses_.load(); }
  uint64_t corrupt() const { return corrupt_.load(); }

 private:
  explicit NodeCache(const NodeCacheOptions& options) : options_(options) {}
  std::string BlockPath(const Fid& fid, uint64_t data_version, uint64_t index) const;
  std::string LockPath(const Fid& fid, uint64_t data_version, uint64_t index) const;
  // The block's lock file, opened (created on demand); -1 after one logged line.
  int OpenLockFile(const Fid& fid, uint64_t data_version, uint64_t index);
  std::string FidDir(const Fid& fid) const;
  // One line per minute at most for failures of the cache itself.
  void Complain(const std::string& what);
  // Makes room for a block file of `file_bytes`: evicts when the cache is over its size or
  // (looked at every 16th time) the device under its free share; NoSpace when the device stays
  // under it.
  Status Room(uint64_t file_bytes);
  Status MakeRoom(uint64_t file_bytes);
  bool DeviceLow(uint64_t file_bytes) const;
  // Creates a temporary file beside block `path` (its directories on demand); -1 with errno.
  int CreateTemp(const std::string& path, std::string* tmp);
  // A block file of `file_bytes` put in place.
  void Added(uint64_t file_bytes);
  // Write-through staging of every process of the cache (shared), or of this one.
  void Staged(int64_t delta);
  uint64_t StagedBytes() const;
  std::atomic<int64_t> staged_local_{0};
  // Scans the blocks: total bytes, and (when `evict_to` is not UINT64_MAX) removes the least
  // recently used until at most that many bytes remain and the device has its free ratio.
  Result<uint64_t> Scan(uint64_t evict_to, uint64_t room, uint64_t* removed, uint64_t* blocks);

  // A block file kept open with its header and CRCs (files never change once in place).
  struct OpenBlock {
    int fd = -1;
    size_t length = 0;
    uint64_t data_offset = 0;
    std::vector<uint32_t> crcs;
    std::atomic<int64_t> touched_ms{0};  // its file's mtime last set (MonoMillis)
    std::atomic<int64_t> used{0};        // MonoMillis at its last hit
    ~OpenBlock();
  };
  // Open blocks kept per process: 1024, or a quarter of the descriptor limit when lower.
  size_t max_open_ = 1024;
  struct Key {
    Fid fid;
    uint64_t data_version;
    uint64_t index;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return FidHash()(k.fid) ^ (k.data_version * 0x9E3779B97F4A7C15ull) ^ (k.index * 31);
    }
  };
  // The open block at `path` (opened, checked and remembered on first use); NotFound when it
  // is not cached, kCorruption when its header is bad. `now` is MonoMillis().
  Result<std::shared_ptr<OpenBlock>> Load(const Key& key, int64_t now);
  std::shared_ptr<OpenBlock> FindOpen(const Key& key, int64_t now);
  void ForgetOpen(const Key& key);
  void ForgetAllOpen();
  // Closes open blocks whose files were removed (evicted by another process), at most once a
  // second.
  void SweepOpen(int64_t now);
  std::atomic<int64_t> last_sweep_ms_{0};

  NodeCacheOptions options_;
  // The open blocks, in shards of their own lock and cache line: the threads of a random-read
  // job find their blocks without taking one lock word in turn.
  static constexpr size_t kOpenShards = 16;
  struct alignas(64) OpenShard {
    std::shared_mutex mu;
    std::unordered_map<Key, std::shared_ptr<OpenBlock>, KeyHash> blocks;
  };
  OpenShard open_[kOpenShards];
  OpenShard& ShardOf(const Key& key) {
    return open_[(KeyHash()(key) * 0x9E3779B97F4A7C15ull) >> 60];
  }
  std::atomic<uint64_t> used_{0};        // estimate: last scan plus this process's puts
  std::atomic<uint64_t> since_scan_{0};  // bytes this process put since the last scan
  std::atomic<uint64_t> hits_{0}, misses_{0}, corrupt_{0};
  // DIR/stats mapped shared: the counters of every process (null when it cannot be mapped).
  struct SharedCounters;
  SharedCounters* shared_ = nullptr;
  void Count(size_t field, uint64_t n);
  // The bytes the cache holds: the shared count when there is one, else this process's estimate.
  uint64_t UsedBytes() const;

  // The epoch plan: for each planned block, its positions in the order and how many are used.
  struct PlanUses {
    std::vector<uint64_t> positions;
    size_t used = 0;
  };
  std::mutex plan_mu_;
  std::unordered_map<Key, PlanUses, KeyHash> plan_;  // empty: LRU
  std::atomic<bool> has_plan_{false};                // !plan_.empty(), read without plan_mu_
  // The position of the block's next use in the plan; UINT64_MAX when the plan does not need it
  // again (or there is no plan).
  uint64_t NextUse(const Key& key);
  void Used(const Key& key);
  struct ScanEntry {
    int64_t mtime_ns = 0;
    uint64_t bytes = 0;
    std::string path;
    Key key;
    bool has_key = false;
  };
  // The key a block file's path names; false for other files.
  static bool ParseBlockPath(const std::filesystem::path& p, Key* key);
  // Sorts `entries` into the order eviction removes them.
  void SortForEviction(std::vector<ScanEntry>* entries);
  std::atomic<uint64_t> tmp_seq_{0};
  std::atomic<uint64_t> puts_{0};
  std::atomic<int64_t> low_until_ms_{0};  // MonoMillis before which puts are refused
  std::mutex scan_mu_;
  std::mutex complain_mu_;
  int64_t last_complaint_ms_ = 0;
};

}  // namespace ciuic::client
