// PowerLossFs: a RocksDB FileSystem wrapper that simulates losing power (Decision 2).
//
// It passes every call through to the wrapped file system and remembers, for each file written
// through it, how many bytes were written and how many were made durable by Sync/Fsync. After
// SetActive(false) every write, sync and file creation fails, as on a dead machine; then
// DropUnsyncedData() cuts each file back to its last synced length (or keeps a random part of
// the unsynced tail, a torn write), which is what a power cut leaves on disk. Files created and
// never synced keep length 0; directory entries are assumed durable (a simplification: RocksDB
// fsyncs its directory after creating WAL, SST and MANIFEST files).
//
// Use: wrap rocksdb::FileSystem::Default(), build an Env with rocksdb::NewCompositeEnv, open the
// store with it, write, SetActive(false), close the store, DropUnsyncedData(), reopen.
// Thread-safety: all methods are thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <rocksdb/file_system.h>

#include "common/status.h"

namespace ciuic::meta {

class PowerLossFs : public rocksdb::FileSystemWrapper {
 public:
  explicit PowerLossFs(const std::shared_ptr<rocksdb::FileSystem>& base);

  const char* Name() const override { return "CiuicPowerLossFs"; }

  rocksdb::IOStatus NewWritableFile(const std::string& fname,
                                    const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& fname,
                                       const rocksdb::FileOptions& opts,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReuseWritableFile(const std::string& fname,
                                      const std::string& old_fname,
                                      const rocksdb::FileOptions& opts,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewRandomRWFile(const std::string& fname,
                                    const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& src,
                               const std::string& dst,
                               const rocksdb::IOOptions& opts,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus LinkFile(const std::string& src,
                             const std::string& dst,
                             const rocksdb::IOOptions& opts,
                             rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& fname,
                               const rocksdb::IOOptions& opts,
                               rocksdb::IODebugContext* dbg) override;

  // false: every later mutating call fails with an IO error ("power is off").
  void SetActive(bool active);
  bool active() const;

  // Cuts every tracked file back to its synced length. With `torn_seed` != 0, keeps a
  // pseudo-random prefix of each unsynced tail instead (a torn write). Call with the store
  // closed. Returns the number of unsynced bytes dropped, or kIoError.
  Result<uint64_t> DropUnsyncedData(uint64_t torn_seed = 0);

  // Bytes written but not yet synced, over all tracked files.
  uint64_t UnsyncedBytes() const;

  // Internal bookkeeping called by the tracked files.
  void OnAppend(const std::string& fname, uint64_t new_size);
  void OnSync(const std::string& fname, uint64_t size);

 private:
  struct FileState {
    uint64_t size = 0;
    uint64_t synced = 0;
  };
  rocksdb::IOStatus Track(const std::string& fname,
                          uint64_t existing,
                          std::unique_ptr<rocksdb::FSWritableFile>* result);

  mutable std::mutex mu_;
  bool active_ = true;
  std::map<std::string, FileState> files_;
};

}  // namespace ciuic::meta
