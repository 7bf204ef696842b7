// Resync (docs/design.md "Replication"): a chain member that comes back after missing writes, or
// whose OST came back empty, is syncing: it gets every new write down the chain but serves no
// read. The head of the chain (its first serving member) brings it up to date:
//
// 1. It lists its objects of the chain (their checksum headers name the chain) and sends their
//    digests (length and the latest checksum of every block) to the member in batches; the member
//    answers which of its copies differ or are missing. Only those are copied: a member that
//    missed a few writes copies a few objects, an empty one copies everything.
// 2. Each differing object is copied in 1 MiB pieces, each read and sent under the head's write
//    order for its range (the lock that orders overlapping chain writes), so no write to that
//    range runs meanwhile and every write after it reaches the member too. Reads of the next
//    pieces overlap the sending of earlier ones (kWindow in flight). The copy is paced
//    (resync_bytes_per_s).
// 3. The progress goes to the MDS with the heartbeats; the last report says done, and the MDS
//    makes the member serving in a new chain version.
//
// A resync cut short (the head stops, the chain changes) is started again from the beginning by
// whichever OSS is then the head; the objects already copied compare equal and cost nothing.
#include <condition_variable>
#include <future>
#include <thread>
#include <utility>

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

constexpr size_t kCheckBatch = 128;    // digests per ResyncCheck
constexpr uint64_t kPiece = 1u << 20;  // bytes per ResyncPut
constexpr int kWindow = 4;             // ResyncPuts of one object in flight
constexpr int kPeerTimeoutMs = 20000;  // per request
constexpr int kRetries = 100;          // for a member that has not seen the chain version yet
constexpr int kRetryMs = 100;

}  // namespace

bool OssServer::Stopping() {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

Result<net::Reply> OssServer::CallPeer(const std::string& addr,
                                       net::MsgType type,
                                       std::shared_ptr<google::protobuf::MessageLite> req,
                                       std::vector<net::ConstSpan> data,
                                       int timeout_ms) {
  auto done = std::make_shared<std::promise<Result<net::Reply>>>();
  router_->Call(addr, type, std::move(req), std::move(data), timeout_ms,
                [done](Result<net::Reply> r) { done->set_value(std::move(r)); });
  return done->get_future().get();
}

bool OssServer::ResyncCurrent(const ChainRouter::ResyncWork& w, uint64_t* version) const {
  auto local = [this](uint32_t ost) { return osts_.count(ost) != 0; };
  for (const ChainRouter::ResyncWork& now : router_->ResyncWorkFor(local)) {
    if (now.chain == w.chain && now.member == w.member && now.since == w.since &&
        now.head_ost == w.head_ost) {
      *version = now.version;
      return true;
    }
  }
  return false;
}

bool OssServer::Pace(Pacer* p, uint64_t rate, uint64_t bytes) {
  if (rate == 0)
    return !Stopping();
  const int64_t now = MonoMillis();
  if (p->start_ms == 0 || now - p->start_ms > 1000) {
    // A new window: what went before does not earn a burst later.
    p->start_ms = now;
    p->bytes = 0;
  }
  p->bytes += bytes;
  const int64_t due = p->start_ms + static_cast<int64_t>(p->bytes * 1000 / rate);
  while (MonoMillis() < due) {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::milliseconds(std::min<int64_t>(due - MonoMillis(), 100)),
                     [this] { return stopping_; })) {
      return false;
    }
  }
  return !Stopping();
}

// Sends `req` to the member, filling in the chain's current version, again while the member
// has not yet fetched that version (kUnavailable) and the resync is still current.
template <typename Req>
Result<net::Reply> CallMember(const std::function<bool(uint64_t*)>& current,
                              const std::function<Result<net::Reply>(std::shared_ptr<Req>)>& call,
                              std::shared_ptr<Req> req,
                              const std::function<bool()>& stopping) {
  Result<net::Reply> r = Status::Unavailable("resync: not sent");
  for (int attempt = 0; attempt < kRetries; ++attempt) {
    uint64_t version = 0;
    if (!current(&version))
      return Status::Aborted("the chain changed");
    req->set_chain_version(version);
    r = call(req);
    if (r.ok() || r.status().code() != StatusCode::kUnavailable)
      return r;
    if (stopping())
      return Status::Aborted("stopping");
    std::this_thread::sleep_for(std::chrono::milliseconds(kRetryMs));
  }
  return r;
}

Status OssServer::CopyObject(const ChainRouter::ResyncWork& w,
                             OstStore* store,
                             const ObjectId& id) {
  const uint64_t before = resync_bytes_.load();
  Status st = SendCopy(
      w.chain, store, id, w.member, w.member_addr, false,
      [this, &w](uint64_t* v) { return ResyncCurrent(w, v); }, options_.resync_bytes_per_s,
      &resync_pace_, /*lock_pieces=*/true);
  {
    std::lock_guard<std::mutex> lock(resync_mu_);
    auto it = resyncs_.find({w.chain, w.member, w.since});
    if (it != resyncs_.end())
      it->second.set_bytes_copied(it->second.bytes_copied() + resync_bytes_.load() - before);
  }
  if (st.ok())
    resync_copied_.fetch_add(1);
  return st;
}

Status OssServer::SendCopy(uint32_t chain,
                           OstStore* from,
                           const ObjectId& id,
                           uint32_t to,
                           const std::string& to_addr,
                           bool repair,
                           const std::function<bool(uint64_t*)>& current,
                           uint64_t rate,
                           Pacer* pacer,
                           bool lock_pieces) {
  // With lock_pieces (a resync), each piece is read and sent under the head's write order for
  // its range only, so the object's writers wait for one piece, not the whole copy: the first
  // piece locks the whole object (it empties the member's copy, so no write may be in flight),
  // the others their own range. A write to a range copied already reaches the member down the
  // chain (a syncing member gets every write); one to a range not copied yet is copied with it.
  // Without (a repair), the caller holds the whole object's order.
  auto lock = [&](uint64_t o, uint64_t l) {
    if (lock_pieces)
      router_->OrderedWait(id, o, l);
  };
  auto unlock = [this, id, lock_pieces](uint64_t o, uint64_t l) {
    if (lock_pieces)
      router_->OrderedEnd(id, o, l);
  };
  auto stopping = [this] { return Stopping(); };
  struct InFlight {
    std::mutex mu;
    std::condition_variable cv;
    int n = 0;
    Status first;
  };
  auto flight = std::make_shared<InFlight>();
  auto drain = [&flight](int below) {
    std::unique_lock<std::mutex> lock(flight->mu);
    flight->cv.wait(lock, [&] { return flight->n < below; });
    return flight->first;
  };
  // Reads and verifies [off, off + n) of the source.
  auto read = [&](uint64_t off, uint64_t n) -> Result<std::shared_ptr<ReadResult>> {
    CIUIC_ASSIGN_OR_RETURN(ReadResult got, from->Read(id, off, n));
    CIUIC_RETURN_IF_ERROR(VerifyReadResult(got, from->index(), id));
    return std::make_shared<ReadResult>(std::move(got));
  };
  auto make_req = [&](uint64_t off, uint64_t length) {
    auto req = std::make_shared<pb::ResyncPutReq>();
    req->set_chain(chain);
    req->set_ost(to);
    net::ToPb(id, req->mutable_obj());
    req->set_offset(off);
    req->set_length(length);
    req->set_repair(repair);
    return req;
  };
  // Sends one piece and waits for its answer (retrying while the member fetches the chain).
  auto send_now = [&](std::shared_ptr<pb::ResyncPutReq> req, const uint8_t* bytes,
                      uint64_t n) -> Status {
    std::function<Result<net::Reply>(std::shared_ptr<pb::ResyncPutReq>)> call =
        [this, &to_addr, bytes, n](std::shared_ptr<pb::ResyncPutReq> r) {
          std::vector<net::ConstSpan> data;
          if (n > 0)
            data.push_back(net::ConstSpan{bytes, static_cast<size_t>(n)});
          return CallPeer(to_addr, net::MsgType::kResyncPut, std::make_shared<pb::ResyncPutReq>(*r),
                          std::move(data));
        };
    return CallMember<pb::ResyncPutReq>(current, call, req, stopping).status();
  };
  auto bytes_of = [](const std::shared_ptr<ReadResult>& rr, uint64_t off) -> const uint8_t* {
    return rr == nullptr ? nullptr : rr->data->data() + (off - rr->aligned_offset);
  };

  // The first piece, alone, under the whole object's order.
  lock(0, UINT64_MAX);
  Result<ObjStat> st = from->Stat(id);
  if (!st.ok() || !st->exists) {
    unlock(0, UINT64_MAX);
    return st.ok() ? Status::OK() : st.status();  // destroyed meanwhile: so at the member
  }
  const uint64_t length = st->length;
  uint64_t off = std::min(kPiece, length);
  {
    std::shared_ptr<ReadResult> rr;
    if (off > 0) {
      Result<std::shared_ptr<ReadResult>> got = read(0, off);
      if (!got.ok()) {
        unlock(0, UINT64_MAX);
        return got.status();
      }
      rr = *got;
    }
    Status s = send_now(make_req(0, length), bytes_of(rr, 0), off);
    unlock(0, UINT64_MAX);
    CIUIC_RETURN_IF_ERROR(s);
    resync_bytes_.fetch_add(off);
    if (!Pace(pacer, rate, off))
      return Status::Aborted("stopping");
  }
  bool synced = off >= length;  // the member syncs at the piece that reaches `length`
  while (off < length) {
    uint64_t n = std::min(kPiece, length - off);
    lock(off, n);
    // The object may have been cut meanwhile (a punch, ordered at the head like writes).
    Result<ObjStat> now = from->Stat(id);
    const uint64_t cur = now.ok() && now->exists ? now->length : 0;
    if (!now.ok() || cur <= off) {
      unlock(off, n);
      break;
    }
    n = std::min(n, cur - off);
    auto req = make_req(off, length);
    if (off + n >= length) {
      // The last piece: the member syncs the object with it, after every other piece.
      Status s = drain(1);
      if (s.ok()) {
        Result<std::shared_ptr<ReadResult>> got = read(off, n);
        s = got.ok() ? send_now(req, bytes_of(*got, off), n) : got.status();
      }
      unlock(off, n);
      CIUIC_RETURN_IF_ERROR(s);
      synced = true;
    } else {
      Status s = drain(kWindow);
      uint64_t version = 0;
      if (s.ok() && !current(&version))
        s = Status::Aborted("the chain changed");
      if (!s.ok()) {
        unlock(off, n);
        drain(1).IgnoreError();  // report the first failure
        return s;
      }
      req->set_chain_version(version);
      {
        std::lock_guard<std::mutex> l(flight->mu);
        ++flight->n;
      }
      // The piece is read, verified and sent without waiting here, so reads of the next pieces
      // overlap it (one read at a time would bound the copy by the disk's latency).
      auto finish = [flight, unlock, off, n](const Status& st) {
        unlock(off, n);
        std::lock_guard<std::mutex> l(flight->mu);
        if (!st.ok() && flight->first.ok())
          flight->first = st;
        --flight->n;
        flight->cv.notify_all();
      };
      from->ReadAsync(
          id, off, n, [this, from, id, req, off, n, finish, to_addr](Result<ReadResult> got) {
            if (got.ok()) {
              Status v = VerifyReadResult(*got, from->index(), id);
              if (!v.ok())
                got = v;
            }
            if (!got.ok())
              return finish(got.status());
            auto rr = std::make_shared<ReadResult>(std::move(*got));
            const uint8_t* bytes = rr->data->data() + (off - rr->aligned_offset);
            // `rr` keeps the bytes alive until the answer, which also ends the piece's order.
            router_->Call(to_addr, net::MsgType::kResyncPut, req,
                          {net::ConstSpan{bytes, static_cast<size_t>(n)}}, kPeerTimeoutMs,
                          [rr, finish](Result<net::Reply> r) { finish(r.status()); });
          });
    }
    off += n;
    resync_bytes_.fetch_add(n);
    if (!Pace(pacer, rate, n)) {
      drain(1).IgnoreError();  // stopping: what is in flight ends either way
      return Status::Aborted("stopping");
    }
  }
  CIUIC_RETURN_IF_ERROR(drain(1));
  if (!synced) {
    // Cut short by a punch: an empty last piece at the new length syncs the member's copy.
    Result<ObjStat> now = from->Stat(id);
    const uint64_t cur = now.ok() && now->exists ? now->length : 0;
    lock(0, UINT64_MAX);
    Status s = send_now(make_req(cur, cur), nullptr, 0);
    unlock(0, UINT64_MAX);
    return s;
  }
  return Status::OK();
}

bool OssServer::RunResync(const ChainRouter::ResyncWork& w) {
  OstStore* store = FindOst(w.head_ost);
  if (store == nullptr)
    return false;
  // Writes checked under a chain version from before the member was syncing do not go down to
  // it: the list and the digests must see their bytes, or the member is found equal without
  // them (ReplicationTest.ConcurrentIoSurvivesOssStopsWithoutErrors read back an object that
  // a write under the old chain created after the head had listed its objects).
  if (!router_->WaitMutationsBefore(w.chain, w.since, kPeerTimeoutMs)) {
    LOG_WARN(
        "oss: resync of OST {} in chain {}: writes under chain versions before {} still "
        "in flight after {} ms; trying again",
        w.member, w.chain - kChainBase, w.since, kPeerTimeoutMs);
    return false;
  }
  Result<std::vector<ObjectId>> ids = store->ListChainObjects(w.chain);
  if (!ids.ok()) {
    LOG_WARN("oss: resync of OST {} in chain {}: {}", w.member, w.chain - kChainBase,
             ids.status().ToString());
    return false;
  }
  const auto key = std::make_tuple(w.chain, w.member, w.since);
  {
    std::lock_guard<std::mutex> lock(resync_mu_);
    pb::ResyncProgress& p = resyncs_[key];
    p = pb::ResyncProgress();
    p.set_chain(w.chain);
    p.set_ost(w.member);
    p.set_since(w.since);
    p.set_objects_total(ids->size());
  }
  LOG_INFO("oss: resync of OST {} in chain {} from OST {}: comparing {} objects", w.member,
           w.chain - kChainBase, w.head_ost, ids->size());
  auto current = [this, &w](uint64_t* v) { return ResyncCurrent(w, v); };
  auto stopping = [this] { return Stopping(); };
  uint64_t copied = 0;
  for (size_t i = 0; i < ids->size(); i += kCheckBatch) {
    const size_t end = std::min(ids->size(), i + kCheckBatch);
    auto req = std::make_shared<pb::ResyncCheckReq>();
    req->set_chain(w.chain);
    req->set_ost(w.member);
    std::vector<ObjectId> batch;
    for (size_t k = i; k < end; ++k) {
      Result<OstStore::Digest> d = store->ObjectDigest((*ids)[k]);
      if (!d.ok()) {
        LOG_WARN("oss: resync of OST {} in chain {}: {}", w.member, w.chain - kChainBase,
                 d.status().ToString());
        return false;
      }
      if (!d->exists)
        continue;
      pb::ResyncEntry* e = req->add_entries();
      net::ToPb((*ids)[k], e->mutable_obj());
      e->set_length(d->length);
      e->set_digest(d->crc);
      batch.push_back((*ids)[k]);
    }
    if (!batch.empty()) {
      std::function<Result<net::Reply>(std::shared_ptr<pb::ResyncCheckReq>)> call =
          [this, &w](std::shared_ptr<pb::ResyncCheckReq> r) {
            return CallPeer(w.member_addr, net::MsgType::kResyncCheck, r, {});
          };
      Result<net::Reply> r = CallMember<pb::ResyncCheckReq>(current, call, req, stopping);
      pb::ResyncCheckResp resp;
      if (r.ok() && !resp.ParseFromString(r->body))
        r = Status::Corruption("bad resync check reply");
      if (!r.ok()) {
        LOG_WARN("oss: resync of OST {} in chain {}: {}", w.member, w.chain - kChainBase,
                 r.status().ToString());
        return false;
      }
      for (uint32_t idx : resp.differ()) {
        if (idx >= batch.size())
          continue;
        Status st = CopyObject(w, store, batch[idx]);
        if (!st.ok()) {
          LOG_WARN("oss: resync of OST {} in chain {}: copying {}: {}", w.member,
                   w.chain - kChainBase, batch[idx].FileName(), st.ToString());
          return false;
        }
        ++copied;
      }
    }
    std::lock_guard<std::mutex> lock(resync_mu_);
    resyncs_[key].set_objects_done(end);
  }
  uint64_t bytes;
  {
    std::lock_guard<std::mutex> lock(resync_mu_);
    resyncs_[key].set_done(true);
    bytes = resyncs_[key].bytes_copied();
  }
  LOG_INFO("oss: resync of OST {} in chain {} done: {} of {} objects differed, {} bytes copied",
           w.member, w.chain - kChainBase, copied, ids->size(), bytes);
  {
    // Report it with a heartbeat now: the member serves reads once the MDS hears of it.
    std::lock_guard<std::mutex> lock(mu_);
    heartbeat_soon_ = true;
    cv_.notify_all();
  }
  return true;
}

void OssServer::ResyncLoop() {
  auto local = [this](uint32_t ost) { return osts_.count(ost) != 0; };
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(std::min<uint32_t>(hb_interval_ms_.load(), 500)),
                   [this] { return stopping_ || std::exchange(resync_wake_, false); });
      if (stopping_)
        return;
    }
    if (!registered_.load())
      continue;
    const std::vector<ChainRouter::ResyncWork> work = router_->ResyncWorkFor(local);
    {
      // Members no longer syncing (made serving, or gone offline again): forget their reports.
      std::lock_guard<std::mutex> lock(resync_mu_);
      for (auto it = resyncs_.begin(); it != resyncs_.end();) {
        bool live = false;
        for (const auto& w : work)
          live |= it->first == std::make_tuple(w.chain, w.member, w.since);
        it = live ? std::next(it) : resyncs_.erase(it);
      }
    }
    for (const ChainRouter::ResyncWork& w : work) {
      {
        std::lock_guard<std::mutex> lock(resync_mu_);
        auto it = resyncs_.find({w.chain, w.member, w.since});
        if (it != resyncs_.end() && it->second.done())
          continue;  // reported; waiting for the MDS's new chain version
      }
      RunResync(w);
      if (Stopping())
        return;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The member's side.

Status OssServer::CheckPeer(const net::ServerCall& call) const {
  if (call.key_id() != options_.key_id)
    return Status::PermissionDenied(
        "resync and repair requests come from the cluster's OSSes only");
  return Status::OK();
}

Result<OstStore*> OssServer::ResyncTarget(
    const net::ServerCall& call, uint32_t chain, uint64_t version, uint32_t ost, bool may_serve) {
  CIUIC_RETURN_IF_ERROR(CheckPeer(call));
  OstStore* store = FindOst(ost);
  if (store == nullptr)
    return Status::NotFound(fmt::format("OST {} is not served here", ost));
  ChainRouter::Route route;
  CIUIC_RETURN_IF_ERROR(ChainGate(chain, version, ost, false, &route));
  if (route.serving && !may_serve) {
    // A serving copy is as good as the head's: never overwritten by a resync.
    return Status::InvalidArgument(
        fmt::format("OST {} serves chain {}: it has nothing to catch up", ost, chain - kChainBase));
  }
  return store;
}

void OssServer::HandleResyncCheck(net::ServerCall call) {
  auto req = std::make_shared<pb::ResyncCheckReq>();
  Status st = call.ParseBody(req.get());
  if (!st.ok())
    return call.ReplyError(st);
  Result<OstStore*> target =
      ResyncTarget(call, req->chain(), req->chain_version(), req->ost(), false);
  if (!target.ok())
    return call.ReplyError(target.status());
  OstStore* store = *target;
  auto c = std::make_shared<net::ServerCall>(std::move(call));
  // Digests read checksum files: off the network threads, and off the store's blocking pool.
  const bool queued = resync_pool_->Submit([c, req, store] {
    pb::ResyncCheckResp resp;
    for (int i = 0; i < req->entries_size(); ++i) {
      const pb::ResyncEntry& e = req->entries(i);
      Result<OstStore::Digest> d = store->ObjectDigest(net::FromPb(e.obj()));
      if (!d.ok())
        return c->ReplyError(d.status());
      if (!d->exists || d->length != e.length() || d->crc != e.digest())
        resp.add_differ(static_cast<uint32_t>(i));
    }
    c->Reply(resp);
  });
  if (!queued)
    c->ReplyError(Status::Unavailable("OSS is stopping"));
}

void OssServer::HandleResyncPut(net::ServerCall call) {
  auto req = std::make_shared<pb::ResyncPutReq>();
  Status st = call.ParseBody(req.get());
  if (!st.ok())
    return call.ReplyError(st);
  // Only a repair (scrubbing) rewrites a serving copy.
  Result<OstStore*> target =
      ResyncTarget(call, req->chain(), req->chain_version(), req->ost(), req->repair());
  if (!target.ok())
    return call.ReplyError(target.status());
  OstStore* store = *target;
  if (req->offset() + call.data().size() > req->length()) {
    return call.ReplyError(Status::InvalidArgument("resync piece beyond the object's length"));
  }
  const ObjectId id = net::FromPb(req->obj());
  auto c = std::make_shared<net::ServerCall>(std::move(call));
  // The last piece is synced before the answer: a member serves only copies on its disk.
  const bool last = req->offset() + c->data().size() == req->length();
  auto sync = [c, store, id] {
    store->SyncAsync({id}, [c](Status s) {
      if (!s.ok())
        return c->ReplyError(s);
      c->Reply(pb::ResyncPutResp());
    });
  };
  auto write = [c, req, store, id, last, sync] {
    store->WriteAsync(
        id, req->offset(), &c->data(),
        [c, req, store, id, last, sync](Result<uint64_t> w) {
          if (!w.ok())
            return c->ReplyError(w.status());
          if (!last)
            return c->Reply(pb::ResyncPutResp());
          if (!req->repair() || *w <= req->length())
            return sync();
          // A repair rewrote the copy in place; what it held beyond the good length goes.
          store->PunchAsync(id, req->length(), [c, sync](Status s) {
            if (!s.ok())
              return c->ReplyError(s);
            sync();
          });
        },
        req->chain());
  };
  // A repair rewrites a serving copy in place, piece by piece, so its readers see good bytes or
  // blocks that still fail their checksums (read from another copy), never a cut object.
  if (req->offset() != 0 || req->repair())
    return write();
  // A resync's first piece empties the member's copy: what it held beyond the head's length
  // goes (a syncing member serves no read meanwhile).
  store->PunchAsync(id, 0, [c, write](Status s) {
    if (!s.ok())
      return c->ReplyError(s);
    write();
  });
}

}  // namespace ciuic::oss
