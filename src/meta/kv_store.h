// KvStore: the MDS's seam over an ordered key-value store with column families.
//
// Two implementations share one contract (kv_store_test.cc runs it against both):
// RocksKvStore (durable, RocksDB) and MemKvStore (std::map, tests). Keys and values are byte
// strings; keys sort bytewise. A WriteBatch commits atomically.
//
// Thread-safety: every method of a KvStore may be called from any thread. An iterator is used by
// one thread at a time and sees a consistent view as of its creation (RocksKvStore) or the latest
// committed state at each step (MemKvStore); callers must not rely on either.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ciuic::meta {

// Column families (docs/formats/kv-keys.md). Values are stable: they index arrays.
enum class Cf : uint8_t {
  kInodes = 0,
  kDentries = 1,
  kXattrs = 2,
  kSessions = 3,
  kOstLog = 4,
  kSystem = 5,
};
inline constexpr size_t kNumCfs = 6;

// Returns the column family's name as stored in RocksDB ("inodes", "dentries", ...).
const char* CfName(Cf cf);

// An ordered list of puts and deletes applied atomically by KvStore::Write. Not thread-safe.
class WriteBatch {
 public:
  struct Op {
    Cf cf;
    bool del;
    std::string key;
    std::string value;
  };

  void Put(Cf cf, std::string_view key, std::string_view value) {
    bytes_ += key.size() + value.size();
    ops_.push_back(Op{cf, false, std::string(key), std::string(value)});
  }
  void Delete(Cf cf, std::string_view key) {
    bytes_ += key.size();
    ops_.push_back(Op{cf, true, std::string(key), {}});
  }
  // Same, taking ownership of the strings (no copy).
  void PutOwned(Cf cf, std::string key, std::string value) {
    bytes_ += key.size() + value.size();
    ops_.push_back(Op{cf, false, std::move(key), std::move(value)});
  }
  void Clear() {
    ops_.clear();
    bytes_ = 0;
  }
  bool empty() const { return ops_.empty(); }
  size_t count() const { return ops_.size(); }
  // Total key and value bytes.
  size_t bytes() const { return bytes_; }
  const std::vector<Op>& ops() const { return ops_; }

 private:
  std::vector<Op> ops_;
  size_t bytes_ = 0;
};

// Walks keys of one column family in order, from Seek() up to (excluding) the upper bound given
// at creation. key()/value() are valid until the next Seek/Next.
class KvIterator {
 public:
  virtual ~KvIterator() = default;
  // Positions at the first key >= `key` (and below the upper bound).
  virtual void Seek(std::string_view key) = 0;
  virtual bool Valid() const = 0;
  virtual void Next() = 0;
  virtual std::string_view key() const = 0;
  virtual std::string_view value() const = 0;
  // OK unless iteration stopped on an error (then Valid() is false).
  virtual Status status() const = 0;
};

class KvStore {
 public:
  virtual ~KvStore() = default;

  // Reads the value of `key` into `*value`. Returns kNotFound when absent, kIoError or
  // kCorruption when the store fails.
  virtual Status Get(Cf cf, std::string_view key, std::string* value) = 0;

  // Reads several keys of one column family. `values` and `statuses` are resized to
  // keys.size(); each status is OK, kNotFound or an error. The default calls Get for each.
  virtual void MultiGet(Cf cf,
                        std::span<const std::string> keys,
                        std::vector<std::string>* values,
                        std::vector<Status>* statuses);

  // Applies `batch` atomically. With `sync`, the write (and every earlier one) is durable when
  // this returns; without it, it is in the write-ahead log but may be lost on power loss.
  // Returns kIoError when the store fails.
  virtual Status Write(const WriteBatch& batch, bool sync) = 0;

  // Makes every write done so far durable.
  virtual Status SyncWal() = 0;

  // Returns an iterator over keys of `cf` below `upper_bound` (empty: no bound). Call Seek first.
  virtual std::unique_ptr<KvIterator> NewIterator(Cf cf, std::string upper_bound) = 0;

  // Returns cheap numeric figures of the store for metrics, as (name, value): for RocksDB its
  // integer properties (estimated keys, memtable and block cache bytes, compactions running).
  // Safe from any thread. The default: none.
  virtual std::vector<std::pair<std::string, uint64_t>> Properties() { return {}; }
};

}  // namespace ciuic::meta
