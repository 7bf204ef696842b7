// Reader and Txn: how MetaService operations see the store.
//
// Read-only operations use a KvReader straight over the KvStore. Mutations run on the writer
// thread inside a Txn, which layers the writes of the current mutation and of the mutations
// before it in the same group commit over the store: each mutation sees everything queued
// before it, and a mutation that fails leaves nothing behind. The writer turns the group's
// writes into one WriteBatch (one WAL write).
//
// Thread-safety: a Txn belongs to the writer thread; a KvReader may be used by any one thread.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "meta/kv_store.h"

namespace ciuic::meta {

// Visitor for Scan: return false to stop.
using ScanFn = std::function<bool(std::string_view key, std::string_view value)>;

class Reader {
 public:
  virtual ~Reader() = default;
  // As KvStore::Get: kNotFound when absent.
  virtual Status Get(Cf cf, std::string_view key, std::string* value) = 0;
  // Visits keys in [start, end) in order (end "" = unbounded) until `fn` returns false.
  virtual Status Scan(Cf cf, std::string_view start, std::string_view end, const ScanFn& fn) = 0;
};

class KvReader : public Reader {
 public:
  explicit KvReader(KvStore* kv) : kv_(kv) {}
  Status Get(Cf cf, std::string_view key, std::string* value) override {
    return kv_->Get(cf, key, value);
  }
  Status Scan(Cf cf, std::string_view start, std::string_view end, const ScanFn& fn) override;

 private:
  KvStore* kv_;
};

class Txn : public Reader {
 public:
  explicit Txn(KvStore* kv) : kv_(kv) {}

  Status Get(Cf cf, std::string_view key, std::string* value) override;
  Status Scan(Cf cf, std::string_view start, std::string_view end, const ScanFn& fn) override;

  void Put(Cf cf, std::string key, std::string value);
  void Delete(Cf cf, std::string key);
  // Runs `fn` after the group commits (in mutation order) or, for OnAbort, when this mutation
  // fails or the group's write fails (in reverse order). For in-memory state.
  void OnCommit(std::function<void()> fn) { mut_.commit.push_back(std::move(fn)); }
  void OnAbort(std::function<void()> fn) { mut_.abort.push_back(std::move(fn)); }
  // Asks for a synced WAL write of the whole group.
  void RequireSync() { mut_.sync = true; }

  // Writer-side control.
  void BeginMutation();
  // Keeps (ok) or drops the current mutation's writes; dropping runs its abort hooks.
  void EndMutation(bool ok);
  bool empty() const;
  bool sync() const { return sync_; }
  WriteBatch TakeBatch();
  void RunCommitHooks();
  void RunAbortHooks();

 private:
  using Overlay = std::map<std::string, std::optional<std::string>, std::less<>>;
  struct Mutation {
    std::array<Overlay, kNumCfs> writes;
    std::vector<std::function<void()>> commit;
    std::vector<std::function<void()>> abort;
    bool sync = false;
  };

  KvStore* kv_;
  Mutation mut_;
  std::array<Overlay, kNumCfs> group_;
  std::vector<std::function<void()>> commit_;
  std::vector<std::function<void()>> abort_;
  bool sync_ = false;
};

}  // namespace ciuic::meta
