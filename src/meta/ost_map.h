// OstMap: the MDS's table of OSTs: which OSS serves each, its space and state, and the choice of
// OSTs for new objects.
//
// State: 0 up, 1 down (its OSS missed 3 heartbeats, or not heard from since the MDS started),
// 2 full (free < 1% of capacity or < 64 MiB), 3 readonly. New objects go to up OSTs only.
//
// It also holds the replication chains (docs/design.md "Replication"): each an ordered list of
// OSTs in distinct failure domains with a version that grows with every change of a member's
// state. A member whose OST stays down past the dead time goes offline (never the last serving
// one: a chain keeps its best copy), and so does every member of an OSS that comes back in
// another durability epoch (it lost unsynced writes).
// Thread-safety: all methods are thread-safe (one mutex); reads are served on network threads
// while the writer thread updates it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ciuic.pb.h"
#include "common/layout.h"
#include "common/status.h"

namespace ciuic::meta {

inline constexpr uint32_t kOstUp = 0;
inline constexpr uint32_t kOstDown = 1;
inline constexpr uint32_t kOstFull = 2;
inline constexpr uint32_t kOstReadonly = 3;

// Chain member states (pb::ChainMember.state).
inline constexpr uint32_t kMemberServing = 0;
inline constexpr uint32_t kMemberOffline = 1;  // missed writes: neither written nor read
inline constexpr uint32_t kMemberSyncing = 2;  // catching up: written, not read

class OstMap {
 public:
  // Adds OSTs known from an earlier run (persisted registrations); they start down.
  void Load(const pb::OstInfo& info);

  // Records that `addr` serves `osts` (capacity, free, device_id), marking them up, in failure
  // domain `domain` ("" = addr). `epoch` is the OSS's durability epoch (0: unknown); another one
  // than the OSTs' last takes their chain members offline, and so does another OstInfo
  // incarnation (the OST came back empty). Returns the entries whose persisted
  // part (index, address, capacity, device, domain, epoch) changed.
  std::vector<pb::OstInfo> Register(const std::string& addr,
                                    const google::protobuf::RepeatedPtrField<pb::OstInfo>& osts,
                                    int64_t now_ms,
                                    const std::string& domain = "",
                                    uint64_t epoch = 0);

  // Updates the stats of the OSTs `addr` serves. kNotFound if `addr` serves no known OST (the
  // OSS must register first, e.g. after it moved).
  Status Heartbeat(const std::string& addr,
                   const google::protobuf::RepeatedPtrField<pb::OstInfo>& osts,
                   int64_t now_ms);

  // Marks down every up or full OST not heard from since `now_ms - dead_after_ms`. Returns how
  // many changed.
  int ExpireSilent(int64_t now_ms, int64_t dead_after_ms);

  // Chooses up to `count` distinct up OSTs for a new component: round-robin while free space is
  // balanced (so consecutive small files land on different OSTs), weighted by free space
  // otherwise. Returns fewer when fewer are up.
  std::vector<uint32_t> Choose(uint32_t count);

  // Replication chains.
  // Adds a chain known from an earlier run; its version moves to the next multiple of 2^32, so
  // versions published by a run that crashed before they were persisted are never reused.
  void LoadChain(const pb::Chain& chain);
  // Chooses `count` chains of `replicas` OSTs in distinct failure domains for a new component,
  // reusing chains with the same members, heads spread round-robin over the up OSTs. A member
  // whose OST is down starts offline (the file is written degraded); each chain has an up head.
  // kInvalidArgument when fewer failure domains are known than `replicas`, kUnavailable when
  // no OST is up. The chains used are appended to `used` (to persist with the layout).
  Result<std::vector<uint32_t>> ChooseChains(uint32_t count,
                                             uint32_t replicas,
                                             std::vector<pb::Chain>* used);
  // Takes offline the serving or syncing members whose OST has been down for `dead_after_ms`
  // (counting from `started_ms` for OSTs not seen since the MDS started). Returns the chains
  // that changed.
  // Offline members whose OST is up again start syncing (ChainMember.since = the new version),
  // when their chain still has a serving member to copy from.
  std::vector<pb::Chain> ExpireChainMembers(int64_t now_ms, int64_t dead_after_ms);
  // Records the resync progress an OSS reports as the head of chains; a finished one makes its
  // member serving. Returns the chains that changed (to persist).
  std::vector<pb::Chain> NoteResync(
      const google::protobuf::RepeatedPtrField<pb::ResyncProgress>& progress);
  // Chains changed by Register since the last call (to persist).
  std::vector<pb::Chain> TakeChangedChains();
  // Every member OST of chain `id`, in order (empty when unknown).
  std::vector<uint32_t> ChainMembers(uint32_t id) const;
  // Number of failure domains among known OSTs, and among up ones.
  uint32_t Domains(bool up_only) const;
  // Chains with a member that is not serving, and chains with no serving member on an up OST.
  struct ChainHealth {
    uint32_t chains = 0;
    uint32_t degraded = 0;
    uint32_t unavailable = 0;
  };
  ChainHealth Health() const;
  uint64_t chains_version() const;
  // Version of the map (Snapshot().version()).
  uint64_t version() const;

  // Number of up OSTs.
  uint32_t usable() const;
  bool Known(uint32_t index) const;
  // Indexes of the OSTs that `addr` serves.
  std::vector<uint32_t> OstsOf(const std::string& addr) const;
  // Current map (GetOstMapResp form) and its version, bumped on every state or address change.
  pb::GetOstMapResp Snapshot() const;

  struct Space {
    uint64_t total = 0;
    uint64_t free = 0;
  };
  // Space summed over every known OST (last reported numbers), counting OSTs that share a device
  // once.
  Space TotalSpace() const;

 private:
  struct Entry {
    pb::OstInfo info;
    int64_t last_seen_ms = 0;
  };
  static uint32_t StateFor(const pb::OstInfo& info);
  // Marks every serving or syncing member on `ost` offline unless it is its chain's last
  // serving member; bumps versions. mu_ held.
  void TakeOffline(uint32_t ost, std::vector<pb::Chain>* changed);

  mutable std::mutex mu_;
  std::map<uint32_t, Entry> osts_;
  uint64_t version_ = 1;
  uint64_t rr_ = 0;
  std::map<uint32_t, pb::Chain> chains_;
  std::map<std::vector<uint32_t>, uint32_t> chain_ids_;  // members in order -> id
  uint32_t next_chain_ = 0;                              // ids are kChainBase + n
  uint64_t chains_version_ = 1;
  uint64_t chain_rr_ = 0;
  int64_t started_ms_ = -1;  // first ExpireChainMembers call
  std::vector<pb::Chain> changed_;
};

}  // namespace ciuic::meta
