#include "client/node_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/config.h"
#include "common/crc32c.h"
#include "common/logging.h"
#include "common/time_util.h"

namespace ciuic::client {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'C', 'I', 'U', 'I', 'C', 'N', 'C', '1'};
constexpr size_t kHeader = 48;
constexpr size_t kSlice = 4096;
constexpr size_t kMaxSlices = kNodeCacheBlock / kSlice;
constexpr int kLockStripes = 1024;

// Header (little-endian, docs/formats/node-cache.md): magic[8], fid.seq u64, fid.mds u32,
// fid.ver u32, data_version u64, index u64, length u32, CRC32C of bytes [0, 44) u32.
struct Header {
  Fid fid;
  uint64_t data_version = 0;
  uint64_t index = 0;
  uint32_t length = 0;
};

template <typename T>
void PutLe(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i)
    p[i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
}
template <typename T>
T GetLe(const uint8_t* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    v |= uint64_t{p[i]} << (8 * i);
  return static_cast<T>(v);
}

void EncodeHeader(const Header& h, uint8_t* out) {
  std::memcpy(out, kMagic, 8);
  PutLe<uint64_t>(out + 8, h.fid.seq);
  PutLe<uint32_t>(out + 16, h.fid.mds);
  PutLe<uint32_t>(out + 20, h.fid.ver);
  PutLe<uint64_t>(out + 24, h.data_version);
  PutLe<uint64_t>(out + 32, h.index);
  PutLe<uint32_t>(out + 40, h.length);
  PutLe<uint32_t>(out + 44, Crc32c(out, 44));
}

bool DecodeHeader(const uint8_t* in, Header* h) {
  if (std::memcmp(in, kMagic, 8) != 0 || GetLe<uint32_t>(in + 44) != Crc32c(in, 44))
    return false;
  h->fid.seq = GetLe<uint64_t>(in + 8);
  h->fid.mds = GetLe<uint32_t>(in + 16);
  h->fid.ver = GetLe<uint32_t>(in + 20);
  h->data_version = GetLe<uint64_t>(in + 24);
  h->index = GetLe<uint64_t>(in + 32);
  h->length = GetLe<uint32_t>(in + 40);
  return h->length > 0 && h->length <= kNodeCacheBlock;
}

size_t Slices(size_t len) {
  return (len + kSlice - 1) / kSlice;
}

bool ProcessAlive(long pid) {
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

// A temporary file's name: "<final name>.tmp.<pid>.<n>"; its pid, or 0 when not one.
long TempOwner(const std::string& name) {
  const auto at = name.find(".tmp.");
  if (at == std::string::npos)
    return 0;
  return std::strtol(name.c_str() + at + 5, nullptr, 10);
}

}  // namespace

// DIR/stats: magic "CIUICNS1", then the counters of NodeCacheCounters in order, each a 64-bit
// atomic in shared memory, added to by every process.
struct NodeCache::SharedCounters {
  char magic[8];
  std::atomic<uint64_t> v[7];
  // Bytes of block files: set by every scan, added to by every put, so a process that opens
  // the cache needs no scan to know it. `used_valid` is 1 once a scan set it.
  std::atomic<uint64_t> used;
  std::atomic<uint64_t> used_valid;
  std::atomic<uint64_t> written;  // kWritten, kWrittenBytes
  std::atomic<uint64_t> written_bytes;
  // Bytes that writers of every process stage for write-through now (1 MiB per staged block),
  // bounded by half the cache; set again by every scan from the staged files of live processes.
  std::atomic<int64_t> staged;
};

static_assert(std::atomic<uint64_t>::is_always_lock_free);

// The counters of NodeCacheCounters, in order. kWritten and kWrittenBytes came later and lie
// after `used_valid` (a 4 KiB page, zero where never written).
enum CounterField {
  kHits,
  kHitBytes,
  kFills,
  kFillBytes,
  kCorrupt,
  kEvictedBytes,
  kPutFailures,
  kWritten,
  kWrittenBytes
};

NodeCacheOptions ResolveNodeCache(const std::string& dir,
                                  uint64_t bytes,
                                  const std::string& cluster_dir,
                                  uint64_t cluster_bytes,
                                  double min_free_pct,
                                  double cluster_min_free_pct) {
  NodeCacheOptions o;
  const char* env = std::getenv("CIUIC_NODE_CACHE");
  o.dir = !dir.empty() ? dir : (env != nullptr && *env != '\0') ? std::string(env) : cluster_dir;
  if (o.dir == "none" || o.dir == "off")
    o.dir.clear();
  o.max_bytes = bytes;
  if (const char* b = std::getenv("CIUIC_NODE_CACHE_BYTES"); o.max_bytes == 0 && b != nullptr) {
    Result<uint64_t> n = ParseSize(b);
    o.max_bytes = n.ok() ? *n : 0;
  }
  if (o.max_bytes == 0)
    o.max_bytes = cluster_bytes;
  if (o.max_bytes == 0)
    o.max_bytes = uint64_t{8} << 30;
  double pct = min_free_pct;
  if (const char* e = std::getenv("CIUIC_NODE_CACHE_MIN_FREE"); pct < 0 && e != nullptr && *e) {
    char* end = nullptr;
    const double v = std::strtod(e, &end);
    if (*end == '\0' && v >= 0 && v < 100)
      pct = v;
    else
      LOG_WARN("client: CIUIC_NODE_CACHE_MIN_FREE='{}' is not a percentage in [0, 100); ignored",
               e);
  }
  if (pct < 0)
    pct = cluster_min_free_pct;
  if (pct >= 0 && pct < 100)
    o.min_free_ratio = pct / 100.0;
  return o;
}

NodeCache::FillLock& NodeCache::FillLock::operator=(FillLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

NodeCache::FillLock::~FillLock() {
  if (fd_ >= 0)
    ::close(fd_);  // closing the only descriptor of the open file releases its flock
}

Result<std::unique_ptr<NodeCache>> NodeCache::Open(const NodeCacheOptions& options) {
  if (options.dir.empty())
    return Status::InvalidArgument("node cache: no directory given");
  if (!(options.min_free_ratio >= 0 && options.min_free_ratio < 1))
    return Status::InvalidArgument("node cache: the free ratio must be in [0, 1)");
  std::error_code ec;
  fs::create_directories(fs::path(options.dir) / "blocks", ec);
  if (!ec)
    fs::create_directories(fs::path(options.dir) / "locks", ec);
  if (ec) {
    return Status::IoError(
        fmt::format("node cache {}: cannot create it: {}", options.dir, ec.message()));
  }
  std::unique_ptr<NodeCache> c(new NodeCache(options));
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
    c->max_open_ = std::clamp<size_t>(static_cast<size_t>(nofile.rlim_cur) / 4, 16, 1024);
  {
    // The shared counters: best effort (a cache without them still works).
    const std::string stats = options.dir + "/stats";
    const int fd = ::open(stats.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    // Allocated, not a hole: a store to a hole of a mapping on a full device is a SIGBUS.
    if (fd >= 0 && ::posix_fallocate(fd, 0, 4096) == 0) {
      void* m = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (m != MAP_FAILED) {
        c->shared_ = static_cast<SharedCounters*>(m);
        if (std::memcmp(c->shared_->magic, "CIUICNS1", 8) != 0)
          std::memcpy(c->shared_->magic, "CIUICNS1", 8);
      }
    }
    if (fd >= 0)
      ::close(fd);
  }
  uint64_t used = 0;
  if (c->shared_ != nullptr && c->shared_->used_valid.load() == 1) {
    used = c->shared_->used.load();  // another process scanned: no walk of the whole cache
  } else {
    uint64_t removed = 0, blocks = 0;
    CIUIC_ASSIGN_OR_RETURN(used, c->Scan(UINT64_MAX, 0, &removed, &blocks));
  }
  if (used > options.max_bytes)
    c->Evict(options.max_bytes).status().IgnoreError();  // a full cache only misses more
  return c;
}

NodeCache::~NodeCache() {
  if (shared_ != nullptr)
    ::munmap(shared_, 4096);
}

uint64_t NodeCache::UsedBytes() const {
  return shared_ != nullptr && shared_->used_valid.load() == 1 ? shared_->used.load()
                                                               : used_.load();
}

void NodeCache::Count(size_t field, uint64_t n) {
  static_assert(sizeof(SharedCounters) <= 4096);
  if (shared_ == nullptr)
    return;
  std::atomic<uint64_t>* slot = field == kWritten        ? &shared_->written
                                : field == kWrittenBytes ? &shared_->written_bytes
                                                         : &shared_->v[field];
  slot->fetch_add(n, std::memory_order_relaxed);
}

void NodeCache::CountFill(const Fid& fid, uint64_t data_version, uint64_t index, size_t bytes) {
  Used(Key{fid, data_version, index});
  Count(kFills, 1);
  Count(kFillBytes, bytes);
}

std::string NodeCache::FidDir(const Fid& fid) const {
  return fmt::format("{}/blocks/{:02x}/{:x}-{:x}-{:x}", options_.dir, fid.seq & 0xff, fid.mds,
                     fid.seq, fid.ver);
}

std::string NodeCache::BlockPath(const Fid& fid, uint64_t data_version, uint64_t index) const {
  return fmt::format("{}/{:x}-{:x}", FidDir(fid), data_version, index);
}

void NodeCache::Complain(const std::string& what) {
  std::lock_guard<std::mutex> lock(complain_mu_);
  const int64_t now = MonoMillis();
  if (last_complaint_ms_ != 0 && now - last_complaint_ms_ < 60000)
    return;
  last_complaint_ms_ = now;
  LOG_WARN("node cache {}: {}; reading from the OSTs", options_.dir, what);
}

Result<size_t> NodeCache::Get(
    const Fid& fid, uint64_t data_version, uint64_t index, uint8_t* dst, size_t room) {
  size_t length = 0;
  CIUIC_ASSIGN_OR_RETURN(size_t got, GetRange(fid, data_version, index, 0, room, dst, &length));
  if (got != length)
    return Status::NotFound("cached block is longer than asked for");
  return got;
}

std::shared_ptr<NodeCache::OpenBlock> NodeCache::FindOpen(const Key& key, int64_t now) {
  // Hits take their shard's lock shared and stamp the block only when its stamp is older than
  // `now`: the threads of a random-read job neither queue on one mutex nor write one line.
  OpenShard& shard = ShardOf(key);
  std::shared_lock<std::shared_mutex> lock(shard.mu);
  auto it = shard.blocks.find(key);
  if (it == shard.blocks.end())
    return nullptr;
  if (it->second->used.load(std::memory_order_relaxed) != now)
    it->second->used.store(now, std::memory_order_relaxed);
  return it->second;
}

void NodeCache::ForgetOpen(const Key& key) {
  OpenShard& shard = ShardOf(key);
  std::unique_lock<std::shared_mutex> lock(shard.mu);
  shard.blocks.erase(key);
}

void NodeCache::SweepOpen(int64_t now) {
  int64_t last = last_sweep_ms_.load(std::memory_order_relaxed);
  if (now - last < 1000 || !last_sweep_ms_.compare_exchange_strong(last, now))
    return;
  for (OpenShard& shard : open_) {
    std::unique_lock<std::shared_mutex> lock(shard.mu);
    for (auto it = shard.blocks.begin(); it != shard.blocks.end();) {
      struct stat st;
      const bool gone = ::fstat(it->second->fd, &st) != 0 || st.st_nlink == 0;
      it = gone ? shard.blocks.erase(it) : std::next(it);
    }
  }
}

void NodeCache::ForgetAllOpen() {
  for (OpenShard& shard : open_) {
    std::unique_lock<std::shared_mutex> lock(shard.mu);
    shard.blocks.clear();
  }
}

NodeCache::OpenBlock::~OpenBlock() {
  if (fd >= 0)
    ::close(fd);
}

Result<std::shared_ptr<NodeCache::OpenBlock>> NodeCache::Load(const Key& key, int64_t now) {
  if (auto b = FindOpen(key, now))
    return b;
  const std::string path = BlockPath(key.fid, key.data_version, key.index);
  auto b = std::make_shared<OpenBlock>();
  b->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (b->fd < 0) {
    if (errno != ENOENT)
      Complain(fmt::format("opening {}: {}", path, std::strerror(errno)));
    return Status::NotFound("not cached");
  }
  uint8_t meta[kHeader + 4 * kMaxSlices];
  const ssize_t n = ::pread(b->fd, meta, sizeof(meta), 0);
  Header h;
  if (n < static_cast<ssize_t>(kHeader) || !DecodeHeader(meta, &h))
    return Status::Corruption("bad header");
  if (h.fid != key.fid || h.data_version != key.data_version || h.index != key.index)
    return Status::Corruption("header names another block");
  const size_t slices = Slices(h.length);
  if (n < static_cast<ssize_t>(kHeader + 4 * slices))
    return Status::Corruption("short block");
  b->length = h.length;
  b->crcs.resize(slices);
  for (size_t s = 0; s < slices; ++s)
    b->crcs[s] = GetLe<uint32_t>(meta + kHeader + 4 * s);
  b->data_offset = kHeader + 4 * slices;
  // A block filled within the last second needs no new mtime at its first hit here (each of N
  // ranks reading a block just filled would otherwise write its inode once more).
  struct stat st;
  if (::fstat(b->fd, &st) == 0 && WallMillis() - (static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 +
                                                  st.st_mtim.tv_nsec / 1000000) <
                                      1000)
    b->touched_ms = now;
  b->used = now;
  OpenShard& shard = ShardOf(key);
  const size_t max_open = std::max<size_t>(1, max_open_ / kOpenShards);
  std::unique_lock<std::shared_mutex> lock(shard.mu);
  auto [it, fresh] = shard.blocks.emplace(key, b);
  if (!fresh)
    return it->second;  // another thread loaded it meanwhile
  if (shard.blocks.size() > max_open) {
    // Close the shard's least recently used eighth at once, so this is rare.
    std::vector<std::pair<int64_t, Key>> by_use;
    by_use.reserve(shard.blocks.size());
    for (const auto& [k, ob] : shard.blocks)
      by_use.emplace_back(ob->used.load(std::memory_order_relaxed), k);
    const size_t drop = std::max<size_t>(1, shard.blocks.size() - max_open + max_open / 8);
    std::nth_element(by_use.begin(), by_use.begin() + static_cast<std::ptrdiff_t>(drop - 1),
                     by_use.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    for (size_t i = 0; i < drop; ++i) {
      if (!(by_use[i].second == key))
        shard.blocks.erase(by_use[i].second);
    }
  }
  return b;
}

Result<size_t> NodeCache::GetRange(const Fid& fid,
                                   uint64_t data_version,
                                   uint64_t index,
                                   uint64_t offset,
                                   uint64_t want,
                                   uint8_t* dst,
                                   size_t* length) {
  // Block files never change once renamed into place (a new data version is a new name), so
  // an open one, with its header and CRC table, serves every later hit with one read: the
  // slices of the range, straight into `dst` for a whole block, else through a scratch buffer
  // (a 4 KiB read of a cached block reads and checks 4 KiB, not 1 MiB). A block another
  // process evicts meanwhile still reads whole from the open file.
  // Blocks another process evicted hold their space while open here: closed within a second.
  const int64_t now = MonoMillis();
  SweepOpen(now);
  const Key key{fid, data_version, index};
  Result<std::shared_ptr<OpenBlock>> loaded = Load(key, now);
  thread_local std::unique_ptr<uint8_t[]> scratch;
  Status bad;
  size_t copied = 0;
  if (!loaded.ok()) {
    if (loaded.status().code() == StatusCode::kNotFound) {
      misses_.fetch_add(1);
      return loaded.status();
    }
    bad = loaded.status();
  } else if (offset >= (*loaded)->length || want == 0) {
    misses_.fetch_add(1);
    return Status::NotFound("range outside the cached block");
  } else {
    const OpenBlock& b = **loaded;
    const size_t len = b.length;
    const bool whole = offset == 0 && want >= len;
    const size_t s0 = whole ? 0 : offset / kSlice;
    const size_t end = whole ? len : static_cast<size_t>(std::min<uint64_t>(len, offset + want));
    const size_t s1 = Slices(end);  // one past the last slice
    const size_t span = std::min(len, s1 * kSlice) - s0 * kSlice;
    // A range of whole slices (a 4 KiB-aligned read) is read and checked in place, as a whole
    // block is; only a range that cuts a slice goes through the scratch buffer.
    const bool in_place = whole || (offset % kSlice == 0 && (end % kSlice == 0 || end == len));
    uint8_t* into = dst;
    if (!in_place) {
      if (!scratch)
        scratch.reset(new uint8_t[kNodeCacheBlock]);
      into = scratch.get();
    }
    const ssize_t got = ::pread(b.fd, into, span, static_cast<off_t>(b.data_offset + s0 * kSlice));
    if (got != static_cast<ssize_t>(span)) {
      bad = Status::Corruption("short block");
    } else {
      for (size_t s = s0; s < s1 && bad.ok(); ++s) {
        const size_t part = std::min(kSlice, len - s * kSlice);
        if (Crc32c(into + (s - s0) * kSlice, part) != b.crcs[s])
          bad = Status::Corruption(fmt::format("slice {} fails its checksum", s));
      }
    }
    copied = end - (whole ? 0 : offset);
    if (bad.ok() && !in_place)
      std::memcpy(dst, into + (offset - s0 * kSlice), copied);
    *length = len;
    // Recently used (eviction is by mtime); once a second per block is enough, and a hit
    // within it writes nothing shared.
    std::atomic<int64_t>& touched = (*loaded)->touched_ms;
    if (int64_t t = touched.load(std::memory_order_relaxed);
        bad.ok() && now - t > 1000 && touched.compare_exchange_strong(t, now))
      ::futimens(b.fd, nullptr);
  }
  if (!bad.ok()) {
    ForgetOpen(key);
    const std::string path = BlockPath(fid, data_version, index);
    corrupt_.fetch_add(1);
    Count(kCorrupt, 1);
    misses_.fetch_add(1);
    LOG_WARN("node cache: {}: {}; removed, reading from the OSTs", path, bad.message());
    ::unlink(path.c_str());
    return Status::NotFound("cached block was corrupt");
  }
  hits_.fetch_add(1);
  Used(key);
  Count(kHits, 1);
  Count(kHitBytes, copied);
  return copied;
}

bool NodeCache::DeviceLow(uint64_t file_bytes) const {
  struct statvfs vfs;
  return ::statvfs(options_.dir.c_str(), &vfs) == 0 &&
         static_cast<double>(vfs.f_bavail) * vfs.f_frsize <
             options_.min_free_ratio * static_cast<double>(vfs.f_blocks) * vfs.f_frsize +
                 static_cast<double>(file_bytes);
}

Status NodeCache::MakeRoom(uint64_t file_bytes) {
  Result<uint64_t> ev = Evict(options_.max_bytes > file_bytes
                                  ? options_.max_bytes - file_bytes - options_.max_bytes / 16
                                  : 0,
                              file_bytes);
  if (!ev.ok())
    Complain(ev.status().message());
  return ev.status();
}

Status NodeCache::Room(uint64_t file_bytes) {
  // A device that others filled under the free ratio (the cache emptied and it still was): no
  // puts for a second, rather than storing blocks only to evict them all at the next look.
  if (MonoMillis() < low_until_ms_.load()) {
    Count(kPutFailures, 1);
    return Status::NoSpace(
        fmt::format("node cache {}: the device is under its free share", options_.dir));
  }
  // A cache over its size, or a device under its free ratio (looked at every 16th put), evicts
  // before it grows.
  bool evict =
      UsedBytes() + file_bytes > options_.max_bytes ||
      since_scan_.load() >= std::min<uint64_t>(options_.max_bytes / 8, uint64_t{256} << 20);
  if (!evict && puts_.fetch_add(1) % 16 == 0)
    evict = DeviceLow(file_bytes);
  if (!evict)
    return Status::OK();
  CIUIC_RETURN_IF_ERROR(MakeRoom(file_bytes));
  if (options_.min_free_ratio > 0 && DeviceLow(file_bytes)) {
    low_until_ms_.store(MonoMillis() + 1000);
    Count(kPutFailures, 1);
    Status st = Status::NoSpace(fmt::format(
        "node cache {}: the device has less than {:.0f} % free even with the cache emptied; "
        "not caching (reads go to the OSTs)",
        options_.dir, options_.min_free_ratio * 100));
    Complain(st.message());
    return st;
  }
  return Status::OK();
}

int NodeCache::CreateTemp(const std::string& path, std::string* tmp) {
  *tmp = fmt::format("{}.tmp.{}.{}", path, static_cast<long>(::getpid()), tmp_seq_.fetch_add(1));
  int fd = ::open(tmp->c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == ENOENT) {
    // The file's directory and its fan-out parent, but never the cache's own directories: a
    // cache device that went away is not made again on whatever lies beneath its mount point.
    const fs::path dir = fs::path(path).parent_path();
    const std::string fan = dir.parent_path().string();
    if ((::mkdir(fan.c_str(), 0700) == 0 || errno == EEXIST) &&
        (::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST)) {
      fd = ::open(tmp->c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    }
  }
  return fd;
}

void NodeCache::Added(uint64_t file_bytes) {
  used_.fetch_add(file_bytes);
  if (shared_ != nullptr)
    shared_->used.fetch_add(file_bytes);
  since_scan_.fetch_add(file_bytes);
}

Status NodeCache::Put(
    const Fid& fid, uint64_t data_version, uint64_t index, const uint8_t* data, size_t len) {
  if (len == 0 || len > kNodeCacheBlock)
    return Status::InvalidArgument(fmt::format("node cache: a block of {} bytes", len));
  const uint64_t file_bytes = kHeader + 4 * Slices(len) + len;
  CIUIC_RETURN_IF_ERROR(Room(file_bytes));
  const std::string path = BlockPath(fid, data_version, index);
  std::vector<uint8_t> meta(kHeader + 4 * Slices(len));
  Header h{fid, data_version, index, static_cast<uint32_t>(len)};
  EncodeHeader(h, meta.data());
  for (size_t s = 0; s < Slices(len); ++s) {
    const size_t part = std::min(kSlice, len - s * kSlice);
    PutLe<uint32_t>(meta.data() + kHeader + 4 * s, Crc32c(data + s * kSlice, part));
  }
  // Writes the block under a temporary name and renames it into place; 0 or an errno.
  auto write_once = [&]() -> int {
    std::string tmp;
    const int fd = CreateTemp(path, &tmp);
    if (fd < 0)
      return errno;
    iovec iov[2] = {{meta.data(), meta.size()}, {const_cast<uint8_t*>(data), len}};
    const ssize_t w = ::pwritev(fd, iov, 2, 0);
    const int werr = w < 0 ? errno : ENOSPC;
    ::close(fd);
    // No fsync: a block that a crash leaves with lost bytes fails its CRCs at the next hit and
    // is fetched again. The rename makes it visible whole.
    int err = 0;
    if (w != static_cast<ssize_t>(meta.size() + len))
      err = werr;
    else if (::rename(tmp.c_str(), path.c_str()) != 0)
      err = errno;
    if (err != 0)
      ::unlink(tmp.c_str());
    return err;
  };
  int err = write_once();
  if (err == ENOSPC || err == EDQUOT) {
    // The device filled up under us (other users of it, or other processes' puts): evict down
    // to the free ratio and try once more.
    if (MakeRoom(file_bytes).ok())
      err = write_once();
  }
  if (err != 0) {
    Count(kPutFailures, 1);
    Status st = Status::IoError(fmt::format("writing {}: {}", path, std::strerror(err)));
    Complain(st.message());
    return st;
  }
  Added(file_bytes);
  return Status::OK();
}

// ---------------------------------------------------------------------------------------------
// Write-through

std::unique_ptr<NodeCache::WriteStage> NodeCache::StageWrites(const Fid& fid) {
  return std::unique_ptr<WriteStage>(new WriteStage(this, fid, options_.max_bytes / 2));
}

NodeCache::WriteStage::~WriteStage() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [index, b] : blocks_)
    DropBlock(&b);
}

void NodeCache::WriteStage::DropBlock(Block* b) {
  if (b->fd >= 0) {
    ::close(b->fd);
    ::unlink(b->tmp.c_str());
    b->fd = -1;
    cache_->Staged(-static_cast<int64_t>(kNodeCacheBlock));
  }
}

void NodeCache::Staged(int64_t delta) {
  if (shared_ != nullptr)
    shared_->staged.fetch_add(delta);
  else
    staged_local_.fetch_add(delta);
}

uint64_t NodeCache::StagedBytes() const {
  const int64_t v = shared_ != nullptr ? shared_->staged.load() : staged_local_.load();
  return v > 0 ? static_cast<uint64_t>(v) : 0;
}

uint64_t NodeCache::WriteStage::staged() const {
  std::lock_guard<std::mutex> lock(mu_);
  return staged_;
}

void NodeCache::WriteStage::Write(const uint8_t* data, size_t len, uint64_t offset) {
  // A staged block keeps its data where a whole block's data lies in a block file, so a whole
  // block needs only its header and CRCs written in front at commit.
  constexpr uint64_t kDataAt = kHeader + 4 * kMaxSlices;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t done = 0;
  while (done < len) {
    const uint64_t pos = offset + done;
    const uint64_t index = pos / kNodeCacheBlock;
    const uint64_t in = pos - index * kNodeCacheBlock;
    const uint64_t n = std::min<uint64_t>(len - done, kNodeCacheBlock - in);
    const uint8_t* src = data + done;
    done += n;
    if (skipped_.count(index) != 0)
      continue;
    auto it = blocks_.find(index);
    if (it == blocks_.end()) {
      // A new block: within the budget, and not on a device under its free share (looked at
      // every 16th block).
      if (cache_->StagedBytes() + kNodeCacheBlock > budget_ ||
          MonoMillis() < cache_->low_until_ms_.load() ||
          (blocks_.size() % 16 == 0 && cache_->options_.min_free_ratio > 0 &&
           cache_->DeviceLow(kNodeCacheBlock))) {
        skipped_.insert(index);
        continue;
      }
      Block b;
      // Named after the block at data version 0 (no file has it): a scan skips it while this
      // process lives and removes it once it is gone.
      b.fd = cache_->CreateTemp(cache_->BlockPath(fid_, 0, index), &b.tmp);
      if (b.fd < 0) {
        cache_->Complain(fmt::format("staging a written block of {} in {}: {}", fid_.ToString(),
                                     cache_->options_.dir, std::strerror(errno)));
        skipped_.insert(index);
        continue;
      }
      it = blocks_.emplace(index, std::move(b)).first;
      staged_ += kNodeCacheBlock;
      cache_->Staged(static_cast<int64_t>(kNodeCacheBlock));
    }
    Block& b = it->second;
    if (::pwrite(b.fd, src, n, static_cast<off_t>(kDataAt + in)) != static_cast<ssize_t>(n)) {
      cache_->Complain(fmt::format("staging a written block in {}: {}", cache_->options_.dir,
                                   std::strerror(errno ? errno : ENOSPC)));
      DropBlock(&b);
      blocks_.erase(it);
      skipped_.insert(index);
      continue;
    }
    // Merge [in, in + n) into the covered ranges.
    uint64_t lo = in, hi = in + n;
    auto c = b.covered.upper_bound(lo);
    if (c != b.covered.begin() && std::prev(c)->second >= lo)
      c = std::prev(c);
    while (c != b.covered.end() && c->first <= hi) {
      lo = std::min(lo, c->first);
      hi = std::max(hi, c->second);
      c = b.covered.erase(c);
    }
    b.covered.emplace(lo, hi);
  }
}

size_t NodeCache::WriteStage::Commit(uint64_t data_version, uint64_t size) {
  constexpr uint64_t kDataAt = kHeader + 4 * kMaxSlices;
  std::lock_guard<std::mutex> lock(mu_);
  thread_local std::unique_ptr<uint8_t[]> buf;
  if (!buf)
    buf.reset(new uint8_t[kNodeCacheBlock]);
  size_t cached = 0;
  for (auto& [index, b] : blocks_) {
    const uint64_t start = index * kNodeCacheBlock;
    if (b.fd < 0 || start >= size) {
      DropBlock(&b);
      continue;
    }
    const size_t len = static_cast<size_t>(std::min<uint64_t>(kNodeCacheBlock, size - start));
    // Only a block this handle wrote whole holds nothing it did not write.
    if (b.covered.size() != 1 || b.covered.begin()->first != 0 || b.covered.begin()->second < len ||
        ::pread(b.fd, buf.get(), len, static_cast<off_t>(kDataAt)) != static_cast<ssize_t>(len)) {
      DropBlock(&b);
      continue;
    }
    if (len < kNodeCacheBlock) {
      // A short last block: its data lies elsewhere in a block file; stored anew.
      DropBlock(&b);
      if (cache_->Put(fid_, data_version, index, buf.get(), len).ok()) {
        ++cached;
        cache_->Count(kWritten, 1);
        cache_->Count(kWrittenBytes, len);
      }
      continue;
    }
    uint8_t meta[kDataAt];
    EncodeHeader(Header{fid_, data_version, index, static_cast<uint32_t>(len)}, meta);
    for (size_t s = 0; s < kMaxSlices; ++s)
      PutLe<uint32_t>(meta + kHeader + 4 * s, Crc32c(buf.get() + s * kSlice, kSlice));
    const std::string path = cache_->BlockPath(fid_, data_version, index);
    const uint64_t file_bytes = kDataAt + len;
    const bool ok = ::pwrite(b.fd, meta, sizeof(meta), 0) == static_cast<ssize_t>(sizeof(meta)) &&
                    ::ftruncate(b.fd, static_cast<off_t>(file_bytes)) == 0 &&
                    cache_->Room(file_bytes).ok() && ::rename(b.tmp.c_str(), path.c_str()) == 0;
    if (!ok) {
      DropBlock(&b);
      continue;
    }
    ::close(b.fd);
    b.fd = -1;
    cache_->Staged(-static_cast<int64_t>(kNodeCacheBlock));
    cache_->Added(file_bytes);
    cache_->Count(kWritten, 1);
    cache_->Count(kWrittenBytes, len);
    ++cached;
  }
  blocks_.clear();
  skipped_.clear();
  staged_ = 0;
  return cached;
}

namespace {

// Takes flock `op` on a lock file, retrying on EINTR; 0 or -1.
int FlockRetry(int fd, int op) {
  int rc;
  do {
    rc = ::flock(fd, op);
  } while (rc != 0 && errno == EINTR);
  return rc;
}

}  // namespace

std::string NodeCache::LockPath(const Fid& fid, uint64_t data_version, uint64_t index) const {
  const uint64_t h = FidHash()(fid) ^ (data_version * 0x9E3779B97F4A7C15ull) ^ (index * 31);
  return fmt::format("{}/locks/{:04}", options_.dir, h % static_cast<uint64_t>(kLockStripes));
}

int NodeCache::OpenLockFile(const Fid& fid, uint64_t data_version, uint64_t index) {
  const std::string path = LockPath(fid, data_version, index);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    Complain(fmt::format("opening {}: {}", path, std::strerror(errno)));
  return fd;
}

NodeCache::FillLock NodeCache::LockFill(const Fid& fid,
                                        uint64_t data_version,
                                        uint64_t index,
                                        bool wait) {
  const int fd = OpenLockFile(fid, data_version, index);
  if (fd < 0)
    return FillLock();
  if (FlockRetry(fd, LOCK_EX | (wait ? 0 : LOCK_NB)) != 0) {
    ::close(fd);
    return FillLock();
  }
  return FillLock(fd);
}

void NodeCache::WaitFill(const Fid& fid, uint64_t data_version, uint64_t index) {
  const int fd = OpenLockFile(fid, data_version, index);
  if (fd < 0)
    return;
  FlockRetry(fd, LOCK_SH);
  ::close(fd);  // drops the shared lock
}

NodeCache::FillLock NodeCache::LockOrWaitFill(const Fid& fid,
                                              uint64_t data_version,
                                              uint64_t index) {
  const int fd = OpenLockFile(fid, data_version, index);
  if (fd < 0)
    return FillLock();
  if (FlockRetry(fd, LOCK_EX | LOCK_NB) == 0)
    return FillLock(fd);
  FlockRetry(fd, LOCK_SH);
  ::close(fd);  // drops the shared lock
  return FillLock();
}

bool NodeCache::ParseBlockPath(const fs::path& p, Key* key) {
  unsigned long long mds = 0, seq = 0, ver = 0, dv = 0, index = 0;
  const std::string dir = p.parent_path().filename().string();
  const std::string name = p.filename().string();
  char tail = 0;
  if (std::sscanf(dir.c_str(), "%llx-%llx-%llx%c", &mds, &seq, &ver, &tail) != 3 ||
      std::sscanf(name.c_str(), "%llx-%llx%c", &dv, &index, &tail) != 2) {
    return false;
  }
  *key = Key{Fid{seq, static_cast<uint32_t>(mds), static_cast<uint32_t>(ver)}, dv, index};
  return true;
}

void NodeCache::SortForEviction(std::vector<ScanEntry>* entries) {
  std::vector<uint64_t> next(entries->size(), UINT64_MAX);
  bool planned;
  {
    std::lock_guard<std::mutex> lock(plan_mu_);
    planned = !plan_.empty();
  }
  if (planned) {
    for (size_t i = 0; i < entries->size(); ++i)
      next[i] = (*entries)[i].has_key ? NextUse((*entries)[i].key) : UINT64_MAX;
  }
  std::vector<size_t> idx(entries->size());
  for (size_t i = 0; i < idx.size(); ++i)
    idx[i] = i;
  // With a plan: not needed again first, then needed latest; ties (and without a plan, all)
  // least recently used first.
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    if (next[a] != next[b])
      return next[a] > next[b];
    return (*entries)[a].mtime_ns < (*entries)[b].mtime_ns;
  });
  std::vector<ScanEntry> sorted;
  sorted.reserve(entries->size());
  for (size_t i : idx)
    sorted.push_back(std::move((*entries)[i]));
  *entries = std::move(sorted);
}

void NodeCache::SetPlan(const std::vector<BlockRef>& order) {
  std::unordered_map<Key, PlanUses, KeyHash> plan;
  for (size_t i = 0; i < order.size(); ++i)
    plan[Key{order[i].fid, order[i].data_version, order[i].index}].positions.push_back(i);
  std::lock_guard<std::mutex> lock(plan_mu_);
  plan_ = std::move(plan);
  has_plan_.store(!plan_.empty(), std::memory_order_release);
}

uint64_t NodeCache::NextUse(const Key& key) {
  std::lock_guard<std::mutex> lock(plan_mu_);
  auto it = plan_.find(key);
  if (it == plan_.end() || it->second.used >= it->second.positions.size())
    return UINT64_MAX;
  return it->second.positions[it->second.used];
}

void NodeCache::Used(const Key& key) {
  // Every hit comes here: without a plan, no lock shared by every reading thread.
  if (!has_plan_.load(std::memory_order_acquire))
    return;
  std::lock_guard<std::mutex> lock(plan_mu_);
  if (plan_.empty())
    return;
  auto it = plan_.find(key);
  if (it != plan_.end() && it->second.used < it->second.positions.size())
    ++it->second.used;
}

void NodeCache::NoteUse(const Fid& fid, uint64_t data_version, uint64_t index) {
  Used(Key{fid, data_version, index});
}

Result<std::vector<NodeCache::BlockRef>> NodeCache::EvictionOrder() {
  std::lock_guard<std::mutex> lock(scan_mu_);
  std::vector<ScanEntry> entries;
  std::error_code ec;
  const fs::path root = fs::path(options_.dir) / "blocks";
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st;
    ScanEntry e;
    if (it->is_directory(ec) || ::lstat(it->path().c_str(), &st) != 0 ||
        !ParseBlockPath(it->path(), &e.key)) {
      continue;
    }
    e.has_key = true;
    e.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    entries.push_back(std::move(e));
  }
  if (ec)
    return Status::IoError(fmt::format("node cache {}: listing: {}", options_.dir, ec.message()));
  SortForEviction(&entries);
  std::vector<BlockRef> out;
  for (const ScanEntry& e : entries)
    out.push_back(BlockRef{e.key.fid, e.key.data_version, e.key.index});
  return out;
}

Result<uint64_t> NodeCache::Scan(uint64_t evict_to,
                                 uint64_t room,
                                 uint64_t* removed,
                                 uint64_t* blocks) {
  std::lock_guard<std::mutex> lock(scan_mu_);
  std::vector<ScanEntry> entries;
  uint64_t total = 0;
  int64_t staged = 0;  // blocks of live writers' stages (named after data version 0)
  std::error_code ec;
  const fs::path root = fs::path(options_.dir) / "blocks";
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st;
    if (it->is_directory(ec) || ::lstat(it->path().c_str(), &st) != 0)
      continue;
    const std::string name = it->path().filename().string();
    if (const long owner = TempOwner(name); owner != 0) {
      if (!ProcessAlive(owner))
        ::unlink(it->path().c_str());  // a filler or writer that died mid-way
      else if (name.rfind("0-", 0) == 0)
        staged += static_cast<int64_t>(kNodeCacheBlock);
      continue;
    }
    ScanEntry e{int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec,
                static_cast<uint64_t>(st.st_size), it->path().string(), Key{}, false};
    e.has_key = ParseBlockPath(it->path(), &e.key);
    entries.push_back(std::move(e));
    total += static_cast<uint64_t>(st.st_size);
  }
  if (ec)
    return Status::IoError(fmt::format("node cache {}: listing: {}", options_.dir, ec.message()));
  *removed = 0;
  if (evict_to != UINT64_MAX) {
    struct statvfs vfs;
    uint64_t free_need = 0;
    if (::statvfs(options_.dir.c_str(), &vfs) == 0) {
      const double total_dev = static_cast<double>(vfs.f_blocks) * vfs.f_frsize;
      const double free_dev = static_cast<double>(vfs.f_bavail) * vfs.f_frsize;
      const double want = options_.min_free_ratio * total_dev + static_cast<double>(room);
      if (free_dev < want)
        free_need = static_cast<uint64_t>(want - free_dev);
    }
    SortForEviction(&entries);
    size_t i = 0;
    while (i < entries.size() && (total > evict_to || *removed < free_need)) {
      if (::unlink(entries[i].path.c_str()) == 0 || errno == ENOENT) {
        total -= entries[i].bytes;
        *removed += entries[i].bytes;
      }
      ++i;
    }
    entries.erase(entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(i));
    // Blocks this process keeps open hold their space until closed: close them (a removed one
    // stays readable to a read in flight, which holds it).
    if (*removed > 0) {
      Count(kEvictedBytes, *removed);
      ForgetAllOpen();
    }
  }
  *blocks = entries.size();
  used_ = total;
  if (shared_ != nullptr) {
    shared_->used.store(total);
    shared_->used_valid.store(1);
    shared_->staged.store(staged);  // corrects what writers that died left counted
  }
  since_scan_ = 0;
  return total;
}

Result<uint64_t> NodeCache::Evict(uint64_t target, uint64_t room) {
  uint64_t removed = 0, blocks = 0;
  CIUIC_RETURN_IF_ERROR(Scan(target, room, &removed, &blocks).status());
  return removed;
}

Result<uint64_t> NodeCache::Drop(const Fid& fid) {
  ForgetAllOpen();
  std::error_code ec;
  const fs::path root = fid.valid() ? fs::path(FidDir(fid)) : fs::path(options_.dir) / "blocks";
  if (!fs::exists(root, ec))
    return uint64_t{0};
  uint64_t removed = 0;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st;
    if (!it->is_directory(ec) && ::lstat(it->path().c_str(), &st) == 0 &&
        ::unlink(it->path().c_str()) == 0) {
      removed += static_cast<uint64_t>(st.st_size);
    }
  }
  if (ec)
    return Status::IoError(fmt::format("node cache {}: dropping: {}", options_.dir, ec.message()));
  uint64_t gone = 0, blocks = 0;
  CIUIC_RETURN_IF_ERROR(Scan(UINT64_MAX, 0, &gone, &blocks).status());
  return removed;
}

Result<NodeCacheStats> NodeCache::Stats() {
  NodeCacheStats s;
  uint64_t removed = 0;
  CIUIC_ASSIGN_OR_RETURN(s.bytes, Scan(UINT64_MAX, 0, &removed, &s.blocks));
  s.max_bytes = options_.max_bytes;
  if (shared_ != nullptr) {
    uint64_t* out[] = {&s.counters.hits,        &s.counters.hit_bytes, &s.counters.fills,
                       &s.counters.fill_bytes,  &s.counters.corrupt,   &s.counters.evicted_bytes,
                       &s.counters.put_failures};
    for (size_t i = 0; i < 7; ++i)
      *out[i] = shared_->v[i].load(std::memory_order_relaxed);
    s.counters.written = shared_->written.load(std::memory_order_relaxed);
    s.counters.written_bytes = shared_->written_bytes.load(std::memory_order_relaxed);
  }
  struct statvfs vfs;
  if (::statvfs(options_.dir.c_str(), &vfs) == 0) {
    s.device_free = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    s.device_total = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  }
  return s;
}

}  // namespace ciuic::client
