#include "meta/power_loss_fs.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <random>

#include <fmt/format.h>

namespace ciuic::meta {
namespace {

rocksdb::IOStatus PowerOff() {
  return rocksdb::IOStatus::IOError("simulated power loss");
}

// A writable file whose appended and synced lengths are reported to the PowerLossFs.
class TrackedFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  TrackedFile(std::unique_ptr<rocksdb::FSWritableFile> f,
              PowerLossFs* fs,
              std::string name,
              uint64_t size)
      : FSWritableFileOwnerWrapper(std::move(f)), fs_(fs), name_(std::move(name)), size_(size) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* dbg) override {
    if (!fs_->active())
      return PowerOff();
    auto s = target()->Append(data, o, dbg);
    if (s.ok())
      Grow(size_ + data.size());
    return s;
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& o,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* dbg) override {
    if (!fs_->active())
      return PowerOff();
    auto s = target()->Append(data, o, info, dbg);
    if (s.ok())
      Grow(size_ + data.size());
    return s;
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data,
                                     uint64_t offset,
                                     const rocksdb::IOOptions& o,
                                     rocksdb::IODebugContext* dbg) override {
    if (!fs_->active())
      return PowerOff();
    auto s = target()->PositionedAppend(data, offset, o, dbg);
    if (s.ok())
      Grow(std::max(size_, offset + data.size()));
    return s;
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data,
                                     uint64_t offset,
                                     const rocksdb::IOOptions& o,
                                     const rocksdb::DataVerificationInfo& info,
                                     rocksdb::IODebugContext* dbg) override {
    if (!fs_->active())
      return PowerOff();
    auto s = target()->PositionedAppend(data, offset, o, info, dbg);
    if (s.ok())
      Grow(std::max(size_, offset + data.size()));
    return s;
  }
  rocksdb::IOStatus Truncate(uint64_t size,
                             const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* dbg) override {
    if (!fs_->active())
      return PowerOff();
    auto s = target()->Truncate(size, o, dbg);
    if (s.ok())
      Grow(size);
    return s;
  }
  rocksdb::IOStatus Flush(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    if (!fs_->active())
      return PowerOff();
    return target()->Flush(o, dbg);
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    if (!fs_->active())
      return PowerOff();
    auto s = target()->Sync(o, dbg);
    if (s.ok())
      fs_->OnSync(name_, size_);
    return s;
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    if (!fs_->active())
      return PowerOff();
    auto s = target()->Fsync(o, dbg);
    if (s.ok())
      fs_->OnSync(name_, size_);
    return s;
  }
  // sync_file_range does not make data durable (no metadata, no device flush): not a sync.
  rocksdb::IOStatus RangeSync(uint64_t offset,
                              uint64_t nbytes,
                              const rocksdb::IOOptions& o,
                              rocksdb::IODebugContext* dbg) override {
    if (!fs_->active())
      return PowerOff();
    return target()->RangeSync(offset, nbytes, o, dbg);
  }
  rocksdb::IOStatus Close(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    // Closing writes nothing new in buffered mode; let it release the descriptor even when off.
    return target()->Close(o, dbg);
  }

 private:
  void Grow(uint64_t size) {
    size_ = size;
    fs_->OnAppend(name_, size_);
  }

  PowerLossFs* fs_;
  std::string name_;
  uint64_t size_;
};

}  // namespace

PowerLossFs::PowerLossFs(const std::shared_ptr<rocksdb::FileSystem>& base)
    : rocksdb::FileSystemWrapper(base) {}

rocksdb::IOStatus PowerLossFs::Track(const std::string& fname,
                                     uint64_t existing,
                                     std::unique_ptr<rocksdb::FSWritableFile>* result) {
  {
    std::lock_guard lock(mu_);
    files_[fname] = FileState{existing, existing};
  }
  *result = std::make_unique<TrackedFile>(std::move(*result), this, fname, existing);
  return rocksdb::IOStatus::OK();
}

rocksdb::IOStatus PowerLossFs::NewWritableFile(const std::string& fname,
                                               const rocksdb::FileOptions& opts,
                                               std::unique_ptr<rocksdb::FSWritableFile>* result,
                                               rocksdb::IODebugContext* dbg) {
  if (!active())
    return PowerOff();
  auto s = target()->NewWritableFile(fname, opts, result, dbg);
  if (!s.ok())
    return s;
  return Track(fname, 0, result);
}

rocksdb::IOStatus PowerLossFs::ReopenWritableFile(const std::string& fname,
                                                  const rocksdb::FileOptions& opts,
                                                  std::unique_ptr<rocksdb::FSWritableFile>* result,
                                                  rocksdb::IODebugContext* dbg) {
  if (!active())
    return PowerOff();
  uint64_t size = 0;
  if (!target()->GetFileSize(fname, rocksdb::IOOptions(), &size, dbg).ok())
    size = 0;
  auto s = target()->ReopenWritableFile(fname, opts, result, dbg);
  if (!s.ok())
    return s;
  // Bytes already in the file predate this session: treat them as durable.
  return Track(fname, size, result);
}

rocksdb::IOStatus PowerLossFs::ReuseWritableFile(const std::string& fname,
                                                 const std::string& old_fname,
                                                 const rocksdb::FileOptions& opts,
                                                 std::unique_ptr<rocksdb::FSWritableFile>* result,
                                                 rocksdb::IODebugContext* dbg) {
  if (!active())
    return PowerOff();
  auto s = target()->ReuseWritableFile(fname, old_fname, opts, result, dbg);
  if (!s.ok())
    return s;
  {
    std::lock_guard lock(mu_);
    files_.erase(old_fname);
  }
  return Track(fname, 0, result);
}

rocksdb::IOStatus PowerLossFs::NewRandomRWFile(const std::string& fname,
                                               const rocksdb::FileOptions& opts,
                                               std::unique_ptr<rocksdb::FSRandomRWFile>* result,
                                               rocksdb::IODebugContext* dbg) {
  // RocksDB uses random-RW files only for external SST ingestion and blob GC, which the MDS
  // does not use: refuse rather than track them wrongly.
  (void)fname;
  (void)opts;
  (void)result;
  (void)dbg;
  return rocksdb::IOStatus::NotSupported("PowerLossFs: random RW files are not tracked");
}

rocksdb::IOStatus PowerLossFs::RenameFile(const std::string& src,
                                          const std::string& dst,
                                          const rocksdb::IOOptions& opts,
                                          rocksdb::IODebugContext* dbg) {
  if (!active())
    return PowerOff();
  auto s = target()->RenameFile(src, dst, opts, dbg);
  if (s.ok()) {
    std::lock_guard lock(mu_);
    auto it = files_.find(src);
    if (it != files_.end()) {
      files_[dst] = it->second;
      files_.erase(src);
    } else {
      files_.erase(dst);
    }
  }
  return s;
}

rocksdb::IOStatus PowerLossFs::LinkFile(const std::string& src,
                                        const std::string& dst,
                                        const rocksdb::IOOptions& opts,
                                        rocksdb::IODebugContext* dbg) {
  if (!active())
    return PowerOff();
  auto s = target()->LinkFile(src, dst, opts, dbg);
  if (s.ok()) {
    std::lock_guard lock(mu_);
    auto it = files_.find(src);
    if (it != files_.end())
      files_[dst] = it->second;
  }
  return s;
}

rocksdb::IOStatus PowerLossFs::DeleteFile(const std::string& fname,
                                          const rocksdb::IOOptions& opts,
                                          rocksdb::IODebugContext* dbg) {
  if (!active())
    return PowerOff();
  auto s = target()->DeleteFile(fname, opts, dbg);
  if (s.ok()) {
    std::lock_guard lock(mu_);
    files_.erase(fname);
  }
  return s;
}

void PowerLossFs::SetActive(bool active) {
  std::lock_guard lock(mu_);
  active_ = active;
}

bool PowerLossFs::active() const {
  std::lock_guard lock(mu_);
  return active_;
}

void PowerLossFs::OnAppend(const std::string& fname, uint64_t new_size) {
  std::lock_guard lock(mu_);
  auto& f = files_[fname];
  f.size = new_size;
  f.synced = std::min(f.synced, new_size);
}

void PowerLossFs::OnSync(const std::string& fname, uint64_t size) {
  std::lock_guard lock(mu_);
  auto& f = files_[fname];
  f.synced = std::max(f.synced, size);
}

uint64_t PowerLossFs::UnsyncedBytes() const {
  std::lock_guard lock(mu_);
  uint64_t n = 0;
  for (const auto& [name, f] : files_)
    n += f.size > f.synced ? f.size - f.synced : 0;
  return n;
}

Result<uint64_t> PowerLossFs::DropUnsyncedData(uint64_t torn_seed) {
  std::lock_guard lock(mu_);
  std::mt19937_64 rng(torn_seed);
  uint64_t dropped = 0;
  for (auto& [name, f] : files_) {
    if (f.size <= f.synced)
      continue;
    uint64_t keep = f.synced;
    if (torn_seed != 0)
      keep += rng() % (f.size - f.synced);
    // The wrapped file system is the local one (RocksDB's PosixFileSystem has no Truncate).
    if (::truncate(name.c_str(), static_cast<off_t>(keep)) != 0) {
      return Status::FromErrno(errno, fmt::format("truncate {}", name));
    }
    dropped += f.size - keep;
    f.size = keep;
    f.synced = keep;
  }
  return dropped;
}

}  // namespace ciuic::meta
