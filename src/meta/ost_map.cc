#include "meta/ost_map.h"

#include <algorithm>
#include <set>
#include <string>

#include <fmt/format.h>

#include "common/logging.h"

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
    int64_t now_ms,
    const std::string& domain_in,
    uint64_t epoch) {
  std::lock_guard lock(mu_);
  std::vector<pb::OstInfo> changed;
  const std::string& domain = domain_in.empty() ? addr : domain_in;
  for (const auto& in : osts) {
    auto& e = osts_[in.index()];
    const bool persist_changed = e.info.oss_addr() != addr || e.info.capacity() != in.capacity() ||
                                 e.info.device_id() != in.device_id() || e.last_seen_ms == 0 ||
                                 e.info.domain() != domain || e.info.epoch() != epoch ||
                                 e.info.incarnation() != in.incarnation();
    if (epoch != 0 && e.info.epoch() != 0 && e.info.epoch() != epoch) {
      // The OSS lost its page cache (a reboot, a power cut): its copies may lack writes it
      // acknowledged, so they serve again only after catching up.
      TakeOffline(in.index(), &changed_);
    } else if (in.incarnation() != 0 && e.info.incarnation() != 0 &&
               in.incarnation() != e.info.incarnation()) {
      // A new, empty OST directory under the old index: rebuilt from the other copies.
      LOG_WARN("mds: OST {} came back as a new directory; its copies will be rebuilt", in.index());
      TakeOffline(in.index(), &changed_);
    }
    e.info.set_incarnation(in.incarnation());
    e.info.set_epoch(epoch);
    e.info.set_domain(domain);
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
    *e.info.mutable_scrub() = in.scrub();  // in memory only: not part of the persisted entry
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
  for (const auto& [id, c] : chains_)
    *r.add_chains() = c;
  r.set_chains_version(chains_version_);
  return r;
}

// ---------------------------------------------------------------------------------------------
// Chains

void OstMap::LoadChain(const pb::Chain& chain) {
  std::lock_guard lock(mu_);
  pb::Chain c = chain;
  c.set_version(((c.version() >> 32) + 1) << 32);
  std::vector<uint32_t> members;
  for (const auto& m : c.members())
    members.push_back(m.ost());
  chain_ids_[members] = c.id();
  next_chain_ = std::max(next_chain_, c.id() - kChainBase + 1);
  chains_version_ = std::max(chains_version_, c.version());
  changed_.push_back(c);  // persisted with its new version by the first tick
  chains_[c.id()] = std::move(c);
}

void OstMap::TakeOffline(uint32_t ost, std::vector<pb::Chain>* changed) {
  for (auto& [id, c] : chains_) {
    int serving = 0;
    for (const auto& m : c.members())
      serving += m.state() == kMemberServing ? 1 : 0;
    bool touched = false;
    for (auto& m : *c.mutable_members()) {
      if (m.ost() != ost || m.state() == kMemberOffline)
        continue;
      if (m.state() == kMemberServing && serving <= 1)
        continue;  // the last serving copy stays: the chain waits for it
      serving -= m.state() == kMemberServing ? 1 : 0;
      m.set_state(kMemberOffline);
      touched = true;
    }
    if (touched) {
      c.set_version(c.version() + 1);
      chains_version_ = std::max(chains_version_ + 1, c.version());
      changed->push_back(c);
    }
  }
}

Result<std::vector<uint32_t>> OstMap::ChooseChains(uint32_t count,
                                                   uint32_t replicas,
                                                   std::vector<pb::Chain>* used) {
  std::lock_guard lock(mu_);
  // Candidates, interleaved by failure domain (one OST of each domain in turn), so that a head
  // at position p and the members after it fall in different domains and every OST is head and
  // follower about equally often.
  std::map<std::string, std::vector<uint32_t>> by_domain;
  for (const auto& [idx, e] : osts_) {
    if (e.info.state() == kOstReadonly)
      continue;
    by_domain[e.info.domain().empty() ? e.info.oss_addr() : e.info.domain()].push_back(idx);
  }
  if (by_domain.size() < replicas) {
    return Status::InvalidArgument(
        fmt::format("{} replicas need {} failure domains; the cluster has {} (an OSS, or a host "
                    "label shared by OSSes, is one domain)",
                    replicas, replicas, by_domain.size()));
  }
  std::vector<uint32_t> order;
  std::vector<std::string> domain_of;
  for (size_t round = 0;; ++round) {
    bool any = false;
    for (const auto& [d, list] : by_domain) {
      if (round < list.size()) {
        order.push_back(list[round]);
        domain_of.push_back(d);
        any = true;
      }
    }
    if (!any)
      break;
  }
  auto up = [&](uint32_t ost) { return osts_.at(ost).info.state() == kOstUp; };
  std::vector<size_t> heads;
  for (size_t i = 0; i < order.size(); ++i) {
    if (up(order[i]))
      heads.push_back(i);
  }
  if (heads.empty())
    return Status::Unavailable("no OST is up to hold the file's data");
  count = std::min<uint32_t>(count, static_cast<uint32_t>(heads.size()));
  std::vector<uint32_t> out;
  std::set<uint32_t> used_ids;
  const uint64_t start = chain_rr_;
  chain_rr_ += count;
  for (uint32_t i = 0; i < count; ++i) {
    const size_t h = heads[(start + i) % heads.size()];
    std::vector<uint32_t> members{order[h]};
    std::set<std::string> domains{domain_of[h]};
    // Followers: the next OSTs of other domains, up ones first.
    for (int pass = 0; pass < 2 && members.size() < replicas; ++pass) {
      for (size_t k = 1; k < order.size() && members.size() < replicas; ++k) {
        const size_t j = (h + k) % order.size();
        if (domains.count(domain_of[j]) != 0 || up(order[j]) != (pass == 0))
          continue;
        members.push_back(order[j]);
        domains.insert(domain_of[j]);
      }
    }
    auto it = chain_ids_.find(members);
    uint32_t id;
    if (it != chain_ids_.end()) {
      id = it->second;
    } else {
      id = kChainBase + next_chain_++;
      pb::Chain c;
      c.set_id(id);
      c.set_version(chains_version_ + 1);
      chains_version_ = c.version();
      for (uint32_t ost : members) {
        pb::ChainMember* m = c.add_members();
        m->set_ost(ost);
        m->set_state(up(ost) ? kMemberServing : kMemberOffline);
      }
      chain_ids_[members] = id;
      chains_[id] = std::move(c);
    }
    out.push_back(id);
    if (used_ids.insert(id).second)
      used->push_back(chains_[id]);
  }
  return out;
}

std::vector<pb::Chain> OstMap::ExpireChainMembers(int64_t now_ms, int64_t dead_after_ms) {
  std::lock_guard lock(mu_);
  if (started_ms_ < 0)
    started_ms_ = now_ms;
  std::vector<pb::Chain> changed;
  changed.swap(changed_);
  for (const auto& [idx, e] : osts_) {
    if (e.info.state() != kOstDown)
      continue;
    // OSTs not seen since the MDS started get a longer grace: their OSSes register again as
    // the cluster comes up.
    const int64_t since = e.last_seen_ms != 0
                              ? e.last_seen_ms
                              : started_ms_ + std::max<int64_t>(0, 10000 - dead_after_ms);
    if (now_ms - since > dead_after_ms)
      TakeOffline(idx, &changed);
  }
  // Members back on an up OST catch up from a serving one.
  for (auto& [id, c] : chains_) {
    bool serving = false;
    for (const auto& m : c.members())
      serving |= m.state() == kMemberServing;
    if (!serving)
      continue;
    bool touched = false;
    for (auto& m : *c.mutable_members()) {
      if (m.state() != kMemberOffline)
        continue;
      auto it = osts_.find(m.ost());
      if (it == osts_.end() || it->second.info.state() == kOstDown)
        continue;
      if (!touched) {
        c.set_version(c.version() + 1);
        chains_version_ = std::max(chains_version_ + 1, c.version());
        touched = true;
      }
      m.set_state(kMemberSyncing);
      m.set_since(c.version());
      m.clear_sync_objects_done();
      m.clear_sync_objects_total();
      m.clear_sync_bytes_copied();
    }
    if (touched)
      changed.push_back(c);
  }
  return changed;
}

std::vector<pb::Chain> OstMap::NoteResync(
    const google::protobuf::RepeatedPtrField<pb::ResyncProgress>& progress) {
  std::lock_guard lock(mu_);
  std::vector<pb::Chain> changed;
  for (const pb::ResyncProgress& p : progress) {
    auto it = chains_.find(p.chain());
    if (it == chains_.end())
      continue;
    pb::Chain& c = it->second;
    for (auto& m : *c.mutable_members()) {
      if (m.ost() != p.ost() || m.state() != kMemberSyncing || m.since() != p.since())
        continue;  // an old resync's report
      if (!p.done()) {
        m.set_sync_objects_done(p.objects_done());
        m.set_sync_objects_total(p.objects_total());
        m.set_sync_bytes_copied(p.bytes_copied());
        continue;
      }
      m.set_state(kMemberServing);
      m.clear_since();
      m.clear_sync_objects_done();
      m.clear_sync_objects_total();
      m.clear_sync_bytes_copied();
      c.set_version(c.version() + 1);
      chains_version_ = std::max(chains_version_ + 1, c.version());
      LOG_INFO("mds: OST {} caught up in chain {} ({} objects checked, {} bytes copied)", p.ost(),
               c.id() - kChainBase, p.objects_total(), p.bytes_copied());
      changed.push_back(c);
    }
  }
  return changed;
}

std::vector<pb::Chain> OstMap::TakeChangedChains() {
  std::lock_guard lock(mu_);
  std::vector<pb::Chain> out;
  out.swap(changed_);
  return out;
}

std::vector<uint32_t> OstMap::ChainMembers(uint32_t id) const {
  std::lock_guard lock(mu_);
  std::vector<uint32_t> out;
  auto it = chains_.find(id);
  if (it != chains_.end()) {
    for (const auto& m : it->second.members())
      out.push_back(m.ost());
  }
  return out;
}

uint32_t OstMap::Domains(bool up_only) const {
  std::lock_guard lock(mu_);
  std::set<std::string> d;
  for (const auto& [idx, e] : osts_) {
    if (!up_only || e.info.state() == kOstUp)
      d.insert(e.info.domain().empty() ? e.info.oss_addr() : e.info.domain());
  }
  return static_cast<uint32_t>(d.size());
}

OstMap::ChainHealth OstMap::Health() const {
  std::lock_guard lock(mu_);
  ChainHealth h;
  for (const auto& [id, c] : chains_) {
    ++h.chains;
    bool degraded = false, available = false;
    for (const auto& m : c.members()) {
      degraded |= m.state() != kMemberServing;
      auto it = osts_.find(m.ost());
      const bool ost_up = it != osts_.end() && it->second.info.state() != kOstDown;
      degraded |= !ost_up;
      available |= m.state() == kMemberServing && ost_up;
    }
    h.degraded += degraded ? 1 : 0;
    h.unavailable += available ? 0 : 1;
  }
  return h;
}

uint64_t OstMap::version() const {
  std::lock_guard lock(mu_);
  return version_;
}

uint64_t OstMap::chains_version() const {
  std::lock_guard lock(mu_);
  return chains_version_;
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
