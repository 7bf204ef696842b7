// Replicated requests (docs/design.md "Replication"): a write, sync, punch or destroy that names
// a chain is applied here and forwarded to the next active member at the same time; the answer
// goes back once both are done, so the head answers the client only after the tail applied it.
// Reads and object stats are served here after the chain check.
#include <fmt/format.h>

#include "common/layout.h"
#include "common/logging.h"
#include "common/time_util.h"
#include "net/pb_convert.h"
#include "net/rpc.h"
#include "oss/chain_router.h"
#include "oss/oss_server.h"
#include "oss/ost_store.h"

namespace ciuic::oss {
namespace {

// One replicated operation: the local part and the forward, joined.
struct Join {
  std::mutex mu;
  int left = 0;
  Status first;
  uint64_t length = 0;  // writes: the object length after the local write
  pb::WriteResp next;   // writes: the next member's answer
  uint32_t next_ost = 0;

  // Records one part's outcome; true when it was the last.
  bool Done(const Status& st) {
    std::lock_guard lock(mu);
    if (!st.ok() && first.ok())
      first = st;
    return --left == 0;
  }
};

constexpr int kForwardTimeoutMs = 20000;

// Sends `fwd` to the next active member; its outcome is one part of `j` (a write's answer is
// kept in j->next).
void ForwardPart(ChainRouter* router,
                 const ChainRouter::Route& route,
                 net::MsgType type,
                 std::shared_ptr<google::protobuf::MessageLite> fwd,
                 std::vector<net::ConstSpan> data,
                 std::shared_ptr<Join> j,
                 std::function<void()> finish) {
  router->Call(route.next_addr, type, std::move(fwd), std::move(data), kForwardTimeoutMs,
               [j, finish = std::move(finish), next = route.next_ost, type](Result<net::Reply> r) {
                 Status s;
                 if (!r.ok()) {
                   s = r.status().WithContext(fmt::format("replica OST {}", next));
                 } else if (type == net::MsgType::kWrite && !j->next.ParseFromString(r->body)) {
                   s = Status::Corruption("bad write reply from the next member of a chain");
                 }
                 if (j->Done(s))
                   finish();
               });
}

// A join for an operation with an empty answer: `finish` answers `c` once the local part and
// the forward (when there is a next member) are done.
template <typename Resp>
std::pair<std::shared_ptr<Join>, std::function<void()>> JoinReply(
    std::shared_ptr<net::ServerCall> c, bool has_next) {
  auto j = std::make_shared<Join>();
  j->left = has_next ? 2 : 1;
  auto finish = [c = std::move(c), j] {
    if (!j->first.ok())
      return c->ReplyError(j->first);
    c->Reply(Resp());
  };
  return {j, finish};
}

}  // namespace

Status OssServer::ChainGate(
    uint32_t chain, uint64_t version, uint32_t ost, bool read, ChainRouter::Route* route) {
  if (!IsChain(chain))
    return Status::InvalidArgument(fmt::format("{} is not a chain id", chain));
  // An OSS that has not heard from the MDS for two heartbeats may have been taken out of its
  // chains (the MDS waits three): it serves no replicated request until it hears again.
  const int64_t silent = MonoMillis() - last_mds_ok_ms_.load();
  const int64_t fence = 2 * static_cast<int64_t>(hb_interval_ms_.load());
  if (silent > fence) {
    return Status::Unavailable(
        fmt::format("OSS has not heard from the MDS for {} ms; it serves no replicated request "
                    "until it does",
                    silent));
  }
  Status st = router_->Check(chain, version, ost, read, route);
  if (router_->TakeRefreshWanted()) {
    std::lock_guard<std::mutex> lock(mu_);
    chain_refresh_ = true;
    cv_.notify_all();
  }
  return st;
}

void OssServer::ChainWrite(net::ServerCall call, OstStore* store, pb::WriteReq req) {
  ChainRouter::Route route;
  Status st = ChainGate(req.chain(), req.chain_version(), req.ost(), false, &route);
  if (!st.ok())
    return call.ReplyError(st);
  const uint64_t bytes = call.data().size();
  if (!AcquireBudget(bytes))
    return call.ReplyError(Status::Unavailable("OSS is busy (in-flight IO budget spent); retry"));
  router_->MutationBegin(req.chain(), req.chain_version());
  const ObjectId id = net::FromPb(req.obj());
  auto c = std::make_shared<net::ServerCall>(std::move(call));
  auto r = std::make_shared<pb::WriteReq>(std::move(req));
  OstCounters* m = CountersOf(r->ost());
  auto run = [this, c, r, store, id, bytes, m, route] {
    auto j = std::make_shared<Join>();
    j->left = route.has_next ? 2 : 1;
    j->next_ost = route.next_ost;
    auto finish = [this, c, r, id, bytes, route, j] {
      router_->ClearDirty(id, r->offset(), bytes);  // committed: the tail answered
      if (route.head)
        router_->OrderedEnd(id, r->offset(), bytes);
      ReleaseBudget(bytes);
      router_->MutationEnd(r->chain(), r->chain_version());
      if (!j->first.ok())
        return c->ReplyError(j->first);
      pb::WriteResp resp;
      resp.set_object_length(j->length);
      resp.set_epoch(epoch_);
      pb::ReplicaEpoch* mine = resp.add_replica_epochs();
      mine->set_ost(r->ost());
      mine->set_epoch(epoch_);
      if (route.has_next) {
        resp.set_object_length(std::max(j->length, j->next.object_length()));
        if (j->next.replica_epochs_size() > 0) {
          resp.mutable_replica_epochs()->MergeFrom(j->next.replica_epochs());
        } else {
          pb::ReplicaEpoch* e = resp.add_replica_epochs();
          e->set_ost(j->next_ost);
          e->set_epoch(j->next.epoch());
        }
      }
      c->Reply(resp);
    };
    router_->MarkDirty(id, r->offset(), bytes);
    OpBegin(m, OstOp::kWrite);
    store->WriteAsync(
        id, r->offset(), &c->data(),
        [this, store, id, m, bytes, r, j, finish](Result<uint64_t> w) {
          OpEnd(m, OstOp::kWrite, w.ok(), 0, bytes);
          if (w.ok())
            j->length = *w;
          if (!w.ok() || !r->sync()) {
            if (j->Done(w.ok() ? Status::OK() : w.status()))
              finish();
            return;
          }
          store->SyncAsync({id}, [j, finish](Status s) {
            if (j->Done(s))
              finish();
          });
        },
        r->chain());
    if (route.has_next) {
      auto fwd = std::make_shared<pb::WriteReq>(*r);
      fwd->set_ost(route.next_ost);
      fwd->clear_cap();
      ForwardPart(router_.get(), route, net::MsgType::kWrite, fwd,
                  {net::ConstSpan{c->data().data(), c->data().size()}}, j, finish);
    }
  };
  router_->OrderedBegin(route.head, id, r->offset(), bytes, std::move(run));
}

void OssServer::ChainSync(net::ServerCall call, OstStore* store, pb::SyncReq req) {
  ChainRouter::Route route;
  Status st = ChainGate(req.chain(), req.chain_version(), req.ost(), false, &route);
  if (!st.ok())
    return call.ReplyError(st);
  for (const pb::ReplicaEpoch& e : req.replica_epochs()) {
    // A member that lost power came back offline and is brought up to date by a resync (each
    // copied object synced): what it acknowledged before is then the head's, not lost.
    if (e.ost() == req.ost() && e.epoch() != 0 && e.epoch() != epoch_ &&
        !router_->SeenSyncing(req.chain(), req.ost())) {
      return call.ReplyError(Status::IoError(fmt::format(
          "OST {}: the server lost power after acknowledging writes to {} object(s) that were "
          "not yet synced; they may be lost",
          req.ost(), req.objs_size())));
    }
  }
  std::vector<ObjectId> ids;
  for (const auto& o : req.objs())
    ids.push_back(net::FromPb(o));
  auto joined =
      JoinReply<pb::SyncResp>(std::make_shared<net::ServerCall>(std::move(call)), route.has_next);
  auto j = joined.first;
  auto finish = joined.second;
  OstCounters* m = CountersOf(req.ost());
  OpBegin(m, OstOp::kSync);
  store->SyncAsync(std::move(ids), [this, m, j, finish](Status s) {
    OpEnd(m, OstOp::kSync, s.ok());
    if (j->Done(s))
      finish();
  });
  if (route.has_next) {
    auto fwd = std::make_shared<pb::SyncReq>(std::move(req));
    fwd->set_ost(route.next_ost);
    fwd->clear_caps();
    fwd->set_epoch(0);
    ForwardPart(router_.get(), route, net::MsgType::kSync, fwd, {}, j, finish);
  }
}

void OssServer::ChainPunch(net::ServerCall call, OstStore* store, pb::PunchReq req) {
  ChainRouter::Route route;
  Status st = ChainGate(req.chain(), req.chain_version(), req.ost(), false, &route);
  if (!st.ok())
    return call.ReplyError(st);
  const ObjectId id = net::FromPb(req.obj());
  router_->MutationBegin(req.chain(), req.chain_version());
  auto c = std::make_shared<net::ServerCall>(std::move(call));
  auto r = std::make_shared<pb::PunchReq>(std::move(req));
  OstCounters* m = CountersOf(r->ost());
  // A punch cuts [length, EOF): ordered at the head against the writes it overlaps.
  const uint64_t span = UINT64_MAX - r->length();
  auto run = [this, c, r, store, id, m, route, span] {
    auto j = std::make_shared<Join>();
    j->left = route.has_next ? 2 : 1;
    auto finish = [this, c, r, id, route, j, span] {
      router_->ClearDirty(id, r->length(), span);
      if (route.head)
        router_->OrderedEnd(id, r->length(), span);
      router_->MutationEnd(r->chain(), r->chain_version());
      if (!j->first.ok())
        return c->ReplyError(j->first);
      c->Reply(pb::PunchResp());
    };
    router_->MarkDirty(id, r->length(), span);
    OpBegin(m, OstOp::kPunch);
    store->PunchAsync(id, r->length(), [this, m, j, finish](Status s) {
      OpEnd(m, OstOp::kPunch, s.ok());
      if (j->Done(s))
        finish();
    });
    if (route.has_next) {
      auto fwd = std::make_shared<pb::PunchReq>(*r);
      fwd->set_ost(route.next_ost);
      fwd->clear_cap();
      ForwardPart(router_.get(), route, net::MsgType::kPunch, fwd, {}, j, finish);
    }
  };
  router_->OrderedBegin(route.head, id, r->length(), span, std::move(run));
}

void OssServer::ChainDestroy(net::ServerCall call, OstStore* store, pb::DestroyReq req) {
  ChainRouter::Route route;
  Status st = ChainGate(req.chain(), req.chain_version(), req.ost(), false, &route);
  if (!st.ok())
    return call.ReplyError(st);
  auto joined = JoinReply<pb::DestroyResp>(std::make_shared<net::ServerCall>(std::move(call)),
                                           route.has_next);
  auto j = joined.first;
  router_->MutationBegin(req.chain(), req.chain_version());
  auto finish = [this, chain = req.chain(), version = req.chain_version(),
                 reply = std::move(joined.second)] {
    router_->MutationEnd(chain, version);
    reply();
  };
  OstCounters* m = CountersOf(req.ost());
  OpBegin(m, OstOp::kDestroy);
  store->DestroyAsync(net::FromPb(req.obj()), [this, m, j, finish](Status s) {
    OpEnd(m, OstOp::kDestroy, s.ok());
    if (j->Done(s))
      finish();
  });
  if (route.has_next) {
    auto fwd = std::make_shared<pb::DestroyReq>(std::move(req));
    fwd->set_ost(route.next_ost);
    fwd->clear_cap();
    ForwardPart(router_.get(), route, net::MsgType::kDestroy, fwd, {}, j, finish);
  }
}

}  // namespace ciuic::oss
