#include "meta/lock_table.h"

#include <algorithm>

#include <fmt/format.h>

namespace ciuic::meta {
namespace {

bool SameOwner(const LockTable::Lock& a, const LockTable::Lock& b) {
  return a.session == b.session && a.owner == b.owner;
}

bool Overlap(const LockTable::Lock& a, const LockTable::Lock& b) {
  return a.start <= b.end && b.start <= a.end;
}

}  // namespace

const LockTable::Lock* LockTable::FindConflict(const Fid& fid, const Lock& want) const {
  auto it = locks_.find(fid);
  if (it == locks_.end())
    return nullptr;
  for (const Lock& l : it->second) {
    if (l.kind != want.kind || SameOwner(l, want) || !Overlap(l, want))
      continue;
    if (l.type == kExclusive || want.type == kExclusive)
      return &l;
  }
  return nullptr;
}

Status LockTable::Apply(const Fid& fid, const Lock& want) {
  std::vector<Lock>& all = locks_[fid];
  std::vector<Lock> out;
  out.reserve(all.size() + 2);
  Lock merged = want;
  for (const Lock& l : all) {
    if (l.kind != want.kind || !SameOwner(l, want)) {
      out.push_back(l);
      continue;
    }
    // Same owner and kind. Adjacent or overlapping ranges of the same type merge into the new
    // one; other overlapped ranges lose the covered part (split when it is in the middle).
    const bool adjacent = (want.end != UINT64_MAX && l.start == want.end + 1) ||
                          (want.start != 0 && l.end == want.start - 1);
    if (want.type != kUnlock && l.type == want.type && (Overlap(l, want) || adjacent)) {
      merged.start = std::min(merged.start, l.start);
      merged.end = std::max(merged.end, l.end);
      continue;
    }
    if (!Overlap(l, want)) {
      out.push_back(l);
      continue;
    }
    if (l.start < want.start) {
      Lock left = l;
      left.end = want.start - 1;
      out.push_back(left);
    }
    if (l.end > want.end) {
      Lock right = l;
      right.start = want.end + 1;
      out.push_back(right);
    }
  }
  if (want.type != kUnlock)
    out.push_back(merged);
  auto of_session = [&](const std::vector<Lock>& v) {
    return static_cast<size_t>(std::count_if(
        v.begin(), v.end(), [&](const Lock& l) { return l.session == want.session; }));
  };
  const size_t before = of_session(all);
  const size_t after = of_session(out);
  size_t& held = per_session_[want.session];
  if (out.size() > all.size() && out.size() > limits_.max_per_file) {
    Status st = Status::NoSpace(
        fmt::format("too many lock ranges on this file (cap {})", limits_.max_per_file));
    if (all.empty())
      locks_.erase(fid);
    if (held == 0)
      per_session_.erase(want.session);
    return st;
  }
  if (after > before && held + (after - before) > limits_.max_per_session) {
    Status st = Status::NoSpace(
        fmt::format("too many lock ranges held by this session (cap {})", limits_.max_per_session));
    if (all.empty())
      locks_.erase(fid);
    return st;
  }
  held = held + after - before;
  if (held == 0)
    per_session_.erase(want.session);
  if (out.empty()) {
    locks_.erase(fid);
  } else {
    all = std::move(out);
  }
  return Status::OK();
}

void LockTable::ReleaseSession(uint64_t session) {
  per_session_.erase(session);
  for (auto it = locks_.begin(); it != locks_.end();) {
    auto& v = it->second;
    v.erase(std::remove_if(v.begin(), v.end(), [&](const Lock& l) { return l.session == session; }),
            v.end());
    if (v.empty()) {
      it = locks_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t LockTable::CountFor(const Fid& fid) const {
  auto it = locks_.find(fid);
  return it == locks_.end() ? 0 : it->second.size();
}

size_t LockTable::size() const {
  size_t n = 0;
  for (const auto& [fid, v] : locks_)
    n += v.size();
  return n;
}

}  // namespace ciuic::meta
