// OstMap: the MDS's table of OSTs: which OSS serves each, its space and state, and the choice of
// OSTs for new objects.
//
// State: 0 up, 1 down (its OSS missed 3 heartbeats, or not heard from since the MDS started),
// 2 full (free < 1% of capacity or < 64 MiB), 3 readonly. New objects go to up OSTs only.
// Thread-safety: all methods are thread-safe (one mutex); reads are served on network threads
// while the writer thread updates it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ciuic.pb.h"
#include "common/status.h"

namespace ciuic::meta {

inline constexpr uint32_t kOstUp = 0;
inline constexpr uint32_t kOstDown = 1;
inline constexpr uint32_t kOstFull = 2;
inline constexpr uint32_t kOstReadonly = 3;

class OstMap {
 public:
  // Adds OSTs known from an earlier run (persisted registrations); they start down.
  void Load(const pb::OstInfo& info);

  // Records that `addr` serves `osts` (capacity, free, device_id), marking them up. Returns the
  // entries whose persisted part (index, address, capacity, device) changed.
  std::vector<pb::OstInfo> Register(const std::string& addr,
                                    const google::protobuf::RepeatedPtrField<pb::OstInfo>& osts,
                                    int64_t now_ms);

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

  mutable std::mutex mu_;
  std::map<uint32_t, Entry> osts_;
  uint64_t version_ = 1;
  uint64_t rr_ = 0;
};

}  // namespace ciuic::meta
