// MemKvStore: the in-memory twin of RocksKvStore, one std::map per column family. For tests and
// `MdsServer::Options::in_memory`. Nothing is durable; Write's `sync` is accepted and ignored.
// Thread-safety: all methods are thread-safe (one shared mutex). Iterators re-find their
// position under the lock at each step, so they tolerate concurrent writes.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>

#include "meta/kv_store.h"

namespace ciuic::meta {

class MemKvStore : public KvStore {
 public:
  struct State;
  MemKvStore() : state_(std::make_shared<State>()) {}
  // Shares `state` with other MemKvStores: a "reopen" of the same data in tests.
  explicit MemKvStore(std::shared_ptr<State> state) : state_(std::move(state)) {}
  const std::shared_ptr<State>& state() const { return state_; }

  Status Get(Cf cf, std::string_view key, std::string* value) override;
  Status Write(const WriteBatch& batch, bool sync) override;
  Status SyncWal() override { return Status::OK(); }
  std::unique_ptr<KvIterator> NewIterator(Cf cf, std::string upper_bound) override;

  // Number of keys in `cf` (tests).
  size_t TEST_Count(Cf cf) const;

  struct State {
    mutable std::shared_mutex mu;
    std::array<std::map<std::string, std::string, std::less<>>, kNumCfs> maps;
  };

 private:
  std::shared_ptr<State> state_;
};

}  // namespace ciuic::meta
