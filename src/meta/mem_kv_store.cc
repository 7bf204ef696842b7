#include "meta/mem_kv_store.h"

#include <mutex>

namespace ciuic::meta {
namespace {

class MemIterator : public KvIterator {
 public:
  MemIterator(std::shared_ptr<MemKvStore::State> state, Cf cf, std::string upper)
      : state_(std::move(state)), cf_(cf), upper_(std::move(upper)) {}

  void Seek(std::string_view key) override {
    std::shared_lock lock(state_->mu);
    const auto& m = state_->maps[static_cast<size_t>(cf_)];
    Load(m, m.lower_bound(key));
  }
  bool Valid() const override { return valid_; }
  void Next() override {
    if (!valid_)
      return;
    std::shared_lock lock(state_->mu);
    const auto& m = state_->maps[static_cast<size_t>(cf_)];
    Load(m, m.upper_bound(key_));
  }
  std::string_view key() const override { return key_; }
  std::string_view value() const override { return value_; }
  Status status() const override { return Status::OK(); }

 private:
  using Map = std::map<std::string, std::string, std::less<>>;
  void Load(const Map& m, Map::const_iterator it) {
    valid_ = it != m.end() && (upper_.empty() || it->first < upper_);
    if (valid_) {
      key_ = it->first;
      value_ = it->second;
    }
  }

  std::shared_ptr<MemKvStore::State> state_;
  Cf cf_;
  std::string upper_;
  bool valid_ = false;
  std::string key_;
  std::string value_;
};

}  // namespace

Status MemKvStore::Get(Cf cf, std::string_view key, std::string* value) {
  std::shared_lock lock(state_->mu);
  const auto& m = state_->maps[static_cast<size_t>(cf)];
  auto it = m.find(key);
  if (it == m.end())
    return Status::NotFound("key not found");
  value->assign(it->second);
  return Status::OK();
}

Status MemKvStore::Write(const WriteBatch& batch, bool /*sync*/) {
  std::unique_lock lock(state_->mu);
  for (const auto& op : batch.ops()) {
    auto& m = state_->maps[static_cast<size_t>(op.cf)];
    if (op.del) {
      auto it = m.find(op.key);
      if (it != m.end())
        m.erase(it);
    } else {
      m.insert_or_assign(op.key, op.value);
    }
  }
  return Status::OK();
}

std::unique_ptr<KvIterator> MemKvStore::NewIterator(Cf cf, std::string upper_bound) {
  return std::make_unique<MemIterator>(state_, cf, std::move(upper_bound));
}

size_t MemKvStore::TEST_Count(Cf cf) const {
  std::shared_lock lock(state_->mu);
  return state_->maps[static_cast<size_t>(cf)].size();
}

}  // namespace ciuic::meta
