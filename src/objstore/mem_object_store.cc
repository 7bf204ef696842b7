#include "objstore/mem_object_store.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "objstore/object_store_internal.h"

namespace ciuic::objstore {

using internal::QuoteKey;

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Walks a sorted snapshot of the keys for ListWithCursor.
class VectorCursor final : public internal::KeyCursor {
 public:
  explicit VectorCursor(std::vector<ObjectInfo> infos) : infos_(std::move(infos)) {}
  Status Seek(const std::string& lower) override {
    pos_ = std::lower_bound(infos_.begin(), infos_.end(), lower,
                            [](const ObjectInfo& i, const std::string& k) { return i.key < k; }) -
           infos_.begin();
    return Status::OK();
  }
  bool Valid() const override { return pos_ < infos_.size(); }
  const ObjectInfo& info() const override { return infos_[pos_]; }
  Status Next() override {
    ++pos_;
    return Status::OK();
  }

 private:
  std::vector<ObjectInfo> infos_;
  size_t pos_ = 0;
};

}  // namespace

MemObjectStore::MemObjectStore(Options opts) : opts_(std::move(opts)) {}

std::string MemObjectStore::Describe() const {
  return "mem://" + opts_.name;
}

Status MemObjectStore::WithKey(const Status& s, std::string_view key) const {
  return s.WithContext(fmt::format("{}: {}", Describe(), QuoteKey(key)));
}

Status MemObjectStore::Enter(Op op) {
  std::lock_guard lock(mu_);
  switch (op) {
    case Op::kPut:
      ++calls_.put;
      break;
    case Op::kPutStream:
      ++calls_.put_stream;
      break;
    case Op::kGet:
      ++calls_.get;
      break;
    case Op::kHead:
      ++calls_.head;
      break;
    case Op::kList:
      ++calls_.list;
      break;
    case Op::kDelete:
      ++calls_.del;
      break;
  }
  if (fail_next_ > 0) {
    --fail_next_;
    return fail_status_;
  }
  return Status::OK();
}

Status MemObjectStore::Store(std::string_view key, std::string data, const PutOptions& opts) {
  auto shared = std::make_shared<const std::string>(std::move(data));
  std::lock_guard lock(mu_);
  Object& obj = objects_[std::string(key)];
  obj.data = std::move(shared);
  obj.metadata = opts.metadata;
  obj.etag = fmt::format("{:016x}", ++generation_);
  obj.mtime_ms = NowMs();
  return Status::OK();
}

Status MemObjectStore::Put(std::string_view key, std::string_view data, const PutOptions& opts) {
  CIUIC_RETURN_IF_ERROR(WithKey(Enter(Op::kPut), key));
  CIUIC_RETURN_IF_ERROR(ValidateKey(key).WithContext(Describe()));
  CIUIC_RETURN_IF_ERROR(
      internal::ValidateMetadata(opts, fmt::format("{}: put {}", Describe(), QuoteKey(key))));
  return Store(key, std::string(data), opts);
}

Status MemObjectStore::PutStream(std::string_view key,
                                 uint64_t size,
                                 const PutSource& source,
                                 const PutOptions& opts) {
  CIUIC_RETURN_IF_ERROR(WithKey(Enter(Op::kPutStream), key));
  CIUIC_RETURN_IF_ERROR(ValidateKey(key).WithContext(Describe()));
  CIUIC_RETURN_IF_ERROR(
      internal::ValidateMetadata(opts, fmt::format("{}: put {}", Describe(), QuoteKey(key))));
  std::string data(size, '\0');
  const uint64_t part = std::max<uint64_t>(opts_.part_bytes, 1);
  const uint64_t parts = (size + part - 1) / part;
  // Parts are handed out in order to the workers; the first error stops the others.
  std::mutex mu;
  uint64_t next_part = 0;  // guarded by mu
  Status first_error;      // guarded by mu
  auto work = [&] {
    for (;;) {
      uint64_t p;
      {
        std::lock_guard lock(mu);
        if (!first_error.ok() || next_part == parts) {
          return;
        }
        p = next_part++;
      }
      uint64_t offset = p * part;
      uint64_t n = std::min(part, size - offset);
      Status s;
      try {
        s = source(offset, std::span<char>(data.data() + offset, n));
      } catch (const std::exception& e) {
        s = Status::Internal(fmt::format("put source threw: {}", e.what()));
      }
      if (!s.ok()) {
        std::lock_guard lock(mu);
        if (first_error.ok()) {
          first_error = std::move(s);
        }
        return;
      }
    }
  };
  const int threads =
      static_cast<int>(std::min<uint64_t>(std::max(opts_.parallel_parts, 1), parts));
  std::vector<std::thread> workers;
  for (int i = 1; i < threads; ++i) {
    try {
      workers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no thread to be had: fewer parts at once, same result
    }
  }
  work();
  for (std::thread& t : workers) {
    t.join();
  }
  if (!first_error.ok()) {
    return WithKey(first_error, key);
  }
  return Store(key, std::move(data), opts);
}

Result<size_t> MemObjectStore::Get(std::string_view key, uint64_t offset, std::span<char> dst) {
  std::shared_ptr<const std::function<void(std::string_view, uint64_t)>> hook;
  {
    std::lock_guard lock(mu_);
    hook = get_hook_;
  }
  if (hook != nullptr)
    (*hook)(key, offset);
  CIUIC_RETURN_IF_ERROR(WithKey(Enter(Op::kGet), key));
  CIUIC_RETURN_IF_ERROR(ValidateKey(key).WithContext(Describe()));
  std::shared_ptr<const std::string> data;
  {
    std::lock_guard lock(mu_);
    auto it = objects_.find(std::string(key));
    if (it == objects_.end()) {
      return Status::NotFound(fmt::format("{}: no object {}", Describe(), QuoteKey(key)));
    }
    data = it->second.data;
  }
  if (offset >= data->size()) {
    return size_t{0};
  }
  size_t n = std::min<uint64_t>(dst.size(), data->size() - offset);
  std::copy_n(data->data() + offset, n, dst.data());
  return n;
}

Result<ObjectInfo> MemObjectStore::Head(std::string_view key) {
  CIUIC_RETURN_IF_ERROR(WithKey(Enter(Op::kHead), key));
  CIUIC_RETURN_IF_ERROR(ValidateKey(key).WithContext(Describe()));
  std::lock_guard lock(mu_);
  auto it = objects_.find(std::string(key));
  if (it == objects_.end()) {
    return Status::NotFound(fmt::format("{}: no object {}", Describe(), QuoteKey(key)));
  }
  const Object& obj = it->second;
  return ObjectInfo{.key = it->first,
                    .size = obj.data->size(),
                    .etag = obj.etag,
                    .mtime_ms = obj.mtime_ms,
                    .metadata = obj.metadata};
}

Result<ListPage> MemObjectStore::List(const ListOptions& opts) {
  CIUIC_RETURN_IF_ERROR(Enter(Op::kList).WithContext(Describe()));
  CIUIC_RETURN_IF_ERROR(internal::ValidateListOptions(opts, Describe()));
  // A snapshot of the keys under the prefix, so ListWithCursor runs outside the lock. A test
  // store is small; copying its keys is cheaper than reasoning about a cursor under a lock.
  std::vector<ObjectInfo> infos;
  {
    std::lock_guard lock(mu_);
    for (auto it = objects_.lower_bound(opts.prefix);
         it != objects_.end() && it->first.starts_with(opts.prefix); ++it) {
      infos.push_back(ObjectInfo{.key = it->first,
                                 .size = it->second.data->size(),
                                 .etag = it->second.etag,
                                 .mtime_ms = it->second.mtime_ms,
                                 .metadata = {}});
    }
  }
  VectorCursor cursor(std::move(infos));
  return internal::ListWithCursor(opts, cursor);
}

Status MemObjectStore::Delete(std::string_view key) {
  CIUIC_RETURN_IF_ERROR(WithKey(Enter(Op::kDelete), key));
  CIUIC_RETURN_IF_ERROR(ValidateKey(key).WithContext(Describe()));
  std::lock_guard lock(mu_);
  objects_.erase(std::string(key));
  return Status::OK();
}

void MemObjectStore::TEST_FailNext(int n, Status s) {
  std::lock_guard lock(mu_);
  fail_next_ = n;
  fail_status_ = std::move(s);
}

void MemObjectStore::TEST_SetGetHook(
    std::function<void(std::string_view key, uint64_t offset)> hook) {
  std::lock_guard lock(mu_);
  get_hook_ =
      hook
          ? std::make_shared<const std::function<void(std::string_view, uint64_t)>>(std::move(hook))
          : nullptr;
}

MemObjectStore::CallCounts MemObjectStore::TEST_calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

size_t MemObjectStore::TEST_size() const {
  std::lock_guard lock(mu_);
  return objects_.size();
}

}  // namespace ciuic::objstore
