// ChainRouter: what an OSS knows of the replication chains (docs/design.md "Replication"), and
// its connections to the other OSSes of its chains.
//
// The table comes from the MDS (GetOstMapResp.chains, fetched when a heartbeat reports a newer
// chains_version or a request names a newer chain version). A replicated request names (chain,
// version); Check refuses one that is older than the table (the sender must fetch the OST map)
// or newer (this OSS fetches it; the sender retries), and one addressed to a member that is not
// active. Writes, syncs, punches and destroys flow down the active members in order (serving
// members in chain order, then syncing ones); reads are served by any serving member.
//
// Writes that overlap on one object are ordered at the head (OrderedBegin/OrderedEnd): the
// second starts down the chain only once the first came back from the tail, so every replica
// applies them in the same order. Writes that do not overlap run side by side.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "ciuic.pb.h"
#include "common/fid.h"
#include "common/status.h"
#include "net/rpc.h"

namespace ciuic {
class ThreadPool;
}  // namespace ciuic

namespace ciuic::oss {

class ChainRouter {
 public:
  // `loop` runs the peer channels; `pool` connects them (blocking). Neither is owned.
  ChainRouter(net::EventLoop* loop, ThreadPool* pool, net::ChannelOptions peer_options);

  // Installs the chains and OST addresses of `map` if its chains_version is newer.
  void Update(const pb::GetOstMapResp& map);
  uint64_t chains_version() const;
  uint64_t map_version() const;
  // Whether this process saw member `ost` of `chain` syncing: its copies were then rebuilt from
  // the head's (and synced), so acknowledgements it gave in an earlier durability epoch are
  // covered by the resync.
  bool SeenSyncing(uint32_t chain, uint32_t ost) const;
  // True (once) when a request named a chain version newer than the table.
  bool TakeRefreshWanted();

  struct Route {
    uint64_t version = 0;
    bool head = false;      // first active member
    bool serving = false;   // may serve reads
    uint32_t next_ost = 0;  // next active member (valid when has_next)
    std::string next_addr;
    bool has_next = false;
  };
  // Checks a request for chain `chain` at `version` addressed to member `ost`. kUnavailable
  // (retryable) with a message naming the chain when the version differs from the table's or
  // `ost` is not an active member; reads (`read`) also need a serving member.
  Status Check(uint32_t chain, uint64_t version, uint32_t ost, bool read, Route* out);

  // A syncing member that this OSS, as its chain's head, must bring up to date.
  struct ResyncWork {
    uint32_t chain = 0;
    uint64_t version = 0;  // the chain's current version
    uint32_t head_ost = 0;
    uint32_t member = 0;
    uint64_t since = 0;  // the member's ChainMember.since
    std::string member_addr;
  };
  // The syncing members of chains whose head (first serving member) `is_local` names.
  std::vector<ResyncWork> ResyncWorkFor(const std::function<bool(uint32_t)>& is_local) const;

  // One chain as the table has it: version, and members in order with state and address ("" when
  // unknown). False when the chain is unknown.
  struct MemberView {
    uint32_t ost = 0;
    uint32_t state = 0;  // pb::ChainMember.state
    std::string addr;
  };
  bool View(uint32_t chain, uint64_t* version, std::vector<MemberView>* members) const;

  // Sends a request to the OSS at `addr`, connecting first when needed. `cb` runs once, on a
  // network or pool thread.
  void Call(const std::string& addr,
            net::MsgType type,
            std::shared_ptr<google::protobuf::MessageLite> req,
            std::vector<net::ConstSpan> data,
            int timeout_ms,
            std::function<void(Result<net::Reply>)> cb);

  // Orders writes to overlapping ranges of one object at the head: `start` runs now or once
  // the overlapping writes before it ended; OrderedEnd ends one. Not at the head (`head`
  // false), `start` runs now and nothing is recorded.
  void OrderedBegin(
      bool head, const ObjectId& id, uint64_t offset, uint64_t len, std::function<void()> start);
  void OrderedEnd(const ObjectId& id, uint64_t offset, uint64_t len);
  // OrderedBegin at the head, waited for (resync and repair threads; never a network thread).
  void OrderedWait(const ObjectId& id, uint64_t offset, uint64_t len);

  // Reads see committed bytes only (CRAQ's clean reads): a chain write or punch marks its range
  // dirty at every member from when it starts here until the chain's answer is back (then the
  // tail applied it); a read of a dirty range waits until the writes that were in flight when it
  // came are committed, so a copy never answers with bytes that another copy may not have.
  // Later writes do not hold it up. WhenClean runs `fn` now or on the thread that clears.
  void MarkDirty(const ObjectId& id, uint64_t offset, uint64_t len);
  void ClearDirty(const ObjectId& id, uint64_t offset, uint64_t len);
  void WhenClean(const ObjectId& id, uint64_t offset, uint64_t len, std::function<void()> fn);
  // Objects with dirty ranges or reads waiting (tests).
  size_t dirty_objects() const;

  // Mutations (writes, punches, destroys) of a chain in flight here, by the chain version they
  // were checked under: a route chosen under an older version does not include a member that
  // became syncing since, so a resync must not compare before those ended (their bytes would
  // reach the head only, after the member was found equal). Begin after Check, End once
  // answered.
  void MutationBegin(uint32_t chain, uint64_t version);
  void MutationEnd(uint32_t chain, uint64_t version);
  // Waits until no mutation of `chain` checked under a version older than `version` is in
  // flight here; false after `timeout_ms`.
  bool WaitMutationsBefore(uint32_t chain, uint64_t version, int timeout_ms);

  // Closes the peer channels (at Stop).
  void Close();

 private:
  struct Peer {
    std::shared_ptr<net::RpcChannel> ch;
    bool connecting = false;
    std::vector<std::function<void(Result<std::shared_ptr<net::RpcChannel>>)>> waiting;
  };
  struct Waiter {
    uint64_t offset, len;
    std::function<void()> start;
  };
  struct Ranges {
    std::vector<std::pair<uint64_t, uint64_t>> active;  // (offset, len)
    std::vector<Waiter> waiting;                        // in arrival order
  };
  static bool Overlaps(uint64_t a, uint64_t al, uint64_t b, uint64_t bl);

  net::EventLoop* const loop_;
  ThreadPool* const pool_;
  const net::ChannelOptions peer_options_;

  mutable std::mutex mu_;
  std::map<uint32_t, pb::Chain> chains_;                  // CIUIC_GUARDED_BY(mu_)
  std::map<uint32_t, std::string> ost_addr_;              // CIUIC_GUARDED_BY(mu_)
  uint64_t version_ = 0;                                  // CIUIC_GUARDED_BY(mu_)
  uint64_t map_version_ = 0;                              // CIUIC_GUARDED_BY(mu_)
  bool refresh_wanted_ = false;                           // CIUIC_GUARDED_BY(mu_)
  std::map<std::string, Peer> peers_;                     // CIUIC_GUARDED_BY(mu_)
  std::set<std::pair<uint32_t, uint32_t>> seen_syncing_;  // CIUIC_GUARDED_BY(mu_)

  std::mutex order_mu_;
  std::map<ObjectId, Ranges> order_;  // CIUIC_GUARDED_BY(order_mu_)

  struct DirtyRange {
    uint64_t seq, offset, len;
  };
  struct CleanWaiter {
    uint64_t upto;  // waits for dirty ranges with seq <= upto only
    uint64_t offset, len;
    std::function<void()> fn;
  };
  struct Dirty {
    std::vector<DirtyRange> ranges;
    std::vector<CleanWaiter> waiting;
  };
  std::mutex mutations_mu_;
  std::condition_variable mutations_cv_;
  std::map<std::pair<uint32_t, uint64_t>, int> mutations_;  // CIUIC_GUARDED_BY(mutations_mu_)

  mutable std::mutex dirty_mu_;
  std::map<ObjectId, Dirty> dirty_;  // CIUIC_GUARDED_BY(dirty_mu_)
  uint64_t dirty_seq_ = 0;           // CIUIC_GUARDED_BY(dirty_mu_)
};

}  // namespace ciuic::oss
