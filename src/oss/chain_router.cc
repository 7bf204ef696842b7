#include "oss/chain_router.h"

#include <algorithm>
#include <future>
#include <utility>

#include <fmt/format.h>

#include "common/config.h"
#include "common/layout.h"
#include "common/thread_pool.h"

namespace ciuic::oss {
namespace {

constexpr uint32_t kServing = 0;
constexpr uint32_t kSyncing = 2;

}  // namespace

ChainRouter::ChainRouter(net::EventLoop* loop, ThreadPool* pool, net::ChannelOptions peer_options)
    : loop_(loop), pool_(pool), peer_options_(std::move(peer_options)) {}

void ChainRouter::Update(const pb::GetOstMapResp& map) {
  std::lock_guard lock(mu_);
  for (const auto& o : map.osts()) {
    if (!o.oss_addr().empty())
      ost_addr_[o.index()] = o.oss_addr();
  }
  map_version_ = std::max(map_version_, map.version());
  if (map.chains_version() < version_)
    return;
  version_ = map.chains_version();
  for (const auto& c : map.chains()) {
    chains_[c.id()] = c;
    for (const auto& m : c.members()) {
      if (m.state() == kSyncing)
        seen_syncing_.insert({c.id(), m.ost()});
    }
  }
}

bool ChainRouter::SeenSyncing(uint32_t chain, uint32_t ost) const {
  std::lock_guard lock(mu_);
  return seen_syncing_.count({chain, ost}) != 0;
}

uint64_t ChainRouter::chains_version() const {
  std::lock_guard lock(mu_);
  return version_;
}

uint64_t ChainRouter::map_version() const {
  std::lock_guard lock(mu_);
  return map_version_;
}

bool ChainRouter::TakeRefreshWanted() {
  std::lock_guard lock(mu_);
  return std::exchange(refresh_wanted_, false);
}

Status ChainRouter::Check(uint32_t chain, uint64_t version, uint32_t ost, bool read, Route* out) {
  std::lock_guard lock(mu_);
  auto it = chains_.find(chain);
  if (it == chains_.end() || it->second.version() < version) {
    refresh_wanted_ = true;
    return Status::Unavailable(
        fmt::format("chain {} version {} is newer than this OSS knows ({}); retry",
                    chain - kChainBase, version, it == chains_.end() ? 0 : it->second.version()));
  }
  const pb::Chain& c = it->second;
  if (c.version() > version) {
    return Status::Unavailable(fmt::format("stale chain {} version {}: the current one is {}",
                                           chain - kChainBase, version, c.version()));
  }
  // Active members: serving ones in chain order, then syncing ones.
  std::vector<const pb::ChainMember*> active;
  for (uint32_t want : {kServing, kSyncing}) {
    for (const auto& m : c.members()) {
      if (m.state() == want)
        active.push_back(&m);
    }
  }
  size_t pos = active.size();
  for (size_t i = 0; i < active.size(); ++i) {
    if (active[i]->ost() == ost)
      pos = i;
  }
  if (pos == active.size()) {
    return Status::Unavailable(fmt::format("OST {} is not an active member of chain {} version {}",
                                           ost, chain - kChainBase, c.version()));
  }
  out->version = c.version();
  out->head = pos == 0;
  out->serving = active[pos]->state() == kServing;
  if (read && !out->serving) {
    return Status::Unavailable(fmt::format("OST {} is catching up in chain {}; read another member",
                                           ost, chain - kChainBase));
  }
  out->has_next = pos + 1 < active.size();
  if (out->has_next) {
    out->next_ost = active[pos + 1]->ost();
    auto a = ost_addr_.find(out->next_ost);
    if (a == ost_addr_.end()) {
      refresh_wanted_ = true;
      return Status::Unavailable(fmt::format("the address of OST {} (next in chain {}) is unknown",
                                             out->next_ost, chain - kChainBase));
    }
    out->next_addr = a->second;
  }
  return Status::OK();
}

std::vector<ChainRouter::ResyncWork> ChainRouter::ResyncWorkFor(
    const std::function<bool(uint32_t)>& is_local) const {
  std::lock_guard lock(mu_);
  std::vector<ResyncWork> out;
  for (const auto& [id, c] : chains_) {
    const pb::ChainMember* head = nullptr;
    for (const auto& m : c.members()) {
      if (m.state() == kServing) {
        head = &m;
        break;
      }
    }
    if (head == nullptr || !is_local(head->ost()))
      continue;
    for (const auto& m : c.members()) {
      if (m.state() != kSyncing)
        continue;
      auto a = ost_addr_.find(m.ost());
      if (a == ost_addr_.end())
        continue;
      out.push_back(ResyncWork{id, c.version(), head->ost(), m.ost(), m.since(), a->second});
    }
  }
  return out;
}

bool ChainRouter::View(uint32_t chain, uint64_t* version, std::vector<MemberView>* members) const {
  std::lock_guard lock(mu_);
  auto it = chains_.find(chain);
  if (it == chains_.end())
    return false;
  *version = it->second.version();
  members->clear();
  for (const auto& m : it->second.members()) {
    auto a = ost_addr_.find(m.ost());
    members->push_back(MemberView{m.ost(), m.state(), a == ost_addr_.end() ? "" : a->second});
  }
  return true;
}

void ChainRouter::Call(const std::string& addr,
                       net::MsgType type,
                       std::shared_ptr<google::protobuf::MessageLite> req,
                       std::vector<net::ConstSpan> data,
                       int timeout_ms,
                       std::function<void(Result<net::Reply>)> cb) {
  auto send = [this, addr, type, req, data, timeout_ms,
               cb](Result<std::shared_ptr<net::RpcChannel>> ch) mutable {
    if (!ch.ok()) {
      {
        std::lock_guard lock(mu_);
        refresh_wanted_ = true;  // it may be back at another address
      }
      return cb(ch.status().WithContext(fmt::format("next OSS in the chain ({})", addr)));
    }
    std::shared_ptr<net::RpcChannel> c = *ch;
    c->CallAsync(
        type, *req, std::move(data), {},
        [this, addr, c, req, cb = std::move(cb)](Result<net::Reply> r) {
          if (!r.ok() && !c->connected()) {
            std::lock_guard lock(mu_);
            auto it = peers_.find(addr);
            if (it != peers_.end() && it->second.ch == c)
              it->second.ch.reset();
            refresh_wanted_ = true;  // it may be back at another address
          }
          cb(std::move(r));
        },
        timeout_ms);
  };
  std::unique_lock lock(mu_);
  Peer& p = peers_[addr];
  if (p.ch && p.ch->connected()) {
    auto ch = p.ch;
    lock.unlock();
    return send(ch);
  }
  p.ch.reset();
  p.waiting.push_back(std::move(send));
  if (p.connecting)
    return;
  p.connecting = true;
  lock.unlock();
  auto connect = [this, addr] {
    Result<std::shared_ptr<net::RpcChannel>> r = Status::InvalidArgument("bad address");
    auto hp = HostPort::Parse(addr);
    if (hp.ok()) {
      r = net::RpcChannel::Connect(loop_, *hp, peer_options_);
    } else {
      r = hp.status();
    }
    std::vector<std::function<void(Result<std::shared_ptr<net::RpcChannel>>)>> waiting;
    {
      std::lock_guard l(mu_);
      Peer& peer = peers_[addr];
      peer.connecting = false;
      if (r.ok())
        peer.ch = *r;
      waiting.swap(peer.waiting);
    }
    for (auto& w : waiting)
      w(r);
  };
  if (!pool_->TrySubmit(connect)) {
    std::vector<std::function<void(Result<std::shared_ptr<net::RpcChannel>>)>> waiting;
    {
      std::lock_guard l(mu_);
      Peer& peer = peers_[addr];
      peer.connecting = false;
      waiting.swap(peer.waiting);
    }
    for (auto& w : waiting)
      w(Status::Unavailable("OSS stopping"));
  }
}

bool ChainRouter::Overlaps(uint64_t a, uint64_t al, uint64_t b, uint64_t bl) {
  // Empty ranges (a zero-length write) overlap what contains their offset, so they keep order.
  const uint64_t ae = a + std::max<uint64_t>(al, 1);
  const uint64_t be = b + std::max<uint64_t>(bl, 1);
  return a < be && b < ae;
}

void ChainRouter::OrderedBegin(
    bool head, const ObjectId& id, uint64_t offset, uint64_t len, std::function<void()> start) {
  if (!head)
    return start();
  {
    std::lock_guard lock(order_mu_);
    Ranges& r = order_[id];
    bool blocked = false;
    for (const auto& [o, l] : r.active)
      blocked |= Overlaps(o, l, offset, len);
    for (const Waiter& w : r.waiting)
      blocked |= Overlaps(w.offset, w.len, offset, len);
    if (blocked) {
      r.waiting.push_back(Waiter{offset, len, std::move(start)});
      return;
    }
    r.active.emplace_back(offset, len);
  }
  start();
}

void ChainRouter::OrderedWait(const ObjectId& id, uint64_t offset, uint64_t len) {
  std::promise<void> go;
  OrderedBegin(true, id, offset, len, [&go] { go.set_value(); });
  go.get_future().wait();
}

void ChainRouter::OrderedEnd(const ObjectId& id, uint64_t offset, uint64_t len) {
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard lock(order_mu_);
    auto it = order_.find(id);
    if (it == order_.end())
      return;
    Ranges& r = it->second;
    auto a = std::find(r.active.begin(), r.active.end(), std::pair{offset, len});
    if (a != r.active.end())
      r.active.erase(a);
    // Start the waiters that overlap neither an active write nor an earlier waiter.
    std::vector<Waiter> still;
    for (Waiter& w : r.waiting) {
      bool blocked = false;
      for (const auto& [o, l] : r.active)
        blocked |= Overlaps(o, l, w.offset, w.len);
      for (const Waiter& s : still)
        blocked |= Overlaps(s.offset, s.len, w.offset, w.len);
      if (blocked) {
        still.push_back(std::move(w));
      } else {
        r.active.emplace_back(w.offset, w.len);
        ready.push_back(std::move(w.start));
      }
    }
    r.waiting = std::move(still);
    if (r.active.empty() && r.waiting.empty())
      order_.erase(it);
  }
  for (auto& f : ready)
    f();
}

void ChainRouter::MutationBegin(uint32_t chain, uint64_t version) {
  std::lock_guard lock(mutations_mu_);
  ++mutations_[{chain, version}];
}

void ChainRouter::MutationEnd(uint32_t chain, uint64_t version) {
  std::lock_guard lock(mutations_mu_);
  auto it = mutations_.find({chain, version});
  if (it == mutations_.end())
    return;
  if (--it->second <= 0) {
    mutations_.erase(it);
    mutations_cv_.notify_all();
  }
}

bool ChainRouter::WaitMutationsBefore(uint32_t chain, uint64_t version, int timeout_ms) {
  std::unique_lock lock(mutations_mu_);
  return mutations_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
    auto it = mutations_.lower_bound({chain, 0});
    return it == mutations_.end() || it->first.first != chain || it->first.second >= version;
  });
}

void ChainRouter::MarkDirty(const ObjectId& id, uint64_t offset, uint64_t len) {
  std::lock_guard lock(dirty_mu_);
  dirty_[id].ranges.push_back(DirtyRange{++dirty_seq_, offset, len});
}

void ChainRouter::ClearDirty(const ObjectId& id, uint64_t offset, uint64_t len) {
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard lock(dirty_mu_);
    auto it = dirty_.find(id);
    if (it == dirty_.end())
      return;
    Dirty& d = it->second;
    for (auto r = d.ranges.begin(); r != d.ranges.end(); ++r) {
      if (r->offset == offset && r->len == len) {
        d.ranges.erase(r);
        break;
      }
    }
    std::vector<CleanWaiter> still;
    for (CleanWaiter& w : d.waiting) {
      bool blocked = false;
      for (const DirtyRange& r : d.ranges)
        blocked |= r.seq <= w.upto && Overlaps(r.offset, r.len, w.offset, w.len);
      if (blocked) {
        still.push_back(std::move(w));
      } else {
        ready.push_back(std::move(w.fn));
      }
    }
    d.waiting = std::move(still);
    if (d.ranges.empty() && d.waiting.empty())
      dirty_.erase(it);
  }
  for (auto& f : ready)
    f();
}

void ChainRouter::WhenClean(const ObjectId& id,
                            uint64_t offset,
                            uint64_t len,
                            std::function<void()> fn) {
  {
    std::lock_guard lock(dirty_mu_);
    auto it = dirty_.find(id);
    if (it != dirty_.end()) {
      bool blocked = false;
      for (const DirtyRange& r : it->second.ranges)
        blocked |= Overlaps(r.offset, r.len, offset, len);
      if (blocked) {
        it->second.waiting.push_back(CleanWaiter{dirty_seq_, offset, len, std::move(fn)});
        return;
      }
    }
  }
  fn();
}

size_t ChainRouter::dirty_objects() const {
  std::lock_guard lock(dirty_mu_);
  return dirty_.size();
}

void ChainRouter::Close() {
  // Closed outside mu_: failing a channel's pending calls runs their callbacks, which take it.
  std::vector<std::shared_ptr<net::RpcChannel>> channels;
  {
    std::lock_guard lock(mu_);
    for (auto& [addr, p] : peers_) {
      if (p.ch)
        channels.push_back(p.ch);
    }
  }
  for (auto& ch : channels)
    ch->Close();
}

}  // namespace ciuic::oss
