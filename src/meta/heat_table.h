// HeatTable: per-file heat on the MDS (docs/design.md "HSM policy"), a decayed access count:
// each access adds to it and it halves every `half_life_ms`. Fed by opens and by the read
// counts OSSes send with their heartbeats (resolved reads skip the MDS). In memory only: after
// an MDS restart every file starts cold and the policy falls back to atime for files with no
// heat. Bounded: past `max_files` entries the coldest are dropped.
//
// Thread-safe (one mutex): the writer thread adds, HsmState reads from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "common/fid.h"

namespace ciuic::meta {

class HeatTable {
 public:
  HeatTable(int64_t half_life_ms, size_t max_files);

  // `value` decayed from `from_ms` to `to_ms` (no change when to_ms <= from_ms).
  static double Decay(double value, int64_t from_ms, int64_t to_ms, int64_t half_life_ms);

  // Adds `count` accesses of `fid` at `now_ms`.
  void Add(const Fid& fid, double count, int64_t now_ms);
  // The heat of `fid` at `now_ms`; nullopt when it has none (never seen, or dropped as cold).
  std::optional<double> Get(const Fid& fid, int64_t now_ms) const;
  void Erase(const Fid& fid);
  size_t size() const;

 private:
  struct Entry {
    double value = 0;
    int64_t at_ms = 0;  // when `value` was exact
  };
  // Drops the coldest entries down to 7/8 of the cap, so eviction is paid once per many adds.
  void EvictLocked(int64_t now_ms);

  const int64_t half_life_ms_;
  const size_t max_files_;
  mutable std::mutex mu_;
  std::unordered_map<Fid, Entry, FidHash> heat_;  // guarded by mu_
};

}  // namespace ciuic::meta
