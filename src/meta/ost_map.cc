#include "meta/ost_map.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace ciuic::meta {

uint32_t OstMap::StateFor(const pb::OstInfo& info) {
  if (info.state() == kOstReadonly)
    return kOstReadonly;
  const uint64_t cap = info.capacity();
  const uint64_t free = info.free();
  if (free < (64ull << 20) || free < cap / 100)
    return kOstFull;
  return kOstUp;
}

void OstMap::Load(const pb::OstInfo& info) {
  std::lock_guard lock(mu_);
  Entry e;
  e.info = info;
  e.info.set_state(kOstDown);
  osts_[info.index()] = std::move(e);
  ++version_;
}

std::vector<pb::OstInfo> OstMap::Register(
    const std::string& addr,
    const google::protobuf::RepeatedPtrField<pb::OstInfo>& osts,
    int64_t now_ms) {
  std::lock_guard lock(mu_);
  std::vector<pb::OstInfo> changed;
  for (const auto& in : osts) {
    auto& e = osts_[in.index()];
    const bool persist_changed = e.info.oss_addr() != addr || e.info.capacity() != in.capacity() ||
                                 e.info.device_id() != in.device_id() || e.last_seen_ms == 0;
    e.info.set_index(in.index());
    e.info.set_oss_addr(addr);
    e.info.set_capacity(in.capacity());
    e.info.set_free(in.free());
    e.info.set_device_id(in.device_id());
    e.info.set_state(in.state() == kOstReadonly ? kOstReadonly : kOstUp);
    e.info.set_state(StateFor(e.info));
    e.last_seen_ms = now_ms;
    if (persist_changed) {
      pb::OstInfo p = e.info;
      p.set_state(kOstUp);
      p.set_free(0);
      changed.push_back(std::move(p));
    }
  }
  ++version_;
  return changed;
}

Status OstMap::Heartbeat(const std::string& addr,
                         const google::protobuf::RepeatedPtrField<pb::OstInfo>& osts,
                         int64_t now_ms) {
  std::lock_guard lock(mu_);
  bool any = false;
  for (auto& [idx, e] : osts_) {
    if (e.info.oss_addr() == addr)
      any = true;
  }
  if (!any)
    return Status::NotFound(fmt::format("OSS {} is not registered", addr));
  for (const auto& in : osts) {
    auto it = osts_.find(in.index());
    if (it == osts_.end() || it->second.info.oss_addr() != addr) {
      return Status::NotFound(fmt::format("OST {} is not registered to OSS {}", in.index(), addr));
    }
    Entry& e = it->second;
    const uint32_t old_state = e.info.state();
    if (in.capacity() != 0)
      e.info.set_capacity(in.capacity());
    e.info.set_free(in.free());
    e.info.set_state(in.state() == kOstReadonly ? kOstReadonly : kOstUp);
    e.info.set_state(StateFor(e.info));
    e.last_seen_ms = now_ms;
    if (e.info.state() != old_state)
      ++version_;
  }
  // An OSS's heartbeat also vouches for those of its OSTs it did not list.
  for (auto& [idx, e] : osts_) {
    if (e.info.oss_addr() == addr && e.info.state() == kOstDown) {
      e.info.set_state(StateFor(e.info));
      e.last_seen_ms = now_ms;
      ++version_;
    }
  }
  return Status::OK();
}

int OstMap::ExpireSilent(int64_t now_ms, int64_t dead_after_ms) {
  std::lock_guard lock(mu_);
  int n = 0;
  for (auto& [idx, e] : osts_) {
    if (e.info.state() == kOstDown)
      continue;
    if (now_ms - e.last_seen_ms > dead_after_ms) {
      e.info.set_state(kOstDown);
      ++n;
    }
  }
  if (n > 0)
    ++version_;
  return n;
}

std::vector<uint32_t> OstMap::Choose(uint32_t count) {
  std::lock_guard lock(mu_);
  std::vector<const Entry*> up;
  for (const auto& [idx, e] : osts_) {
    if (e.info.state() == kOstUp)
      up.push_back(&e);
  }
  std::vector<uint32_t> out;
  if (up.empty() || count == 0)
    return out;
  count = std::min<uint32_t>(count, static_cast<uint32_t>(up.size()));
  uint64_t max_free = 0, min_free = UINT64_MAX;
  for (const Entry* e : up) {
    max_free = std::max<uint64_t>(max_free, e->info.free());
    min_free = std::min<uint64_t>(min_free, e->info.free());
  }
  const uint64_t start = rr_;
  rr_ += count;
  if (min_free >= max_free / 5 * 4) {
    // Balanced: round-robin from a cursor that advances by what each file takes, shifted by one
    // more OST on every lap. Plain round-robin locks into step with any writer that creates files
    // in a repeating pattern: `ciuic pack` writes shard, index, shard, index..., which put every
    // 64 MiB shard on the even OSTs and every small index on the odd ones. The shift breaks the
    // step while consecutive files still land on different OSTs within a lap.
    const uint64_t lap = start / up.size();
    for (uint32_t i = 0; i < count; ++i)
      out.push_back(up[(start + lap + i) % up.size()]->info.index());
    return out;
  }
  // Imbalanced: pick without replacement with probability proportional to free space, from a
  // deterministic stream (splitmix64 of the cursor), so emptier OSTs fill faster.
  uint64_t state = start * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  auto next = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  std::vector<const Entry*> pool = up;
  while (out.size() < count) {
    unsigned __int128 total = 0;
    for (const Entry* e : pool)
      total += e->info.free() + 1;
    unsigned __int128 pick = (static_cast<unsigned __int128>(next()) << 64 | next()) % total;
    size_t i = 0;
    for (; i + 1 < pool.size(); ++i) {
      const uint64_t w = pool[i]->info.free() + 1;
      if (pick < w)
        break;
      pick -= w;
    }
    out.push_back(pool[i]->info.index());
    pool.erase(pool.begin() + static_cast<ptrdiff_t>(i));
  }
  return out;
}

uint32_t OstMap::usable() const {
  std::lock_guard lock(mu_);
  uint32_t n = 0;
  for (const auto& [idx, e] : osts_)
    n += e.info.state() == kOstUp ? 1 : 0;
  return n;
}

bool OstMap::Known(uint32_t index) const {
  std::lock_guard lock(mu_);
  return osts_.count(index) != 0;
}

std::vector<uint32_t> OstMap::OstsOf(const std::string& addr) const {
  std::lock_guard lock(mu_);
  std::vector<uint32_t> out;
  for (const auto& [idx, e] : osts_) {
    if (e.info.oss_addr() == addr)
      out.push_back(idx);
  }
  return out;
}

pb::GetOstMapResp OstMap::Snapshot() const {
  std::lock_guard lock(mu_);
  pb::GetOstMapResp r;
  for (const auto& [idx, e] : osts_)
    *r.add_osts() = e.info;
  r.set_version(version_);
  return r;
}

OstMap::Space OstMap::TotalSpace() const {
  std::lock_guard lock(mu_);
  Space s;
  std::set<uint64_t> devices;
  for (const auto& [idx, e] : osts_) {
    // device_id 0 means "unknown": count that OST on its own.
    if (e.info.device_id() != 0 && !devices.insert(e.info.device_id()).second)
      continue;
    s.total += e.info.capacity();
    s.free += e.info.free();
  }
  return s;
}

}  // namespace ciuic::meta
