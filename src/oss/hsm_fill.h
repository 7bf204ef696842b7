// Restore by stripe extents (docs/design.md "HSM"): an OSS fills an object from the cold tier
// or a data repository chunk by chunk, in the background, and a reader waits only for the
// chunks its range needs, which jump the queue.
//
// A fill writes the object under its staging name (HsmStagingId) and adopts it whole once every
// chunk is written and synced, as a blocking restore always did: the object itself is either
// absent or complete. While the fill runs, reads of the object are served from the staging
// object once their chunks are in (ObjectFill::WhenReadable), pinning it so that the adopt
// waits for them.
//
// FillEngine owns the worker threads (one pool for all fills of the OSS: chunks a reader waits
// for first, then the oldest fill's next chunk, so files complete in the order they were asked
// for) and the registry of fills in progress, plus the outcome of recent ones (a late "wait for
// it" or a retried start needs it after the fill is gone).
//
// Thread-safety: everything may be called from any thread. Callbacks run on the caller's thread
// (when they can be answered at once) or on a worker thread; they must not block for long.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/buffer.h"
#include "common/fid.h"
#include "common/status.h"
#include "oss/ost_store.h"

namespace ciuic::oss {

// Fills are fetched in chunks of this many bytes of the object (a multiple of the block size).
inline constexpr uint64_t kFillChunk = uint64_t{4} << 20;

// What a fill needs to know about its source.
struct FillSpec {
  OstStore* ost = nullptr;
  ObjectId id;
  ObjectId staging;
  uint64_t length = 0;  // the object's bytes once filled
  // Puts the object's bytes [offset, offset + len) into `buf` (already sized to len), checked
  // against whatever the source vouches for. Called from several worker threads at once.
  std::function<Status(uint64_t offset, uint64_t len, AlignedBuffer* buf)> fetch;
  // Optional: run once every chunk is written, before the sync and adopt (a repository's
  // object must still be the one imported).
  std::function<Status()> finish_check;
  std::string what;  // names the source in logs
};

class ObjectFill {
 public:
  using ReadyFn = std::function<void(Status st, bool from_staging)>;
  using DoneFn = std::function<void(Result<uint64_t>)>;

  // Chunks of `chunk` bytes (a multiple of the block size).
  ObjectFill(FillSpec spec, std::string key, uint64_t chunk);

  const ObjectId& id() const { return spec_.id; }
  const ObjectId& staging() const { return spec_.staging; }
  uint64_t length() const { return spec_.length; }

  // Calls `ready` once the object's bytes [offset, offset + len) can be read: from the staging
  // object while the fill runs (from_staging: the caller reads HsmStagingId and calls Unpin()
  // when that read is over), or from the object itself once adopted; with the fill's error if
  // it failed. The chunks it needs are fetched next.
  void WhenReadable(uint64_t offset, uint64_t len, ReadyFn ready);
  void Unpin();
  // Calls `done` with the outcome (the object's length) once the fill ends.
  void WhenDone(DoneFn done);
  // Blocks until the fill ends. Never from a network or engine thread.
  Result<uint64_t> Wait();

  // Chunks written so far (tests, metrics).
  uint64_t chunks_done() const;
  uint64_t chunk_count() const { return chunks_; }

 private:
  friend class FillEngine;
  enum class Phase { kFilling, kAdopting, kEnded };
  struct Waiter {
    uint64_t first = 0, last = 0;  // chunk range, inclusive
    ReadyFn ready;
  };

  // Chunk states.
  static constexpr uint8_t kPending = 0, kInFlight = 1, kDone = 2;

  bool RangeDoneLocked(uint64_t first, uint64_t last) const;

  const FillSpec spec_;
  const std::string key_;
  const uint64_t chunk_;
  const uint64_t chunks_;
  mutable std::mutex mu_;
  std::condition_variable pins_cv_;
  Phase phase_ = Phase::kFilling;            // CIUIC_GUARDED_BY(mu_)
  std::vector<uint8_t> state_;               // CIUIC_GUARDED_BY(mu_)
  std::deque<uint64_t> urgent_;              // CIUIC_GUARDED_BY(mu_)
  uint64_t next_ = 0;                        // CIUIC_GUARDED_BY(mu_): first chunk maybe pending
  uint64_t done_ = 0;                        // CIUIC_GUARDED_BY(mu_)
  uint64_t in_flight_ = 0;                   // CIUIC_GUARDED_BY(mu_)
  uint64_t pins_ = 0;                        // CIUIC_GUARDED_BY(mu_)
  Status failed_;                            // CIUIC_GUARDED_BY(mu_)
  std::optional<Result<uint64_t>> outcome_;  // CIUIC_GUARDED_BY(mu_)
  std::vector<Waiter> waiters_;              // CIUIC_GUARDED_BY(mu_)
  std::vector<DoneFn> done_fns_;             // CIUIC_GUARDED_BY(mu_)
};

class FillEngine {
 public:
  explicit FillEngine(int threads, uint64_t chunk = kFillChunk);
  // Stops the workers; fills still running fail ("the OSS is stopping").
  ~FillEngine();
  FillEngine(const FillEngine&) = delete;
  FillEngine& operator=(const FillEngine&) = delete;

  // The fill of object `id` on OST `ost` in progress, or nullptr. Cheap when none runs.
  std::shared_ptr<ObjectFill> Find(uint32_t ost, const ObjectId& id);
  // Starts filling spec.id, or returns the fill of it already in progress (*joined). Blocking
  // (removes what an earlier fill cut short left): call from a thread that may block.
  Result<std::shared_ptr<ObjectFill>> Start(FillSpec spec, bool* joined = nullptr);
  // A fill that ended already, when `id` was restored here lately and is still whole (of
  // `length` bytes, when given): a reader that joins late (its restore's beginner went away
  // before recording the end) needs no second copy, nor its source. nullptr otherwise.
  // Blocking (a Stat).
  std::shared_ptr<ObjectFill> EndedIfWhole(OstStore* ost,
                                           const ObjectId& id,
                                           std::optional<uint64_t> length);
  // The outcome of the last fill of `id` that ended here, if remembered.
  std::optional<Result<uint64_t>> Recent(uint32_t ost, const ObjectId& id);

  size_t active() const;

 private:
  static std::string KeyOf(uint32_t ost, const ObjectId& id);
  void Work();
  // Picks the next chunk to fetch: urgent ones of any fill first, then the oldest fill's next.
  bool PickLocked(std::shared_ptr<ObjectFill>* fill, uint64_t* chunk);
  // Called by the worker that saw the fill's last chunk end (or its failure settle).
  void Finish(const std::shared_ptr<ObjectFill>& f);
  void Remember(const std::string& key, const Result<uint64_t>& r);

  const uint64_t chunk_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // CIUIC_GUARDED_BY(mu_)
  std::condition_variable start_cv_;
  std::set<std::string> starting_;                            // CIUIC_GUARDED_BY(mu_)
  std::map<std::string, std::shared_ptr<ObjectFill>> fills_;  // CIUIC_GUARDED_BY(mu_)
  std::deque<std::shared_ptr<ObjectFill>> order_;             // CIUIC_GUARDED_BY(mu_)
  std::map<std::string, Result<uint64_t>> recent_;            // CIUIC_GUARDED_BY(mu_)
  std::deque<std::string> recent_order_;                      // CIUIC_GUARDED_BY(mu_)
  std::atomic<size_t> active_{0};
  std::vector<std::thread> threads_;
};

}  // namespace ciuic::oss
