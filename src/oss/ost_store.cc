// OstStore: opening, the object cache, checksum pages and the write pipeline. Reads are in
// ost_store_read.cc; sync, punch, destroy
// and crash recovery are in ost_store_ops.cc.
#include "oss/ost_store.h"

#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <random>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "common/fault.h"
#include "common/logging.h"
#include "oss/ost_store_internal.h"

namespace ciuic::oss {
namespace {

uint64_t RandomIncarnation() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0)
    v = (uint64_t{rd()} << 32) ^ rd();
  return v;
}

std::string JoinPath(const std::string& dir, std::string_view name) {
  if (!dir.empty() && dir.back() == '/')
    return dir + std::string(name);
  return dir + "/" + std::string(name);
}

std::string ParentDir(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/')
    d.pop_back();
  size_t pos = d.rfind('/');
  if (pos == std::string::npos)
    return ".";
  if (pos == 0)
    return "/";
  return d.substr(0, pos);
}

}  // namespace

// One write on its way through the pipeline: GetObject -> WriteMark -> (exclusive) ->
// WritePrepare (edge reads, slot pages) -> WriteData (checksums, slot write, data write) ->
// WriteDone.
struct OstStore::WriteOp {
  ObjectId id;
  uint64_t offset = 0;
  AlignedBuffer* data = nullptr;  // borrowed, may be written in place; null for `src`
  const uint8_t* src = nullptr;   // the bytes (data->data() or a caller's read-only memory)
  size_t len = 0;
  WriteCallback cb;
  ObjectRef obj;
  uint64_t epoch = 0;
  bool counted = false;  // counted in obj->writes_in_epoch[epoch & 1]
  bool excl = false;     // holds obj's exclusive lock

  // The aligned IO: [io_off, io_off + io_len) from io_buf (the request buffer or `bounce`).
  AlignedBuffer bounce;
  AlignedBuffer edge;  // head and tail blocks read for read-modify-write
  uint8_t* io_buf = nullptr;
  uint64_t io_off = 0;
  size_t io_len = 0;
  std::vector<uint32_t> old_slots;  // (slot0, slot1) per block before this write

  std::atomic<int> pending{0};
  std::mutex err_mu;
  Status err;
  uint64_t result_length = 0;

  uint64_t end() const { return offset + len; }
  uint64_t first_block() const { return io_off / kBlockSize; }
  uint64_t end_block() const { return (io_off + io_len) / kBlockSize; }
  void SetError(Status s) {
    std::lock_guard<std::mutex> lock(err_mu);
    if (err.ok())
      err = std::move(s);
  }
};

OstStore::OstStore(Options options)
    : options_(std::move(options)),
      engine_(options_.engine),
      read_pool_(options_.read_pool != nullptr ? options_.read_pool
                                               : std::make_shared<ReadBufferPool>(32u << 20)) {}

size_t OstStore::crc_pages_in_memory() {
  int64_t n = SlotPage::live.load(std::memory_order_relaxed);
  return n < 0 ? 0 : static_cast<size_t>(n);
}

Result<std::unique_ptr<OstStore>> OstStore::Open(Options options) {
  if (options.engine == nullptr)
    return Status::InvalidArgument("OstStore needs an IoEngine");
  if (options.dir.empty())
    return Status::InvalidArgument("OstStore needs a directory");
  if (options.cluster_uuid.empty())
    return Status::InvalidArgument("OstStore needs a cluster uuid");
  if (options.max_cached_objects == 0)
    return Status::InvalidArgument("OstStore needs max_cached_objects >= 1");
  std::unique_ptr<OstStore> store(new OstStore(std::move(options)));
  Status st = store->OpenImpl();
  if (!st.ok()) {
    store->skip_clean_shutdown_ = true;  // nothing was served; leave the disk as it is
    store->Close().IgnoreError();        // only releases what OpenImpl took
    return st;
  }
  return store;
}

Status OstStore::OpenImpl() {
  const std::string& dir = options_.dir;
  const uint32_t index = options_.index;
  if (options_.blocking_pool == nullptr) {
    own_pool_ = std::make_unique<ThreadPool>(2, 4096, fmt::format("ost{}-blk", index));
    pool_ = own_pool_.get();
  } else {
    pool_ = options_.blocking_pool;
  }
  objects_dir_ = JoinPath(dir, kObjectsDirName);
  auto ctx = [&](const Status& s) {
    return Status(s.code(), fmt::format("OST {} at {}: {}", index, dir, s.message()));
  };

  CIUIC_RETURN_IF_ERROR(ctx(engine_->MkdirAll(dir)));
  const std::string stamp_path = JoinPath(dir, kStampName);
  Result<io::FileStat> stamp_stat = engine_->StatPath(stamp_path);
  if (!stamp_stat.ok() && stamp_stat.status().code() != StatusCode::kNotFound) {
    return ctx(stamp_stat.status());
  }
  const bool fresh = !stamp_stat.ok();
  if (fresh) {
    // First use: format. The stamp goes in last-writer-wins via rename, then directories sync.
    if (engine_->StatPath(objects_dir_).ok()) {
      return Status::Corruption(
          fmt::format("OST {} at {}: objects present but the stamp file is missing", index, dir));
    }
    OstStamp stamp{kOstFormatVersion, options_.cluster_uuid, index, RandomIncarnation()};
    std::string text = stamp.Encode();
    const std::string tmp = stamp_path + ".tmp";
    CIUIC_ASSIGN_OR_RETURN(io::FileHandle fh, engine_->Open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0600));
    Status st =
        engine_->RunSync(io::IoOp{io::IoKind::kWrite, fh, 0, text.data(), text.size()}).status();
    if (st.ok())
      st = engine_->Fsync(fh);
    engine_->Close(fh).IgnoreError();  // the data is synced or we fail anyway
    CIUIC_RETURN_IF_ERROR(ctx(st));
    CIUIC_RETURN_IF_ERROR(ctx(engine_->Rename(tmp, stamp_path)));
    CIUIC_RETURN_IF_ERROR(ctx(engine_->MkdirAll(objects_dir_)));
    CIUIC_RETURN_IF_ERROR(ctx(engine_->SyncDir(dir)));
    CIUIC_RETURN_IF_ERROR(ctx(engine_->SyncDir(ParentDir(dir))));
    LOG_INFO("OST {} at {}: formatted for cluster {}", index, dir, options_.cluster_uuid);
  }

  CIUIC_ASSIGN_OR_RETURN(stamp_fh_, engine_->Open(stamp_path, O_RDWR));
  Status lock = engine_->LockFile(stamp_fh_);
  if (lock.code() == StatusCode::kBusy) {
    return Status::Busy(fmt::format("OST {} at {} is in use by another process", index, dir));
  }
  CIUIC_RETURN_IF_ERROR(ctx(lock));
  std::string text(64 << 10, '\0');
  CIUIC_ASSIGN_OR_RETURN(size_t n, engine_->RunSync(io::IoOp{io::IoKind::kRead, stamp_fh_, 0,
                                                             text.data(), text.size()}));
  text.resize(n);
  Result<OstStamp> stamp = OstStamp::Parse(text);
  if (!stamp.ok())
    return ctx(stamp.status());
  if (stamp->format_version != kOstFormatVersion) {
    return Status::NotSupported(
        fmt::format("OST {} at {} has format version {}; this build reads {}", index, dir,
                    stamp->format_version, kOstFormatVersion));
  }
  if (stamp->cluster_uuid != options_.cluster_uuid) {
    return Status::InvalidArgument(fmt::format("OST {} at {} belongs to another cluster ({})",
                                               index, dir, stamp->cluster_uuid));
  }
  if (stamp->ost_index != index) {
    return Status::InvalidArgument(
        fmt::format("OST directory {} is OST {}, not OST {}", dir, stamp->ost_index, index));
  }
  incarnation_ = stamp->incarnation;
  CIUIC_RETURN_IF_ERROR(ctx(engine_->MkdirAll(objects_dir_)));

  // Some file systems (tmpfs) refuse O_DIRECT; buffered IO is still correct there.
  {
    const std::string probe = JoinPath(objects_dir_, ".direct-probe");
    Result<io::FileHandle> fh = engine_->Open(probe, O_RDWR | O_CREAT | O_DIRECT);
    if (!fh.ok() && fh.status().code() == StatusCode::kInvalidArgument) {
      direct_io_ = false;
      LOG_WARN("OST {} at {}: O_DIRECT unsupported here, using buffered IO", index, dir);
    } else if (fh.ok()) {
      engine_->Close(*fh).IgnoreError();  // probe file only
      engine_->Unlink(probe).IgnoreError();
    }
  }

  std::vector<DirtyLog::Region> dirty;
  CIUIC_ASSIGN_OR_RETURN(dirty_log_, DirtyLog::Open(engine_, JoinPath(dir, kDirtyLogName), &dirty));
  const std::string marker = JoinPath(dir, kCleanMarkerName);
  bool clean = engine_->StatPath(marker).ok();
  if (clean) {
    // From here on a crash must be noticed: the marker goes before anything is served.
    CIUIC_RETURN_IF_ERROR(ctx(engine_->Unlink(marker)));
    CIUIC_RETURN_IF_ERROR(ctx(engine_->SyncDir(dir)));
  } else if (!fresh) {
    LOG_WARN("OST {} at {}: no clean-shutdown marker; checking {} dirty region(s)", index, dir,
             dirty.size());
  }
  CIUIC_RETURN_IF_ERROR(ctx(Recover(dirty)));
  CIUIC_RETURN_IF_ERROR(ctx(dirty_log_->Reset()));
  CIUIC_RETURN_IF_ERROR(ctx(LoadTombstones()));
  return Status::OK();
}

OstStore::~OstStore() {
  Status st = Close();
  if (!st.ok())
    LOG_ERROR("OST {}: close: {}", options_.index, st.ToString());
}

Status OstStore::Close() {
  {
    std::unique_lock<std::mutex> lock(ops_mu_);
    if (closed_)
      return Status::OK();
    closing_ = true;
    ops_cv_.wait(lock, [&] { return ops_in_flight_.load() == 0; });
  }
  Status st;
  if (!skip_clean_shutdown_ && dirty_log_ != nullptr) {
    std::vector<ObjectRef> objs;
    {
      std::lock_guard<std::mutex> lock(cache_mu_);
      for (auto& [id, obj] : cache_)
        objs.push_back(obj);
    }
    for (const ObjectRef& obj : objs) {
      // Give back the space grown ahead of writes; nothing is in flight any more.
      std::lock_guard<std::mutex> lock(obj->mu);
      if (!obj->destroyed && obj->physical_size > obj->length &&
          engine_->Truncate(obj->data_fh, obj->length).ok()) {
        obj->physical_size = obj->length;
      }
    }
    st = SyncObjects(objs);
    if (st.ok())
      st = dirty_log_->Reset();
    if (st.ok()) {
      const std::string marker = JoinPath(options_.dir, kCleanMarkerName);
      Result<io::FileHandle> fh = engine_->Open(marker, O_RDWR | O_CREAT);
      st = fh.status();
      if (fh.ok()) {
        st = engine_->Fsync(*fh);
        engine_->Close(*fh).IgnoreError();  // empty file, synced above
      }
      if (st.ok())
        st = engine_->SyncDir(options_.dir);
    }
    if (!st.ok())
      st = OstError(st, nullptr, "clean shutdown");
  }
  if (own_pool_ != nullptr)
    own_pool_->Stop();
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    lru_.clear();
    cache_.clear();
  }
  dirty_log_.reset();
  if (stamp_fh_ >= 0) {
    engine_->Close(stamp_fh_).IgnoreError();  // releases the OST lock
    stamp_fh_ = -1;
  }
  std::lock_guard<std::mutex> lock(ops_mu_);
  closed_ = true;
  return st;
}

std::string OstStore::ObjectPath(const ObjectId& id) const {
  return JoinPath(objects_dir_, id.FileName());
}

Status OstStore::OstError(const Status& s, const ObjectId* id, std::string_view what) const {
  if (s.ok())
    return s;
  if (id == nullptr) {
    return Status(s.code(), fmt::format("OST {}: {}: {}", options_.index, what, s.message()));
  }
  return Status(s.code(), fmt::format("OST {} object {}: {}: {}", options_.index, id->FileName(),
                                      what, s.message()));
}

bool OstStore::BeginOp() {
  // Count first, then check: Close sets closing_ first, then waits for the count (both seq_cst),
  // so either Close sees this op or this op sees closing_.
  ops_in_flight_.fetch_add(1);
  if (closing_.load()) {
    EndOp();
    return false;
  }
  return true;
}

void OstStore::EndOp() {
  if (ops_in_flight_.fetch_sub(1) == 1 && closing_.load()) {
    std::lock_guard<std::mutex> lock(ops_mu_);
    ops_cv_.notify_all();
  }
}

bool OstStore::RunBlocking(std::function<void()> fn) {
  return pool_->TrySubmit(std::move(fn));
}

size_t OstStore::TEST_CachedObjects() {
  std::lock_guard<std::mutex> lock(cache_mu_);
  return cache_.size();
}

// ---------------------------------------------------------------------------------------------
// Object cache.

OstStore::ObjectRef OstStore::CachedObject(const ObjectId& id) {
  std::lock_guard<std::mutex> lock(cache_mu_);
  auto it = cache_.find(id);
  if (it == cache_.end()) {
    // Being synced by an eviction: back into the cache, still open. The eviction's sync goes
    // on, and syncs of this object wait for it (Object::sync_mu).
    auto ev = evicting_.find(id);
    if (ev == evicting_.end())
      return nullptr;
    ObjectRef obj = std::move(ev->second);
    evicting_.erase(ev);
    CacheInsertLocked(obj, true);
    return obj;
  }
  lru_.splice(lru_.begin(), lru_, it->second->lru_pos);  // most recently used
  return it->second;
}

void OstStore::CacheInsertLocked(const ObjectRef& obj, bool recent) {
  obj->lru_pos = lru_.insert(recent ? lru_.begin() : lru_.end(), obj.get());
  cache_[obj->id] = obj;
}

void OstStore::GetObjectAsync(const ObjectId& id, bool create, ObjectCallback cb, uint32_t chain) {
  if (ObjectRef obj = CachedObject(id)) {
    cb(std::move(obj));
    return;
  }
  auto task = std::make_shared<ObjectCallback>(std::move(cb));
  if (!RunBlocking([this, id, create, task, chain] { (*task)(LoadObject(id, create, chain)); })) {
    (*task)(Status::Unavailable(fmt::format("OST {}: blocking queue full", options_.index)));
  }
}

Result<OstStore::ObjectRef> OstStore::LoadObject(const ObjectId& id, bool create, uint32_t chain) {
  std::unique_lock<std::mutex> load_lock(LoadMu(id));
  if (ObjectRef obj = CachedObject(id))
    return obj;
  const std::string data_path = ObjectPath(id);
  const std::string crc_path = data_path + std::string(kCrcSuffix);
  const int data_flags = O_RDWR | (DirectFor(id) ? O_DIRECT : 0);
  // Every handle opened below belongs to `obj` as soon as it is open, so an error return
  // closes it (Object's destructor).
  auto obj = std::make_shared<Object>(engine_, id);
  Result<io::FileHandle> data_fh = OpenObjectFile(data_path, data_flags);
  if (!data_fh.ok() && data_fh.status().code() != StatusCode::kNotFound) {
    return OstError(data_fh.status(), &id, "open");
  }
  if (!data_fh.ok()) {
    if (!create)
      return ObjectRef();
    if (engine_->StatPath(data_path + std::string(kTombstoneSuffix)).ok()) {
      return Status::Stale(
          fmt::format("OST {} object {} was destroyed", options_.index, id.FileName()));
    }
    // The checksum file first, so a data file never exists without one (recovery drops a
    // checksum file whose data file is missing).
    Result<io::FileHandle> crc_fh = OpenObjectFile(crc_path, O_RDWR | O_CREAT | O_TRUNC);
    if (!crc_fh.ok())
      return OstError(crc_fh.status(), &id, "create checksum file");
    obj->crc_fh = *crc_fh;
    obj->chain = chain;
    {
      std::lock_guard<std::mutex> lock(obj->mu);
      CIUIC_RETURN_IF_ERROR(OstError(WriteHeaderLocked(obj.get(), 0), &id, "create"));
    }
    data_fh = OpenObjectFile(data_path, data_flags | O_CREAT);
    if (!data_fh.ok())
      return OstError(data_fh.status(), &id, "create");
    obj->data_fh = *data_fh;
    obj->created_unsynced = true;
  } else {
    obj->data_fh = *data_fh;
    Result<io::FileHandle> crc_fh = OpenObjectFile(crc_path, O_RDWR);
    if (!crc_fh.ok()) {
      if (crc_fh.status().code() == StatusCode::kNotFound) {
        return Status::Corruption(fmt::format("OST {} object {}: checksum file is missing",
                                              options_.index, id.FileName()));
      }
      return OstError(crc_fh.status(), &id, "open checksum file");
    }
    obj->crc_fh = *crc_fh;
    CIUIC_ASSIGN_OR_RETURN(io::FileStat st, engine_->Stat(obj->crc_fh));
    CIUIC_ASSIGN_OR_RETURN(io::FileStat data_st, engine_->Stat(obj->data_fh));
    obj->physical_size = data_st.size;
    obj->crc_pages_on_disk =
        st.size > kCrcHeaderSize ? (st.size - kCrcHeaderSize + kCrcPageSize - 1) / kCrcPageSize : 0;
    // The header and the first slot page in one read: an object of up to 2 MiB (a sample, a
    // small file) needs no other checksum IO, where a read per page costs a second IO and a hop
    // through the engine on its first read (one file per sample: every object is loaded cold).
    struct {
      uint8_t header[kCrcHeaderSize];
      uint32_t page0[kBlocksPerCrcPage * 2];
    } buf;
    static_assert(sizeof(buf) == kCrcHeaderSize + kCrcPageSize);
    const size_t want = obj->crc_pages_on_disk > 0 ? sizeof(buf) : kCrcHeaderSize;
    CIUIC_ASSIGN_OR_RETURN(
        size_t n, engine_->RunSync(io::IoOp{io::IoKind::kRead, obj->crc_fh, 0, buf.header, want}));
    Result<CrcHeader> h = CrcHeader::Decode(buf.header, std::min(n, kCrcHeaderSize));
    if (!h.ok())
      return OstError(h.status(), &id, "load");
    obj->length = h->length;
    obj->chain = h->chain;
    if (n > kCrcHeaderSize) {
      // A short read (torn extension) leaves the rest as zeros, as EnsurePagesAsync does.
      auto page = std::make_unique<SlotPage>();
      std::memcpy(page->v, buf.page0, n - kCrcHeaderSize);
      obj->pages[0] = std::move(page);
    }
  }
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    CacheInsertLocked(obj, true);
  }
  const size_t cap = options_.max_cached_objects;
  // Hysteresis: once over the cap, close down to 7/8 of it, so clean objects go in batches.
  // Unsynced ones cost a sync each (batched into one directory sync), at most 64 per load,
  // paid by this load but outside its load lock, so other loads go on meanwhile.
  load_lock.unlock();
  EvictObjects(cap, cap - cap / 8, 64);  // returns at once while within the cap
  return ObjectRef(obj);
}

void OstStore::EvictObjects(size_t trigger, size_t keep, size_t max_dirty) {
  std::vector<ObjectRef> clean;
  std::vector<ObjectRef> dirty;
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() <= trigger || cache_.size() <= keep)
      return;
    const size_t excess = cache_.size() - keep;
    // Oldest first. An object is idle when only the cache holds it (new references are taken
    // under cache_mu_, so none can appear while we hold it) and no write or exclusive section
    // is pending.
    auto it = lru_.end();
    while (it != lru_.begin() && clean.size() + dirty.size() < excess) {
      --it;
      Object* obj = *it;
      auto cit = cache_.find(obj->id);
      if (cit->second.use_count() != 1 || !obj->mu.try_lock())
        continue;
      const bool busy =
          obj->excl_held || obj->writes_in_epoch[0] != 0 || obj->writes_in_epoch[1] != 0;
      const bool unsynced = !obj->marked_regions.empty() || obj->created_unsynced;
      obj->mu.unlock();
      if (busy || (unsynced && dirty.size() >= max_dirty))
        continue;
      if (unsynced)
        evicting_[obj->id] = cit->second;
      (unsynced ? dirty : clean).push_back(std::move(cit->second));
      cache_.erase(cit);
      it = lru_.erase(it);
    }
  }
  evictions_ += clean.size();
  clean.clear();  // closes their files, outside cache_mu_
  if (dirty.empty())
    return;
  // Out of the cache but still open, in evicting_: make them durable (data, checksums,
  // directory entry, clean records) before closing, as a client sync would, holding no store
  // lock. An object looked up meanwhile goes back into the cache as it is (CachedObject), and a
  // sync of it waits for this one on its sync_mu, so no sync answers before this one is done.
  if (test_before_eviction_sync_)
    test_before_eviction_sync_();
  Status st = SyncObjects(dirty);
  if (!st.ok()) {
    LOG_WARN("OST {}: keeping {} unsynced objects open: {}", options_.index, dirty.size(),
             st.ToString());
  }
  size_t closed = 0;
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    for (ObjectRef& obj : dirty) {
      auto ev = evicting_.find(obj->id);
      if (ev == evicting_.end() || ev->second != obj)
        continue;  // taken back into the cache, or destroyed
      evicting_.erase(ev);
      if (!st.ok()) {
        CacheInsertLocked(obj, false);  // stays open (and dirty) until a sync succeeds
      } else {
        ++closed;
      }
    }
  }
  evictions_ += closed;
  dirty_evictions_ += closed;
  dirty.clear();  // closes the files of those that were neither reused nor kept, unlocked
}

Result<size_t> OstStore::SyncIdleObjects(size_t max, std::chrono::milliseconds idle) {
  if (!BeginOp())
    return size_t{0};  // shutting down: Close() syncs everything anyway
  const auto cutoff = std::chrono::steady_clock::now() - idle;
  std::vector<ObjectRef> objs;
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    for (auto it = lru_.rbegin(); it != lru_.rend() && objs.size() < max; ++it) {  // oldest first
      Object* obj = *it;
      if (!obj->mu.try_lock())
        continue;  // in use right now: not idle
      const bool unsynced = !obj->marked_regions.empty() || obj->created_unsynced;
      const bool busy = obj->excl_held || obj->writes_in_epoch[0] != 0 ||
                        obj->writes_in_epoch[1] != 0 || obj->last_write > cutoff;
      obj->mu.unlock();
      if (unsynced && !busy)
        objs.push_back(cache_.find(obj->id)->second);
    }
  }
  Status st = objs.empty() ? Status::OK() : SyncObjects(objs);
  EndOp();
  if (!st.ok())
    return st;
  background_syncs_ += objs.size();
  return objs.size();
}

Result<io::FileHandle> OstStore::OpenObjectFile(const std::string& path, int flags) {
  Result<io::FileHandle> fh = engine_->Open(path, flags);
  if (fh.ok() || fh.status().code() != StatusCode::kUnavailable)
    return fh;
  const size_t cached = TEST_CachedObjects();
  LOG_WARN("OST {}: {} with {} objects open; closing idle ones and retrying", options_.index,
           fh.status().ToString(), cached);
  EvictObjects(0, cached / 2, cached);
  fh = engine_->Open(path, flags);
  if (fh.ok() || fh.status().code() != StatusCode::kUnavailable)
    return fh;
  return Status::Unavailable(
      fmt::format("OST {}: out of file descriptors ({} objects still open): {}; retry",
                  options_.index, TEST_CachedObjects(), fh.status().message()));
}

// ---------------------------------------------------------------------------------------------
// Checksum pages.

void OstStore::EnsurePagesAsync(const ObjectRef& obj,
                                uint64_t first,
                                uint64_t end,
                                std::function<void(Status)> done) {
  std::vector<uint64_t> to_load;
  if (end > first) {
    std::lock_guard<std::mutex> lock(obj->mu);
    for (uint64_t p = first / kBlocksPerCrcPage; p <= (end - 1) / kBlocksPerCrcPage; ++p) {
      if (obj->pages.count(p) != 0)
        continue;
      if (p >= obj->crc_pages_on_disk) {
        obj->pages[p] = std::make_unique<SlotPage>();
      } else {
        to_load.push_back(p);
      }
    }
  }
  if (to_load.empty()) {
    done(Status::OK());
    return;
  }
  struct Load {
    std::atomic<int> remaining;
    std::mutex mu;
    Status err;
    std::function<void(Status)> done;
  };
  auto load = std::make_shared<Load>();
  load->remaining = static_cast<int>(to_load.size());
  load->done = std::move(done);
  for (uint64_t p : to_load) {
    auto page = std::make_shared<std::unique_ptr<SlotPage>>(std::make_unique<SlotPage>());
    io::IoOp op{io::IoKind::kRead, obj->crc_fh, CrcPageOffset(p), (*page)->v, kCrcPageSize};
    engine_->SubmitAsync(op, [this, obj, load, page, p](Result<size_t> r) {
      if (r.ok()) {
        // A short read (torn extension) leaves the rest as zeros: zero blocks.
        std::lock_guard<std::mutex> lock(obj->mu);
        if (obj->pages.count(p) == 0)
          obj->pages[p] = std::move(*page);
      } else {
        std::lock_guard<std::mutex> lock(load->mu);
        if (load->err.ok())
          load->err = OstError(r.status(), &obj->id, "read checksums");
      }
      if (load->remaining.fetch_sub(1) == 1)
        load->done(load->err);
    });
  }
}

Status OstStore::EnsurePagesSync(Object* obj, uint64_t first, uint64_t end) {
  if (end <= first)
    return Status::OK();
  for (uint64_t p = first / kBlocksPerCrcPage; p <= (end - 1) / kBlocksPerCrcPage; ++p) {
    {
      std::lock_guard<std::mutex> lock(obj->mu);
      if (obj->pages.count(p) != 0)
        continue;
      if (p >= obj->crc_pages_on_disk) {
        obj->pages[p] = std::make_unique<SlotPage>();
        continue;
      }
    }
    auto page = std::make_unique<SlotPage>();
    Result<size_t> r = engine_->RunSync(
        io::IoOp{io::IoKind::kRead, obj->crc_fh, CrcPageOffset(p), page->v, kCrcPageSize});
    if (!r.ok())
      return OstError(r.status(), &obj->id, "read checksums");
    std::lock_guard<std::mutex> lock(obj->mu);
    if (obj->pages.count(p) == 0)
      obj->pages[p] = std::move(page);
  }
  return Status::OK();
}

Status OstStore::WriteSlotPagesLocked(Object* obj, uint64_t first, uint64_t end) {
  if (end <= first)
    return Status::OK();
  for (uint64_t p = first / kBlocksPerCrcPage; p <= (end - 1) / kBlocksPerCrcPage; ++p) {
    auto it = obj->pages.find(p);
    if (it == obj->pages.end())
      return Status::Internal("slot page not loaded");
    // A whole page: the page cache never has to read it first.
    Result<size_t> r = engine_->RunSync(
        io::IoOp{io::IoKind::kWrite, obj->crc_fh, CrcPageOffset(p), it->second->v, kCrcPageSize});
    if (!r.ok())
      return r.status();
    obj->crc_pages_on_disk = std::max(obj->crc_pages_on_disk, p + 1);
  }
  return Status::OK();
}

Status OstStore::WriteHeaderLocked(Object* obj, uint64_t length) {
  uint8_t page[kCrcHeaderSize];
  CrcHeader{length, obj->chain}.Encode(page);
  return engine_->RunSync(io::IoOp{io::IoKind::kWrite, obj->crc_fh, 0, page, sizeof(page)})
      .status();
}

// ---------------------------------------------------------------------------------------------
// Exclusive access (FIFO).

void OstStore::AcquireExclusive(const ObjectRef& obj, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(obj->mu);
    if (obj->excl_held) {
      obj->excl_waiters.push_back(std::move(fn));
      return;
    }
    obj->excl_held = true;
  }
  fn();
}

void OstStore::ReleaseExclusive(const ObjectRef& obj) {
  std::function<void()> next;
  {
    std::lock_guard<std::mutex> lock(obj->mu);
    if (obj->excl_waiters.empty()) {
      obj->excl_held = false;
      return;
    }
    next = std::move(obj->excl_waiters.front());
    obj->excl_waiters.pop_front();
  }
  next();  // ownership passes straight to the next waiter
}

void OstStore::AcquireExclusiveBlocking(const ObjectRef& obj) {
  std::promise<void> granted;
  AcquireExclusive(obj, [&granted] { granted.set_value(); });
  granted.get_future().wait();
}

// ---------------------------------------------------------------------------------------------
// Write pipeline.

void OstStore::WriteAsync(
    const ObjectId& id, uint64_t offset, AlignedBuffer* data, WriteCallback cb, uint32_t chain) {
  WriteImpl(id, offset, data, data->data(), data->size(), std::move(cb), chain);
}

void OstStore::WriteFromAsync(const ObjectId& id,
                              uint64_t offset,
                              std::span<const uint8_t> src,
                              WriteCallback cb) {
  WriteImpl(id, offset, nullptr, src.data(), src.size(), std::move(cb), 0);
}

void OstStore::WriteImpl(const ObjectId& id,
                         uint64_t offset,
                         AlignedBuffer* data,
                         const uint8_t* src,
                         size_t len,
                         WriteCallback cb,
                         uint32_t chain) {
  if (!BeginOp()) {
    cb(Status::Unavailable(fmt::format("OST {} is shutting down", options_.index)));
    return;
  }
  if (offset > kMaxObjectSize || len > kMaxObjectSize - offset) {
    EndOp();
    cb(Status::InvalidArgument(fmt::format("OST {}: write [{}, +{}) beyond the 16 TiB object limit",
                                           options_.index, offset, len)));
    return;
  }
  if (len == 0) {
    // Nothing to write; answer the current length without creating the object.
    GetObjectAsync(id, false, [this, cb = std::move(cb)](Result<ObjectRef> r) {
      uint64_t len = 0;
      if (r.ok() && *r != nullptr) {
        std::lock_guard<std::mutex> lock((*r)->mu);
        len = (*r)->length;
      }
      if (r.ok()) {
        cb(len);
      } else {
        cb(std::move(r).status());
      }
      EndOp();
    });
    return;
  }
  auto* op = new WriteOp;
  op->id = id;
  op->offset = offset;
  op->data = data;
  op->src = src;
  op->len = len;
  op->cb = std::move(cb);
  GetObjectAsync(
      id, true,
      [this, op](Result<ObjectRef> r) {
        if (!r.ok()) {
          WriteDone(op, std::move(r).status());
          return;
        }
        op->obj = std::move(*r);
        WriteMark(op);
      },
      chain);
}

void OstStore::WriteMark(WriteOp* op) {
  Object* obj = op->obj.get();
  const uint32_t r0 = static_cast<uint32_t>(op->offset / kDirtyRegionSize);
  const uint32_t r1 = static_cast<uint32_t>((op->end() - 1) / kDirtyRegionSize);
  std::vector<uint32_t> missing;
  uint64_t epoch;
  {
    std::lock_guard<std::mutex> lock(obj->mu);
    if (obj->destroyed) {
      // fall through to the error below, outside the lock
    } else {
      for (uint32_t r = r0; r <= r1; ++r) {
        if (std::find(obj->marked_regions.begin(), obj->marked_regions.end(), r) ==
            obj->marked_regions.end()) {
          missing.push_back(r);
        }
      }
      if (missing.empty()) {
        op->epoch = obj->epoch;
        ++obj->writes_in_epoch[op->epoch & 1];
        op->counted = true;
      }
    }
    obj->last_write = std::chrono::steady_clock::now();
    epoch = obj->epoch;
  }
  if (!op->counted && missing.empty()) {
    WriteDone(op, Status::Stale(fmt::format("OST {} object {} was destroyed", options_.index,
                                            op->id.FileName())));
    return;
  }
  if (op->counted) {
    WriteLocked(op);
    return;
  }
  // The mark must be durable before any block of the region is written (Decision 3).
  dirty_log_->MarkAsync(op->id, missing, [this, op, missing, epoch](Result<uint64_t> seq) {
    if (!seq.ok()) {
      WriteDone(op, OstError(seq.status(), &op->id, "mark dirty"));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(op->obj->mu);
      // A sync that started meanwhile retired these marks' epoch: mark again (loop).
      if (op->obj->epoch == epoch) {
        for (uint32_t r : missing)
          op->obj->marked_regions.push_back(r);
        op->obj->last_mark_seq = std::max(op->obj->last_mark_seq, *seq);
      }
    }
    WriteMark(op);
  });
}

void OstStore::WriteLocked(WriteOp* op) {
  bool partial = op->offset % kBlockSize != 0 || op->end() % kBlockSize != 0;
  if (!partial) {
    WritePrepare(op);
    return;
  }
  AcquireExclusive(op->obj, [this, op] {
    op->excl = true;
    WritePrepare(op);
  });
}

void OstStore::WritePrepare(WriteOp* op) {
  const uint64_t a0 = AlignDown(op->offset, kBlockSize);
  const uint64_t a1 = AlignUp(op->end(), kBlockSize);
  const size_t len = op->len;
  op->io_off = a0;
  op->io_len = a1 - a0;
  if (op->data != nullptr && op->offset == a0 && op->data->capacity() >= op->io_len) {
    // In place: the request buffer is the IO buffer; only its tail needs zeros.
    op->data->Resize(op->io_len);
    std::memset(op->data->data() + len, 0, op->io_len - len);
    op->data->Resize(len);
    op->io_buf = op->data->data();
  } else if (op->data == nullptr && op->offset == a0 && len == op->io_len &&
             reinterpret_cast<uintptr_t>(op->src) % kBlockSize == 0) {
    // Whole aligned blocks of a read-only source: written straight from it. Nothing below
    // writes into io_buf then (no edge block to merge), so the cast is never written through.
    op->io_buf = const_cast<uint8_t*>(op->src);
  } else {
    op->bounce.Resize(op->io_len);
    op->io_buf = op->bounce.data();
    std::memset(op->io_buf, 0, op->offset - a0);
    std::memcpy(op->io_buf + (op->offset - a0), op->src, len);
    std::memset(op->io_buf + (op->offset - a0) + len, 0, a1 - op->end());
  }

  // Edge blocks that hold bytes outside this write must be read first. Bytes at or past the
  // object's length are zeros by definition.
  uint64_t length;
  {
    std::lock_guard<std::mutex> lock(op->obj->mu);
    length = op->obj->length;
  }
  struct Edge {
    uint64_t block;
  };
  std::vector<Edge> edges;
  const uint64_t head = a0 / kBlockSize;
  const uint64_t tail = a1 / kBlockSize - 1;
  if (op->offset != a0 && a0 < length)
    edges.push_back({head});
  if (op->end() != a1 && tail * kBlockSize < length && (edges.empty() || tail != head)) {
    edges.push_back({tail});
  }
  op->pending = static_cast<int>(edges.size()) + 1;
  auto arrive = [this, op] {
    if (op->pending.fetch_sub(1) != 1)
      return;
    if (!op->err.ok()) {
      WriteDone(op, op->err);
    } else {
      WriteData(op);
    }
  };
  if (!edges.empty())
    op->edge.Resize(edges.size() * kBlockSize);
  for (size_t i = 0; i < edges.size(); ++i) {
    uint64_t block = edges[i].block;
    uint8_t* buf = op->edge.data() + i * kBlockSize;
    io::IoOp rd{io::IoKind::kRead, op->obj->data_fh, block * kBlockSize, buf, kBlockSize};
    engine_->SubmitAsync(rd, [this, op, block, buf, length, arrive](Result<size_t> r) {
      if (!r.ok()) {
        op->SetError(OstError(r.status(), &op->id, "read for read-modify-write"));
      } else {
        const uint64_t bstart = block * kBlockSize;
        // Keep the old bytes of this block outside [offset, end) and below the length.
        size_t valid = static_cast<size_t>(std::min<uint64_t>(*r, length - bstart));
        std::memset(buf + valid, 0, kBlockSize - valid);
        uint8_t* dst = op->io_buf + (bstart - op->io_off);
        if (bstart < op->offset) {
          std::memcpy(dst, buf, std::min<uint64_t>(op->offset - bstart, kBlockSize));
        }
        if (op->end() < bstart + kBlockSize) {
          size_t from = static_cast<size_t>(op->end() - bstart);
          std::memcpy(dst + from, buf + from, kBlockSize - from);
        }
      }
      arrive();
    });
  }
  EnsurePagesAsync(op->obj, op->first_block(), op->end_block(), [op, arrive](Status st) {
    if (!st.ok())
      op->SetError(std::move(st));
    arrive();
  });
}

void OstStore::WriteData(WriteOp* op) {
  Object* obj = op->obj.get();
  const uint64_t first = op->first_block();
  const size_t nblocks = op->io_len / kBlockSize;
  std::vector<uint32_t> crcs(nblocks);
  const uint32_t zero = ZeroBlockCrc();
  for (size_t i = 0; i < nblocks; ++i) {
    crcs[i] = Crc32c(op->io_buf + i * kBlockSize, kBlockSize) ^ zero;
  }
  {
    std::lock_guard<std::mutex> lock(obj->mu);
    if (obj->destroyed) {
      // Fall out below; the slots of a destroyed object no longer matter.
    } else {
      // New checksum into slot 0, the previous one kept in slot 1, written before the data.
      op->old_slots.resize(nblocks * 2);
      for (size_t i = 0; i < nblocks; ++i) {
        uint32_t& s0 = obj->SlotRef(first + i, 0);
        uint32_t& s1 = obj->SlotRef(first + i, 1);
        op->old_slots[2 * i] = s0;
        op->old_slots[2 * i + 1] = s1;
        s1 = s0;
        s0 = crcs[i];
      }
      Status st = WriteSlotPagesLocked(obj, first, first + nblocks);
      if (!st.ok()) {
        for (size_t i = 0; i < nblocks; ++i) {
          obj->SlotRef(first + i, 0) = op->old_slots[2 * i];
          obj->SlotRef(first + i, 1) = op->old_slots[2 * i + 1];
        }
        WriteSlotPagesLocked(obj, first, first + nblocks).IgnoreError();  // best effort undo
        op->SetError(OstError(st, &op->id, "write checksums"));
      }
    }
    if (obj->destroyed) {
      op->SetError(Status::Stale(
          fmt::format("OST {} object {} was destroyed", options_.index, op->id.FileName())));
    }
  }
  if (!op->err.ok()) {
    WriteDone(op, op->err);
    return;
  }
  if (engine_->sparse_files()) {
    std::lock_guard<std::mutex> lock(obj->mu);
    const uint64_t end = op->io_off + op->io_len;
    if (end > obj->physical_size) {
      // Grow the file ahead (a hole), once per 64 MiB: the writes behind it no longer extend
      // the file one at a time. Best effort: if it fails, the write extends the file itself.
      uint64_t target = std::min(AlignUp(end, kExtendAheadSize), kMaxObjectSize);
      if (engine_->Truncate(obj->data_fh, target).ok())
        obj->physical_size = target;
    }
  }
  io::IoOp wr{io::IoKind::kWrite, obj->data_fh, op->io_off, op->io_buf, op->io_len};
  engine_->SubmitAsync(wr, [this, op](Result<size_t> r) {
    Object* obj = op->obj.get();
    Status st = r.ok() ? CIUIC_FAULT("oss.write.after_data") : r.status();
    st = OstError(st, &op->id, "write");
    std::unique_lock<std::mutex> lock(obj->mu);
    if (!st.ok()) {
      ResyncSlotsLocked(op);
    } else if (op->end() > obj->length) {
      // The length follows the data: an acknowledged write is always inside it.
      st = WriteHeaderLocked(obj, op->end());
      if (st.ok()) {
        obj->length = op->end();
      } else {
        st = OstError(st, &op->id, "write length");
      }
    }
    op->result_length = obj->length;
    lock.unlock();
    WriteDone(op, std::move(st));
  });
}

void OstStore::ResyncSlotsLocked(WriteOp* op) {
  // Part of the failed write may have landed. Re-derive the checksums of its blocks from what
  // the disk holds now, so neither the old nor the new bytes ever read as corrupt, and put back
  // zeros past the object's length (holes must read as zeros once the object grows).
  Object* obj = op->obj.get();
  const uint64_t first = op->first_block();
  const size_t nblocks = op->io_len / kBlockSize;
  const uint32_t zero = ZeroBlockCrc();
  AlignedBuffer block(kBlockSize);
  for (size_t i = 0; i < nblocks; ++i) {
    const uint64_t b = first + i;
    const uint64_t bstart = b * kBlockSize;
    Result<size_t> n = engine_->RunSync(
        io::IoOp{io::IoKind::kRead, obj->data_fh, bstart, block.data(), kBlockSize});
    if (!n.ok())
      continue;  // unknown content: keep (new, old), one of which matches
    std::memset(block.data() + *n, 0, kBlockSize - *n);
    const size_t keep = static_cast<size_t>(
        std::min<uint64_t>(kBlockSize, obj->length > bstart ? obj->length - bstart : 0));
    bool junk = std::any_of(block.data() + keep, block.data() + kBlockSize,
                            [](uint8_t c) { return c != 0; });
    if (junk) {
      AlignedBuffer zeroed(kBlockSize);
      std::memcpy(zeroed.data(), block.data(), keep);
      std::memset(zeroed.data() + keep, 0, kBlockSize - keep);
      Result<size_t> w = engine_->RunSync(
          io::IoOp{io::IoKind::kWrite, obj->data_fh, bstart, zeroed.data(), kBlockSize});
      if (w.ok())
        std::memcpy(block.data(), zeroed.data(), kBlockSize);
    }
    obj->SlotRef(b, 1) = op->old_slots[2 * i];
    obj->SlotRef(b, 0) = Crc32c(block.data(), kBlockSize) ^ zero;
  }
  WriteSlotPagesLocked(obj, first, first + nblocks).IgnoreError();  // memory is right
}

void OstStore::WriteDone(WriteOp* op, Status st) {
  std::unique_ptr<WriteOp> owned(op);
  if (op->counted) {
    std::lock_guard<std::mutex> lock(op->obj->mu);
    if (--op->obj->writes_in_epoch[op->epoch & 1] == 0)
      op->obj->cv.notify_all();
  }
  if (op->excl)
    ReleaseExclusive(op->obj);
  if (!st.ok() && st.code() != StatusCode::kStale)
    LOG_WARN("{}", st.ToString());
  if (st.ok()) {
    op->cb(op->result_length);
  } else {
    op->cb(std::move(st));
  }
  owned.reset();
  EndOp();
}

}  // namespace ciuic::oss
