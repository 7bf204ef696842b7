// OstStore: sync, punch, destroy, stat, and recovery after an unclean stop. These run on the
// blocking pool (or, for recovery, in Open) and use blocking IO.
#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <map>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "common/logging.h"
#include "oss/ost_store.h"
#include "oss/ost_store_internal.h"

namespace ciuic::oss {
namespace {

template <typename T>
T Wait(const std::function<void(std::function<void(T)>)>& start) {
  std::promise<T> done;
  start([&done](T v) { done.set_value(std::move(v)); });
  return done.get_future().get();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Sync.

void OstStore::SyncAsync(std::vector<ObjectId> ids, StatusCallback cb) {
  if (!BeginOp()) {
    cb(Status::Unavailable(fmt::format("OST {} is shutting down", options_.index)));
    return;
  }
  auto task = std::make_shared<StatusCallback>(std::move(cb));
  bool queued = RunBlocking([this, ids = std::move(ids), task] {
    // An object neither cached nor being evicted has nothing unsynced: an eviction syncs an
    // object before it lets go of it, and CachedObject() finds one whose sync is running (the
    // sync below then waits for it on the object's sync_mu).
    std::vector<ObjectRef> objs;
    for (const ObjectId& id : ids) {
      if (ObjectRef obj = CachedObject(id))
        objs.push_back(std::move(obj));
    }
    (*task)(SyncObjects(objs));
    EndOp();
  });
  if (!queued) {
    (*task)(Status::Unavailable(fmt::format("OST {}: blocking queue full", options_.index)));
    EndOp();
  }
}

// Each object's sync retires the current dirty epoch: writes that start afterwards mark their
// regions again (durably, with a newer sequence), and writes already counted in the old epoch
// are waited for, so the fdatasync covers every write the clean record claims.
Status OstStore::SyncObjects(const std::vector<ObjectRef>& objs) {
  struct Done {
    Object* obj;
    uint64_t seq;
    bool had_marks;
    bool created;
  };
  std::vector<Done> done;
  Status first_error;
  bool any_created = false;
  for (const ObjectRef& ref : objs) {
    Object* obj = ref.get();
    std::lock_guard<std::mutex> sync_lock(obj->sync_mu);
    Done d{obj, 0, false, false};
    {
      std::unique_lock<std::mutex> lock(obj->mu);
      if (obj->destroyed)
        continue;
      const uint64_t old = obj->epoch++;
      d.had_marks = !obj->marked_regions.empty();
      obj->marked_regions.clear();
      d.seq = obj->last_mark_seq;
      obj->cv.wait(lock, [&] { return obj->writes_in_epoch[old & 1] == 0; });
      d.created = obj->created_unsynced;
    }
    if (!d.had_marks && !d.created)
      continue;
    Status st = engine_->Fdatasync(obj->data_fh);
    if (st.ok())
      st = engine_->Fdatasync(obj->crc_fh);
    if (!st.ok()) {
      // The marks stay in the dirty log (no clean record), so a crash still recovers them.
      if (first_error.ok())
        first_error = OstError(st, &obj->id, "sync");
      continue;
    }
    any_created |= d.created;
    done.push_back(d);
  }
  if (any_created) {
    Status st = engine_->SyncDir(objects_dir_);
    if (!st.ok()) {
      if (first_error.ok())
        first_error = OstError(st, nullptr, "sync directory");
      // Objects whose names are not durable cannot be called clean.
      done.erase(std::remove_if(done.begin(), done.end(), [](const Done& d) { return d.created; }),
                 done.end());
    }
  }
  for (const Done& d : done) {
    if (d.created) {
      std::lock_guard<std::mutex> lock(d.obj->mu);
      d.obj->created_unsynced = false;
    }
    if (d.had_marks) {
      Status st = dirty_log_->Clean(d.obj->id, d.seq);
      // Only costs a needless check after a crash.
      if (!st.ok())
        LOG_WARN("OST {}: dirty log clean: {}", options_.index, st.ToString());
    }
  }
  return first_error;
}

Status OstStore::Sync(std::vector<ObjectId> ids) {
  return Wait<Status>([&](StatusCallback cb) { SyncAsync(std::move(ids), std::move(cb)); });
}

// ---------------------------------------------------------------------------------------------
// Punch (truncate).

void OstStore::PunchAsync(const ObjectId& id, uint64_t length, StatusCallback cb) {
  if (!BeginOp()) {
    cb(Status::Unavailable(fmt::format("OST {} is shutting down", options_.index)));
    return;
  }
  auto task = std::make_shared<StatusCallback>(std::move(cb));
  if (!RunBlocking([this, id, length, task] {
        (*task)(PunchImpl(id, length));
        EndOp();
      })) {
    (*task)(Status::Unavailable(fmt::format("OST {}: blocking queue full", options_.index)));
    EndOp();
  }
}

Status OstStore::PunchImpl(const ObjectId& id, uint64_t length) {
  if (length > kMaxObjectSize)
    return Status::InvalidArgument("punch length beyond 16 TiB");
  CIUIC_ASSIGN_OR_RETURN(ObjectRef obj, LoadObject(id, false));
  if (obj == nullptr)
    return Status::OK();  // never written: nothing to cut
  AcquireExclusiveBlocking(obj);
  struct Release {
    OstStore* store;
    const ObjectRef& obj;
    ~Release() { store->ReleaseExclusive(obj); }
  } release{this, obj};

  uint64_t old_len;
  {
    std::lock_guard<std::mutex> lock(obj->mu);
    if (obj->destroyed)
      return Status::OK();
    old_len = obj->length;
    if (length >= old_len) {
      // Growing only moves the length: the bytes past the old length are zeros already.
      if (length > old_len) {
        CIUIC_RETURN_IF_ERROR(OstError(WriteHeaderLocked(obj.get(), length), &id, "punch"));
        obj->length = length;
      }
    }
  }
  if (length >= old_len) {
    return OstError(engine_->Fdatasync(obj->crc_fh), &id, "punch sync");
  }

  // The rewritten partial block needs the usual protection: a durable mark first.
  const uint32_t region = static_cast<uint32_t>(length / kDirtyRegionSize);
  for (;;) {
    uint64_t epoch;
    {
      std::lock_guard<std::mutex> lock(obj->mu);
      if (std::find(obj->marked_regions.begin(), obj->marked_regions.end(), region) !=
          obj->marked_regions.end()) {
        break;
      }
      epoch = obj->epoch;
    }
    CIUIC_ASSIGN_OR_RETURN(uint64_t seq, dirty_log_->Mark(id, {region}));
    std::lock_guard<std::mutex> lock(obj->mu);
    if (obj->epoch == epoch) {
      obj->marked_regions.push_back(region);
      obj->last_mark_seq = std::max(obj->last_mark_seq, seq);
      break;
    }
  }

  const uint64_t nblocks = (length + kBlockSize - 1) / kBlockSize;
  if (length % kBlockSize != 0) {
    // Zero the tail of the new last block (the truncate below does it on disk) and fix its
    // checksum first, keeping the old one in slot 1: a crash in between verifies either way.
    const uint64_t b = length / kBlockSize;
    CIUIC_RETURN_IF_ERROR(EnsurePagesSync(obj.get(), b, b + 1));
    AlignedBuffer block(kBlockSize);
    CIUIC_ASSIGN_OR_RETURN(
        size_t n, engine_->RunSync(io::IoOp{io::IoKind::kRead, obj->data_fh, b * kBlockSize,
                                            block.data(), kBlockSize}));
    std::memset(block.data() + n, 0, kBlockSize - n);
    std::memset(block.data() + length % kBlockSize, 0, kBlockSize - length % kBlockSize);
    uint32_t crc = Crc32c(block.data(), kBlockSize) ^ ZeroBlockCrc();
    std::lock_guard<std::mutex> lock(obj->mu);
    uint32_t& s0 = obj->SlotRef(b, 0);
    obj->SlotRef(b, 1) = s0;
    s0 = crc;
    CIUIC_RETURN_IF_ERROR(OstError(WriteSlotPagesLocked(obj.get(), b, b + 1), &id, "punch"));
  }
  const uint64_t pages_needed = (nblocks + kBlocksPerCrcPage - 1) / kBlocksPerCrcPage;
  if (nblocks % kBlocksPerCrcPage != 0) {
    CIUIC_RETURN_IF_ERROR(EnsurePagesSync(obj.get(), nblocks - 1, nblocks));
  }
  {
    std::lock_guard<std::mutex> lock(obj->mu);
    CIUIC_RETURN_IF_ERROR(OstError(engine_->Truncate(obj->data_fh, length), &id, "punch"));
    obj->physical_size = length;
    // Slots past the end go: a later write there starts from zero blocks again.
    for (auto it = obj->pages.begin(); it != obj->pages.end();) {
      it = it->first >= pages_needed ? obj->pages.erase(it) : std::next(it);
    }
    if (nblocks % kBlocksPerCrcPage != 0) {
      SlotPage* page = obj->pages[pages_needed - 1].get();
      std::fill(page->v + (nblocks % kBlocksPerCrcPage) * 2, page->v + kBlocksPerCrcPage * 2, 0u);
      CIUIC_RETURN_IF_ERROR(
          OstError(WriteSlotPagesLocked(obj.get(), nblocks - 1, nblocks), &id, "punch"));
    }
    CIUIC_RETURN_IF_ERROR(
        OstError(engine_->Truncate(obj->crc_fh, CrcPageOffset(pages_needed)), &id, "punch"));
    obj->crc_pages_on_disk = std::min(obj->crc_pages_on_disk, pages_needed);
    CIUIC_RETURN_IF_ERROR(OstError(WriteHeaderLocked(obj.get(), length), &id, "punch"));
    obj->length = length;
  }
  return SyncObjects({obj});
}

Status OstStore::Punch(const ObjectId& id, uint64_t length) {
  return Wait<Status>([&](StatusCallback cb) { PunchAsync(id, length, std::move(cb)); });
}

// ---------------------------------------------------------------------------------------------
// Destroy.

void OstStore::DestroyAsync(const ObjectId& id, StatusCallback cb) {
  if (!BeginOp()) {
    cb(Status::Unavailable(fmt::format("OST {} is shutting down", options_.index)));
    return;
  }
  auto task = std::make_shared<StatusCallback>(std::move(cb));
  if (!RunBlocking([this, id, task] {
        (*task)(DestroyImpl(id));
        EndOp();
      })) {
    (*task)(Status::Unavailable(fmt::format("OST {}: blocking queue full", options_.index)));
    EndOp();
  }
}

Status OstStore::DestroyImpl(const ObjectId& id, bool sync_dir, bool tombstone) {
  const std::string data_path = ObjectPath(id);
  ObjectRef obj;
  {
    // Under its load lock no load can recreate the object between the tombstone and the removal.
    std::lock_guard<std::mutex> load_lock(LoadMu(id));
    if (tombstone) {
      const std::string tomb_path = data_path + std::string(kTombstoneSuffix);
      // A repeated destroy finds its tombstone: queued for collection once, not per destroy.
      const bool had_tombstone = engine_->StatPath(tomb_path).ok();
      Result<io::FileHandle> tomb = OpenObjectFile(tomb_path, O_RDWR | O_CREAT);
      if (!tomb.ok())
        return OstError(tomb.status(), &id, "destroy");
      engine_->Close(*tomb).IgnoreError();  // empty file; its name is what counts
      if (!had_tombstone)
        NoteTombstone(id.FileName() + std::string(kTombstoneSuffix));
    }
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(id);
    if (it != cache_.end()) {
      obj = std::move(it->second);
      lru_.erase(obj->lru_pos);
      cache_.erase(it);
    } else if (auto ev = evicting_.find(id); ev != evicting_.end()) {
      obj = std::move(ev->second);  // its eviction's sync may still run; it sees `destroyed`
      evicting_.erase(ev);
    }
  }
  uint64_t seq = 0;
  bool had_marks = false;
  if (obj != nullptr) {
    AcquireExclusiveBlocking(obj);
    {
      std::lock_guard<std::mutex> lock(obj->mu);
      obj->destroyed = true;
      had_marks = !obj->marked_regions.empty();
      seq = obj->last_mark_seq;
    }
    ReleaseExclusive(obj);  // waiters now see `destroyed` and fail with kStale
  }
  for (const std::string& path : {data_path, data_path + std::string(kCrcSuffix)}) {
    Status st = engine_->Unlink(path);
    if (!st.ok() && st.code() != StatusCode::kNotFound)
      return OstError(st, &id, "destroy");
  }
  if (sync_dir)
    CIUIC_RETURN_IF_ERROR(OstError(engine_->SyncDir(objects_dir_), &id, "destroy"));
  if (had_marks)
    dirty_log_->Clean(id, seq).IgnoreError();  // the files are gone anyway
  return Status::OK();
}

Status OstStore::Destroy(const ObjectId& id) {
  return Wait<Status>([&](StatusCallback cb) { DestroyAsync(id, std::move(cb)); });
}

OstStore::ObjectRef OstStore::UncacheLocked(const ObjectId& id) {
  ObjectRef obj;
  std::lock_guard<std::mutex> lock(cache_mu_);
  auto it = cache_.find(id);
  if (it != cache_.end()) {
    obj = std::move(it->second);
    lru_.erase(obj->lru_pos);
    cache_.erase(it);
  } else if (auto ev = evicting_.find(id); ev != evicting_.end()) {
    obj = std::move(ev->second);
    evicting_.erase(ev);
  }
  return obj;
}

Status OstStore::AdoptImpl(const ObjectId& from, const ObjectId& to) {
  // Whatever `to` holds goes (never with a tombstone: `to` is about to exist again).
  CIUIC_RETURN_IF_ERROR(DestroyImpl(to, /*sync_dir=*/false, /*tombstone=*/false));
  ObjectRef obj;
  {
    std::lock_guard<std::mutex> load_lock(LoadMu(from));
    obj = UncacheLocked(from);
  }
  if (obj != nullptr) {
    // Nobody may write the old name once its files moved.
    AcquireExclusiveBlocking(obj);
    {
      std::lock_guard<std::mutex> lock(obj->mu);
      obj->destroyed = true;
    }
    ReleaseExclusive(obj);
    obj.reset();
  }
  const std::string from_path = ObjectPath(from);
  const std::string to_path = ObjectPath(to);
  {
    // Under its load lock no load of `to` sees the checksum file without the data file... and
    // one that ran before sees no object at all.
    std::lock_guard<std::mutex> load_lock(LoadMu(to));
    // A destroyed object stays destroyed: a restore that filled it while its file was removed
    // must not bring it back (nothing would ever delete it). Destroy writes the tombstone under
    // the same lock too, so either it comes first and this refuses, or the adopt does and the
    // destroy removes what it adopted.
    if (engine_->StatPath(to_path + std::string(kTombstoneSuffix)).ok()) {
      return Status::Stale(fmt::format("OST {} object {} was destroyed while being restored",
                                       options_.index, to.FileName()));
    }
    CIUIC_RETURN_IF_ERROR(OstError(
        engine_->Rename(from_path + std::string(kCrcSuffix), to_path + std::string(kCrcSuffix)),
        &to, "adopt checksum file"));
    CIUIC_RETURN_IF_ERROR(OstError(engine_->Rename(from_path, to_path), &to, "adopt data file"));
  }
  return OstError(engine_->SyncDir(objects_dir_), &to, "adopt");
}

Status OstStore::Adopt(const ObjectId& from, const ObjectId& to) {
  return Wait<Status>([&](StatusCallback cb) {
    if (!BeginOp()) {
      cb(Status::Unavailable(fmt::format("OST {} is shutting down", options_.index)));
      return;
    }
    auto task = std::make_shared<StatusCallback>(std::move(cb));
    if (!RunBlocking([this, from, to, task] {
          (*task)(AdoptImpl(from, to));
          EndOp();
        })) {
      (*task)(Status::Unavailable(fmt::format("OST {}: blocking queue full", options_.index)));
      EndOp();
    }
  });
}

Status OstStore::Release(const ObjectId& id) {
  return Wait<Status>([&](StatusCallback cb) {
    if (!BeginOp()) {
      cb(Status::Unavailable(fmt::format("OST {} is shutting down", options_.index)));
      return;
    }
    auto task = std::make_shared<StatusCallback>(std::move(cb));
    if (!RunBlocking([this, id, task] {
          (*task)(DestroyImpl(id, /*sync_dir=*/true, /*tombstone=*/false));
          EndOp();
        })) {
      (*task)(Status::Unavailable(fmt::format("OST {}: blocking queue full", options_.index)));
      EndOp();
    }
  });
}

void OstStore::DestroyMany(const std::vector<ObjectId>& ids, std::vector<Status>* results) {
  results->assign(ids.size(), Status::OK());
  if (ids.empty())
    return;
  Status st = Wait<Status>([&](StatusCallback cb) {
    if (!BeginOp()) {
      cb(Status::Unavailable(fmt::format("OST {} is shutting down", options_.index)));
      return;
    }
    auto task = std::make_shared<StatusCallback>(std::move(cb));
    if (!RunBlocking([this, &ids, results, task] {
          bool any = false;
          for (size_t i = 0; i < ids.size(); ++i) {
            (*results)[i] = DestroyImpl(ids[i], /*sync_dir=*/false);
            any |= (*results)[i].ok();
          }
          // One sync makes every tombstone and removal above durable.
          Status synced =
              any ? OstError(engine_->SyncDir(objects_dir_), nullptr, "destroy") : Status::OK();
          (*task)(std::move(synced));
          EndOp();
        })) {
      (*task)(Status::Unavailable(fmt::format("OST {}: blocking queue full", options_.index)));
      EndOp();
    }
  });
  if (!st.ok()) {
    for (Status& r : *results) {
      if (r.ok())
        r = st;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Stat and statfs.

void OstStore::StatAsync(const ObjectId& id, StatCallback cb) {
  if (!BeginOp()) {
    cb(Status::Unavailable(fmt::format("OST {} is shutting down", options_.index)));
    return;
  }
  GetObjectAsync(id, false, [this, cb = std::move(cb)](Result<ObjectRef> r) {
    if (!r.ok()) {
      cb(std::move(r).status());
    } else if (*r == nullptr) {
      cb(ObjStat{});
    } else {
      std::lock_guard<std::mutex> lock((*r)->mu);
      cb(ObjStat{!(*r)->destroyed, (*r)->destroyed ? 0 : (*r)->length});
    }
    EndOp();
  });
}

Result<ObjStat> OstStore::Stat(const ObjectId& id) {
  return Wait<Result<ObjStat>>([&](StatCallback cb) { StatAsync(id, std::move(cb)); });
}

Result<io::FsStat> OstStore::Statfs() {
  Result<io::FsStat> st = engine_->StatFs(options_.dir);
  if (!st.ok())
    return OstError(st.status(), nullptr, "statfs");
  return st;
}

// ---------------------------------------------------------------------------------------------
// Recovery.

Status OstStore::Recover(const std::vector<DirtyLog::Region>& dirty) {
  std::map<ObjectId, std::vector<uint32_t>> by_object;
  for (const DirtyLog::Region& r : dirty)
    by_object[r.id].push_back(r.region);
  for (const auto& [id, regions] : by_object) {
    CIUIC_RETURN_IF_ERROR(RecoverObject(id, regions));
  }
  if (!by_object.empty())
    CIUIC_RETURN_IF_ERROR(engine_->SyncDir(objects_dir_));
  return Status::OK();
}

// Brings one object whose regions may hold unsynced blocks back to a consistent state: the
// length is the checksum header's, nothing is kept past it, and every block of the dirty
// regions that matches neither slot gets its checksum recomputed from its data.
Status OstStore::RecoverObject(const ObjectId& id, const std::vector<uint32_t>& regions) {
  const std::string data_path = ObjectPath(id);
  const std::string crc_path = data_path + std::string(kCrcSuffix);
  auto obj = std::make_shared<Object>(engine_, id);
  Result<io::FileHandle> data_fh =
      engine_->Open(data_path, O_RDWR | (DirectFor(id) ? O_DIRECT : 0));
  if (!data_fh.ok()) {
    if (data_fh.status().code() != StatusCode::kNotFound)
      return data_fh.status();
    // The creation did not survive; a checksum file alone means nothing.
    Status st = engine_->Unlink(crc_path);
    if (!st.ok() && st.code() != StatusCode::kNotFound)
      return st;
    return Status::OK();
  }
  obj->data_fh = *data_fh;
  CIUIC_ASSIGN_OR_RETURN(io::FileStat data_stat, engine_->Stat(obj->data_fh));
  bool rebuild = false;
  Result<io::FileHandle> crc_fh = engine_->Open(crc_path, O_RDWR);
  if (!crc_fh.ok()) {
    if (crc_fh.status().code() != StatusCode::kNotFound)
      return crc_fh.status();
    CIUIC_ASSIGN_OR_RETURN(obj->crc_fh, engine_->Open(crc_path, O_RDWR | O_CREAT | O_TRUNC));
    rebuild = true;
  } else {
    obj->crc_fh = *crc_fh;
    uint8_t header[kCrcHeaderSize];
    CIUIC_ASSIGN_OR_RETURN(size_t n, engine_->RunSync(io::IoOp{io::IoKind::kRead, obj->crc_fh, 0,
                                                               header, sizeof(header)}));
    Result<CrcHeader> h = CrcHeader::Decode(header, n);
    if (h.ok()) {
      obj->length = h->length;
      obj->chain = h->chain;
      CIUIC_ASSIGN_OR_RETURN(io::FileStat st, engine_->Stat(obj->crc_fh));
      obj->crc_pages_on_disk = st.size > kCrcHeaderSize
                                   ? (st.size - kCrcHeaderSize + kCrcPageSize - 1) / kCrcPageSize
                                   : 0;
    } else {
      // A torn header of an object written since its last sync: start the checksums over.
      LOG_WARN("OST {} object {}: {}; rebuilding its checksums", options_.index, id.FileName(),
               h.status().ToString());
      CIUIC_RETURN_IF_ERROR(engine_->Truncate(obj->crc_fh, 0));
      rebuild = true;
    }
  }
  if (rebuild) {
    obj->length = std::min<uint64_t>(data_stat.size, kMaxObjectSize);
    obj->crc_pages_on_disk = 0;
  }
  // Bytes past the length belong to writes whose length update was lost: not acknowledged, or
  // not synced. Cutting them also zeroes the tail of the last block.
  if (data_stat.size > obj->length) {
    CIUIC_RETURN_IF_ERROR(engine_->Truncate(obj->data_fh, obj->length));
  }
  const uint64_t nblocks = (obj->length + kBlockSize - 1) / kBlockSize;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // block ranges to check
  if (rebuild) {
    ranges.emplace_back(0, nblocks);
  } else {
    const uint64_t per_region = kDirtyRegionSize / kBlockSize;
    for (uint32_t r : regions) {
      uint64_t b0 = uint64_t{r} * per_region;
      uint64_t b1 = std::min<uint64_t>(b0 + per_region, nblocks);
      if (b0 < b1)
        ranges.emplace_back(b0, b1);
    }
  }
  const uint32_t zero = ZeroBlockCrc();
  constexpr uint64_t kChunkBlocks = 256;  // 1 MiB per read
  AlignedBuffer buf(kChunkBlocks * kBlockSize);
  uint64_t repaired = 0;
  for (auto [b0, b1] : ranges) {
    for (uint64_t c0 = b0; c0 < b1; c0 += kChunkBlocks) {
      const uint64_t c1 = std::min(b1, c0 + kChunkBlocks);
      const size_t len = static_cast<size_t>((c1 - c0) * kBlockSize);
      CIUIC_ASSIGN_OR_RETURN(
          size_t n, engine_->RunSync(io::IoOp{io::IoKind::kRead, obj->data_fh, c0 * kBlockSize,
                                              buf.data(), len}));
      std::memset(buf.data() + n, 0, len - n);
      CIUIC_RETURN_IF_ERROR(EnsurePagesSync(obj.get(), c0, c1));
      std::lock_guard<std::mutex> lock(obj->mu);
      bool changed = false;
      for (uint64_t b = c0; b < c1; ++b) {
        uint32_t crc = Crc32c(buf.data() + (b - c0) * kBlockSize, kBlockSize) ^ zero;
        if (crc == obj->Slot(b, 0))
          continue;
        if (crc == obj->Slot(b, 1)) {
          // The latest write did not reach the disk: the previous checksum becomes the latest,
          // so slot 0 always describes the data (resync compares copies by it).
          std::swap(obj->SlotRef(b, 0), obj->SlotRef(b, 1));
          changed = true;
          continue;
        }
        uint32_t& s0 = obj->SlotRef(b, 0);
        obj->SlotRef(b, 1) = s0;
        s0 = crc;
        changed = true;
        ++repaired;
      }
      if (changed)
        CIUIC_RETURN_IF_ERROR(WriteSlotPagesLocked(obj.get(), c0, c1));
    }
  }
  {
    // Drop slots past the end; rewrite the header (it may have been rebuilt).
    const uint64_t pages_needed = (nblocks + kBlocksPerCrcPage - 1) / kBlocksPerCrcPage;
    if (nblocks % kBlocksPerCrcPage != 0 && pages_needed <= obj->crc_pages_on_disk) {
      CIUIC_RETURN_IF_ERROR(EnsurePagesSync(obj.get(), nblocks - 1, nblocks));
    }
    std::lock_guard<std::mutex> lock(obj->mu);
    if (nblocks % kBlocksPerCrcPage != 0 && pages_needed <= obj->crc_pages_on_disk) {
      SlotPage* page = obj->pages[pages_needed - 1].get();
      const size_t keep = (nblocks % kBlocksPerCrcPage) * 2;
      bool stale = std::any_of(page->v + keep, page->v + kBlocksPerCrcPage * 2,
                               [](uint32_t v) { return v != 0; });
      if (stale) {
        std::fill(page->v + keep, page->v + kBlocksPerCrcPage * 2, 0u);
        CIUIC_RETURN_IF_ERROR(WriteSlotPagesLocked(obj.get(), nblocks - 1, nblocks));
      }
    }
    if (obj->crc_pages_on_disk > pages_needed) {
      CIUIC_RETURN_IF_ERROR(engine_->Truncate(obj->crc_fh, CrcPageOffset(pages_needed)));
    }
    CIUIC_RETURN_IF_ERROR(WriteHeaderLocked(obj.get(), obj->length));
  }
  CIUIC_RETURN_IF_ERROR(engine_->Fdatasync(obj->data_fh));
  CIUIC_RETURN_IF_ERROR(engine_->Fdatasync(obj->crc_fh));
  if (repaired > 0 || rebuild) {
    LOG_INFO("OST {} object {}: recomputed {} block checksum(s) after an unclean stop",
             options_.index, id.FileName(), repaired);
  }
  return Status::OK();
}

}  // namespace ciuic::oss
