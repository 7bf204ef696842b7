// RocksKvStore: the durable KvStore over RocksDB, one RocksDB column family per Cf.
//
// Memory is capped for an idle-friendly MDS: one shared LRU block cache (index and filter blocks
// included) and a WriteBufferManager that charges memtables to that cache, so the store's memory
// stays near `cache_bytes`. The WAL is always on; Write(sync) uses WriteOptions::sync. A
// format-version record in the system column family is written at creation and checked on open.
//
// Thread-safety: as KvStore. Open() creates the directory if missing; the RocksDB LOCK file keeps
// a second process out (kBusy).
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <string>

#include "meta/kv_store.h"

namespace rocksdb {
class Cache;
class ColumnFamilyHandle;
class DB;
class Env;
class WriteBufferManager;
}  // namespace rocksdb

namespace ciuic::meta {

// Version of the MDS's key and value formats (docs/formats/kv-keys.md). Bump on incompatible
// change; Open() refuses other versions.
inline constexpr uint32_t kKvFormatVersion = 1;
// System column family key of the format-version record.
inline constexpr std::string_view kFormatVersionKey = "format_version";

class RocksKvStore : public KvStore {
 public:
  struct Options {
    std::string path;                       // the RocksDB directory
    size_t cache_bytes = 64u << 20;         // shared block cache, memtables charged to it
    size_t write_buffer_bytes = 32u << 20;  // all memtables together
    rocksdb::Env* env = nullptr;  // null: the default Env; tests pass a fault-injecting one
  };

  // Opens or creates the store at options.path. Returns kBusy if another process holds it,
  // kCorruption or kNotSupported on a bad or foreign format version, kIoError (with the OS
  // reason) if the directory cannot be created or opened.
  static Result<std::unique_ptr<RocksKvStore>> Open(const Options& options);
  ~RocksKvStore() override;

  Status Get(Cf cf, std::string_view key, std::string* value) override;
  void MultiGet(Cf cf,
                std::span<const std::string> keys,
                std::vector<std::string>* values,
                std::vector<Status>* statuses) override;
  Status Write(const WriteBatch& batch, bool sync) override;
  Status SyncWal() override;
  std::unique_ptr<KvIterator> NewIterator(Cf cf, std::string upper_bound) override;
  std::vector<std::pair<std::string, uint64_t>> Properties() override;

  // Flushes memtables to SST files (tests: exercise reads from files).
  Status TEST_Flush();

 private:
  RocksKvStore() = default;
  Status CheckFormat();

  std::shared_ptr<rocksdb::Cache> cache_;
  std::shared_ptr<rocksdb::WriteBufferManager> wbm_;
  rocksdb::DB* db_ = nullptr;
  std::array<rocksdb::ColumnFamilyHandle*, kNumCfs> cfs_{};
  rocksdb::ColumnFamilyHandle* default_cf_ = nullptr;
  // The first failed write. RocksDB stops writing after a WAL write error, and its SyncWAL()
  // then asserts (Debian's build keeps assertions) instead of returning it: from the first
  // failure on, Write and SyncWal return this error until the store is reopened.
  std::mutex error_mu_;
  Status write_error_;  // CIUIC_GUARDED_BY(error_mu_)
};

}  // namespace ciuic::meta
