// MemObjectStore: the in-memory twin of the object stores, with S3's semantics (keys "a" and
// "a/b" coexist; listing in unsigned-byte order), for the tests of everything built on
// ObjectStore. Objects live in a map under one mutex; Get copies out of an immutable snapshot
// of the object, so readers never see a half-written one.
//
// Test hooks: TEST_FailNext() makes the next operations fail, TEST_calls() counts calls,
// TEST_SetGetHook() runs a function (a delay, a gate) at the start of every Get.
// Thread-safety: every method may be called from many threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "objstore/object_store.h"

namespace ciuic::objstore {

class MemObjectStore final : public ObjectStore {
 public:
  struct Options {
    std::string name = "test";  // Describe() says "mem://<name>"
    // PutStream asks its source for parts of this size (the last one shorter) ...
    uint64_t part_bytes = 1 << 20;
    // ... from this many threads at once, as S3's multipart upload does.
    int parallel_parts = 4;
  };

  // Calls made to each method, failed ones included (GetAll counts as a Head and a Get).
  struct CallCounts {
    uint64_t put = 0;
    uint64_t put_stream = 0;
    uint64_t get = 0;
    uint64_t head = 0;
    uint64_t list = 0;
    uint64_t del = 0;
  };

  MemObjectStore() : MemObjectStore(Options{}) {}
  explicit MemObjectStore(Options opts);

  Status Put(std::string_view key, std::string_view data, const PutOptions& opts = {}) override;
  Status PutStream(std::string_view key,
                   uint64_t size,
                   const PutSource& source,
                   const PutOptions& opts = {}) override;
  Result<size_t> Get(std::string_view key, uint64_t offset, std::span<char> dst) override;
  Result<ObjectInfo> Head(std::string_view key) override;
  Result<ListPage> List(const ListOptions& opts) override;
  Status Delete(std::string_view key) override;
  std::string Describe() const override;

  // Makes the next `n` calls (of any method) fail with `s` before they do anything.
  void TEST_FailNext(int n, Status s);
  // Calls `hook(key, offset)` at the start of every Get, outside the store's lock (nullptr:
  // none).
  void TEST_SetGetHook(std::function<void(std::string_view key, uint64_t offset)> hook);
  // Returns how many calls each method has had.
  CallCounts TEST_calls() const;
  // Returns how many objects the store holds.
  size_t TEST_size() const;

 private:
  struct Object {
    std::shared_ptr<const std::string> data;  // never changed once stored
    std::map<std::string, std::string> metadata;
    std::string etag;
    int64_t mtime_ms = 0;
  };
  enum class Op { kPut, kPutStream, kGet, kHead, kList, kDelete };

  // Counts a call to `op` and returns the injected failure, if one is armed.
  Status Enter(Op op);
  Status Store(std::string_view key, std::string data, const PutOptions& opts);
  // Prefixes `s`'s message with the store and `key`.
  Status WithKey(const Status& s, std::string_view key) const;

  const Options opts_;
  mutable std::mutex mu_;
  std::map<std::string, Object> objects_;  // CIUIC_GUARDED_BY(mu_)
  uint64_t generation_ = 0;                // CIUIC_GUARDED_BY(mu_); makes ETags
  std::shared_ptr<const std::function<void(std::string_view, uint64_t)>>
      get_hook_;        // CIUIC_GUARDED_BY(mu_)
  int fail_next_ = 0;   // CIUIC_GUARDED_BY(mu_)
  Status fail_status_;  // CIUIC_GUARDED_BY(mu_)
  CallCounts calls_;    // CIUIC_GUARDED_BY(mu_)
};

}  // namespace ciuic::objstore
