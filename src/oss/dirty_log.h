// DirtyLog: the per-OST record of which object regions may hold blocks written since their last
// sync (Decision 3). A "mark" is made durable before the first unsynced write to a region, so
// after a crash recovery knows which blocks may disagree with their stored checksums; a "clean"
// record (not synced: losing one only costs a needless check) retires the marks an object sync
// covered. Marks are group-committed: concurrent writers share one fdatasync.
//
// Format: fixed 48-byte records, each with its own CRC32C (docs/formats/ost-disk.md).
// Threads: one flusher thread owned by the log. Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/fid.h"
#include "common/status.h"
#include "io/io_engine.h"

namespace ciuic::oss {

class DirtyLog {
 public:
  struct Region {
    ObjectId id;
    uint32_t region = 0;
    bool operator==(const Region&) const = default;
  };
  using MarkCallback = std::function<void(Result<uint64_t>)>;

  // Opens or creates the log at `path` and returns, in `dirty`, every region marked and not
  // cleaned since (sorted, unique). kIoError/kNoSpace from the engine.
  static Result<std::unique_ptr<DirtyLog>> Open(io::IoEngine* engine,
                                                std::string path,
                                                std::vector<Region>* dirty);
  ~DirtyLog();
  DirtyLog(const DirtyLog&) = delete;
  DirtyLog& operator=(const DirtyLog&) = delete;

  // Appends marks for `regions` of `id` and makes them durable; `cb` runs on the log's thread
  // with the sequence number of the marks (the value Clean() takes), or the write error.
  void MarkAsync(const ObjectId& id, std::vector<uint32_t> regions, MarkCallback cb);
  // Blocking MarkAsync. Never call it from the log's own thread.
  Result<uint64_t> Mark(const ObjectId& id, std::vector<uint32_t> regions);
  // Records that all marks of `id` with sequence <= `upto_seq` are covered by a sync. Not
  // synced. When no object is left marked, the log is truncated (also not synced).
  Status Clean(const ObjectId& id, uint64_t upto_seq);
  // Durably empties the log: after recovery, and at clean shutdown once everything is synced.
  Status Reset();
  // Objects currently marked and not cleaned (for tests and status).
  size_t marked_objects() const;

 private:
  struct Pending {
    ObjectId id;
    std::vector<uint32_t> regions;
    MarkCallback cb;
  };
  struct ObjMarks {
    uint64_t max_mark = 0;
    uint64_t max_clean = 0;
  };

  DirtyLog(io::IoEngine* engine, std::string path, io::FileHandle fh);
  void FlushLoop();
  void TrackLocked(const ObjectId& id, uint64_t mark_seq, uint64_t clean_seq);

  io::IoEngine* const engine_;
  const std::string path_;
  const io::FileHandle fh_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;        // guarded by mu_
  bool flushing_ = false;              // guarded by mu_: the flusher holds a batch
  bool stop_ = false;                  // guarded by mu_
  uint64_t next_seq_ = 1;              // guarded by mu_
  uint64_t size_ = 0;                  // guarded by mu_: append offset
  std::map<ObjectId, ObjMarks> live_;  // guarded by mu_: objects with marks not cleaned
  std::thread flusher_;
};

}  // namespace ciuic::oss
