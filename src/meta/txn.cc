#include "meta/txn.h"

namespace ciuic::meta {

Status KvReader::Scan(Cf cf, std::string_view start, std::string_view end, const ScanFn& fn) {
  auto it = kv_->NewIterator(cf, std::string(end));
  for (it->Seek(start); it->Valid(); it->Next()) {
    if (!fn(it->key(), it->value()))
      return Status::OK();
  }
  return it->status();
}

Status Txn::Get(Cf cf, std::string_view key, std::string* value) {
  const size_t i = static_cast<size_t>(cf);
  for (const Overlay* o : {&mut_.writes[i], &group_[i]}) {
    auto it = o->find(key);
    if (it != o->end()) {
      if (!it->second)
        return Status::NotFound("key not found");
      value->assign(*it->second);
      return Status::OK();
    }
  }
  return kv_->Get(cf, key, value);
}

Status Txn::Scan(Cf cf, std::string_view start, std::string_view end, const ScanFn& fn) {
  const size_t i = static_cast<size_t>(cf);
  // Pending writes in range, the current mutation's winning over the group's. Overlays are
  // small (one group's writes), so copying their keys in range is cheap.
  std::map<std::string, const std::optional<std::string>*, std::less<>> pending;
  for (const Overlay* o : {&mut_.writes[i], &group_[i]}) {
    auto it = o->lower_bound(start);
    for (; it != o->end() && (end.empty() || it->first < end); ++it) {
      pending.emplace(it->first, &it->second);  // emplace keeps the first (newer) one
    }
  }
  auto it = kv_->NewIterator(cf, std::string(end));
  it->Seek(start);
  auto p = pending.begin();
  while (true) {
    const bool kv_valid = it->Valid();
    if (!kv_valid && p == pending.end())
      break;
    if (p != pending.end() && (!kv_valid || p->first <= it->key())) {
      if (kv_valid && p->first == it->key())
        it->Next();
      const auto& v = *p->second;
      if (v && !fn(p->first, *v))
        return Status::OK();
      ++p;
      continue;
    }
    if (!fn(it->key(), it->value()))
      return Status::OK();
    it->Next();
  }
  return it->status();
}

void Txn::Put(Cf cf, std::string key, std::string value) {
  mut_.writes[static_cast<size_t>(cf)].insert_or_assign(std::move(key), std::move(value));
}

void Txn::Delete(Cf cf, std::string key) {
  mut_.writes[static_cast<size_t>(cf)].insert_or_assign(std::move(key), std::nullopt);
}

void Txn::BeginMutation() {
  mut_ = Mutation();
}

void Txn::EndMutation(bool ok) {
  if (ok) {
    for (size_t i = 0; i < kNumCfs; ++i) {
      for (auto& [k, v] : mut_.writes[i])
        group_[i].insert_or_assign(k, std::move(v));
    }
    for (auto& f : mut_.commit)
      commit_.push_back(std::move(f));
    for (auto& f : mut_.abort)
      abort_.push_back(std::move(f));
    sync_ = sync_ || mut_.sync;
  } else {
    for (auto it = mut_.abort.rbegin(); it != mut_.abort.rend(); ++it)
      (*it)();
  }
  mut_ = Mutation();
}

bool Txn::empty() const {
  for (const auto& o : group_) {
    if (!o.empty())
      return false;
  }
  return true;
}

WriteBatch Txn::TakeBatch() {
  WriteBatch b;
  for (size_t i = 0; i < kNumCfs; ++i) {
    for (auto& [k, v] : group_[i]) {
      if (v) {
        b.PutOwned(static_cast<Cf>(i), k, std::move(*v));
      } else {
        b.Delete(static_cast<Cf>(i), k);
      }
    }
    group_[i].clear();
  }
  return b;
}

void Txn::RunCommitHooks() {
  for (auto& f : commit_)
    f();
  commit_.clear();
  abort_.clear();
}

void Txn::RunAbortHooks() {
  for (auto it = abort_.rbegin(); it != abort_.rend(); ++it)
    (*it)();
  abort_.clear();
  commit_.clear();
}

}  // namespace ciuic::meta
