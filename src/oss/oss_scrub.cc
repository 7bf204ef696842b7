// Scrubbing (docs/design.md "Scrubbing"): a background pass over every object of every OST that
// re-reads each block and checks it against its stored checksums, at a bounded rate
// (scrub_bytes_per_s, over all OSTs), with a pause between passes.
//
// An object with a bad block is repaired when it has another copy: the member asks the chain's
// head, which holds the object's write order (no write to it runs meanwhile) and has a good
// copy sent over the bad one: its own, or another member's (RepairPush: the head asks that
// member's OSS to send it). Every copy is verified as it is read, so a bad source is never
// copied; the next member is tried. An object whose every copy is bad, or that has one copy
// only, is counted lost and logged: reads of its bad blocks fail with kCorruption, never with
// wrong bytes. Counts go to the MDS with the heartbeats (`ciuic scrub status`).
#include <fmt/format.h>

#include "common/logging.h"
#include "common/time_util.h"
#include "net/pb_convert.h"
#include "net/rpc.h"
#include "oss/chain_router.h"
#include "oss/oss_server.h"
#include "oss/ost_store.h"

namespace ciuic::oss {
namespace {

constexpr uint64_t kScrubPiece = 1u << 20;
constexpr int kRepairTimeoutMs = 120000;

}  // namespace

pb::ScrubStats OssServer::scrub_stats(uint32_t ost) const {
  std::lock_guard<std::mutex> lock(scrub_mu_);
  auto it = scrub_stats_.find(ost);
  return it == scrub_stats_.end() ? pb::ScrubStats() : it->second;
}

void OssServer::ScrubLoop() {
  for (;;) {
    // A pause first (a fresh OSS, a short benchmark: nothing to disturb them), then one pass
    // over every OST once registered (repairs need the chain table).
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::milliseconds(options_.scrub_pause_ms),
                       [this] { return stopping_; })) {
        return;
      }
    }
    while (!registered_.load()) {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stopping_; }))
        return;
    }
    for (const auto& [index, store] : osts_) {
      Result<std::vector<std::pair<ObjectId, uint32_t>>> objs = store->ListObjects();
      if (!objs.ok()) {
        LOG_WARN("oss: scrub of OST {}: {}", index, objs.status().ToString());
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(scrub_mu_);
        pb::ScrubStats& s = scrub_stats_[index];
        s.set_objects(0);
        s.set_objects_total(objs->size());
      }
      for (const auto& [id, chain] : *objs) {
        pb::ScrubStats delta;
        ScrubObject(store.get(), id, chain, &delta);
        {
          std::lock_guard<std::mutex> lock(scrub_mu_);
          pb::ScrubStats& s = scrub_stats_[index];
          s.set_objects(s.objects() + 1);
          s.set_bytes(s.bytes() + delta.bytes());
          s.set_bad(s.bad() + delta.bad());
          s.set_repaired(s.repaired() + delta.repaired());
          s.set_lost(s.lost() + delta.lost());
        }
        if (Stopping())
          return;
      }
      std::lock_guard<std::mutex> lock(scrub_mu_);
      pb::ScrubStats& s = scrub_stats_[index];
      s.set_passes(s.passes() + 1);
      s.set_last_pass_end_ms(WallMillis());
    }
  }
}

void OssServer::ScrubObject(OstStore* store,
                            const ObjectId& id,
                            uint32_t chain,
                            pb::ScrubStats* st) {
  Result<ObjStat> stat = store->Stat(id);
  if (!stat.ok() || !stat->exists)
    return;  // destroyed meanwhile
  Status bad;
  for (uint64_t off = 0; off < stat->length && bad.ok(); off += kScrubPiece) {
    const uint64_t n = std::min(kScrubPiece, stat->length - off);
    Result<ReadResult> r = store->Read(id, off, n);
    if (!r.ok()) {
      if (r.status().code() == StatusCode::kIoError)
        bad = r.status();
      break;  // gone, or the OST closing
    }
    bad = VerifyReadResult(*r, store->index(), id);
    st->set_bytes(st->bytes() + n);
    if (!Pace(&scrub_pace_, options_.scrub_bytes_per_s, n))
      return;
  }
  if (bad.ok())
    return;
  // An object found lost before is not counted (or logged) again by later passes.
  const auto key = std::make_pair(store->index(), id);
  {
    std::lock_guard<std::mutex> lock(scrub_mu_);
    if (scrub_lost_.count(key) != 0 && chain == 0)
      return;
  }
  auto lost = [&] {
    std::lock_guard<std::mutex> lock(scrub_mu_);
    if (scrub_lost_.insert(key).second) {
      st->set_bad(1);
      st->set_lost(1);
    }
  };
  if (chain == 0) {
    LOG_ERROR("oss: scrub: {} (one copy only: lost)", bad.ToString());
    return lost();
  }
  LOG_ERROR("oss: scrub: {}; repairing from another copy", bad.ToString());
  Status rs = RequestRepair(chain, store->index(), id);
  if (rs.ok()) {
    LOG_WARN("oss: scrub: OST {} object {} repaired from another copy", store->index(),
             id.FileName());
    std::lock_guard<std::mutex> lock(scrub_mu_);
    // Counted bad once: now, or when an earlier pass found it with no good copy.
    if (scrub_lost_.erase(key) == 0) {
      st->set_bad(1);
    } else {
      pb::ScrubStats& total = scrub_stats_[store->index()];  // no longer lost
      total.set_lost(total.lost() - 1);
    }
    st->set_repaired(1);
  } else {
    LOG_ERROR("oss: scrub: OST {} object {} not repaired: {}", store->index(), id.FileName(),
              rs.ToString());
    lost();
  }
}

Status OssServer::RequestRepair(uint32_t chain, uint32_t bad, const ObjectId& id) {
  uint64_t version = 0;
  std::vector<ChainRouter::MemberView> members;
  if (!router_->View(chain, &version, &members))
    return Status::NotFound(fmt::format("chain {} is unknown here", chain - kChainBase));
  const ChainRouter::MemberView* head = nullptr;
  for (const auto& m : members) {
    if (m.state == 0) {
      head = &m;
      break;
    }
  }
  if (head == nullptr)
    return Status::Unavailable(fmt::format("chain {} has no serving member", chain - kChainBase));
  if (osts_.count(head->ost) != 0)
    return Repair(chain, bad, id);
  auto req = std::make_shared<pb::RepairReq>();
  req->set_chain(chain);
  req->set_chain_version(version);
  net::ToPb(id, req->mutable_obj());
  req->set_bad_ost(bad);
  return CallPeer(head->addr, net::MsgType::kRepair, req, {}, kRepairTimeoutMs).status();
}

Status OssServer::Repair(uint32_t chain, uint32_t bad, const ObjectId& id) {
  router_->OrderedWait(id, 0, UINT64_MAX);
  struct End {
    ChainRouter* r;
    const ObjectId& id;
    ~End() { r->OrderedEnd(id, 0, UINT64_MAX); }
  } end{router_.get(), id};
  uint64_t version = 0;
  std::vector<ChainRouter::MemberView> members;
  if (!router_->View(chain, &version, &members))
    return Status::NotFound(fmt::format("chain {} is unknown here", chain - kChainBase));
  std::string bad_addr;
  for (const auto& m : members) {
    if (m.ost == bad)
      bad_addr = m.addr;
  }
  if (bad_addr.empty())
    return Status::NotFound(
        fmt::format("OST {} is not a member of chain {}", bad, chain - kChainBase));
  auto current = [this, chain](uint64_t* v) {
    std::vector<ChainRouter::MemberView> now;
    return router_->View(chain, v, &now);
  };
  Status last = Status::NotFound("no other serving copy");
  // Serving members other than the bad one, this OSS's first (no network hop for the data).
  std::vector<ChainRouter::MemberView> sources;
  for (const auto& m : members) {
    if (m.state != 0 || m.ost == bad)
      continue;
    if (osts_.count(m.ost) != 0) {
      sources.insert(sources.begin(), m);
    } else {
      sources.push_back(m);
    }
  }
  for (const auto& src : sources) {
    if (osts_.count(src.ost) != 0) {
      last = SendCopy(chain, FindOst(src.ost), id, bad, bad_addr, true, current,
                      options_.resync_bytes_per_s, &repair_pace_);
    } else {
      auto req = std::make_shared<pb::RepairPushReq>();
      req->set_chain(chain);
      req->set_chain_version(version);
      net::ToPb(id, req->mutable_obj());
      req->set_from_ost(src.ost);
      req->set_to_ost(bad);
      last = CallPeer(src.addr, net::MsgType::kRepairPush, req, {}).status();
    }
    if (last.ok())
      return Status::OK();
    LOG_WARN("oss: repair of OST {} object {} from OST {}: {}", bad, id.FileName(), src.ost,
             last.ToString());
  }
  return last;
}

void OssServer::HandleRepair(net::ServerCall call) {
  auto req = std::make_shared<pb::RepairReq>();
  Status st = call.ParseBody(req.get());
  if (st.ok())
    st = CheckPeer(call);
  if (!st.ok())
    return call.ReplyError(st);
  auto c = std::make_shared<net::ServerCall>(std::move(call));
  const bool queued = repair_pool_->Submit([this, c, req] {
    Status s = Repair(req->chain(), req->bad_ost(), net::FromPb(req->obj()));
    if (!s.ok())
      return c->ReplyError(s);
    c->Reply(pb::RepairResp());
  });
  if (!queued)
    c->ReplyError(Status::Unavailable("OSS is stopping"));
}

void OssServer::HandleRepairPush(net::ServerCall call) {
  auto req = std::make_shared<pb::RepairPushReq>();
  Status st = call.ParseBody(req.get());
  if (st.ok())
    st = CheckPeer(call);
  if (!st.ok())
    return call.ReplyError(st);
  OstStore* store = FindOst(req->from_ost());
  if (store == nullptr) {
    return call.ReplyError(
        Status::NotFound(fmt::format("OST {} is not served here", req->from_ost())));
  }
  auto c = std::make_shared<net::ServerCall>(std::move(call));
  const bool queued = resync_pool_->Submit([this, c, req, store] {
    uint64_t version = 0;
    std::vector<ChainRouter::MemberView> members;
    std::string to_addr;
    if (router_->View(req->chain(), &version, &members)) {
      for (const auto& m : members) {
        if (m.ost == req->to_ost())
          to_addr = m.addr;
      }
    }
    if (to_addr.empty()) {
      return c->ReplyError(Status::Unavailable(
          fmt::format("OST {} is not known in chain {} here", req->to_ost(), req->chain())));
    }
    auto current = [this, chain = req->chain()](uint64_t* v) {
      std::vector<ChainRouter::MemberView> now;
      return router_->View(chain, v, &now);
    };
    Status s = SendCopy(req->chain(), store, net::FromPb(req->obj()), req->to_ost(), to_addr, true,
                        current, options_.resync_bytes_per_s, &push_pace_);
    if (!s.ok())
      return c->ReplyError(s);
    c->Reply(pb::RepairPushResp());
  });
  if (!queued)
    c->ReplyError(Status::Unavailable("OSS is stopping"));
}

}  // namespace ciuic::oss
