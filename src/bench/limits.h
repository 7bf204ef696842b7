// Physical limits measured in the same run as the benchmark: the disk under the work directory
// (O_DIRECT sequential write+fsync and read, 4 KiB random reads at QD32) and loopback TCP. A
// result above its limit cannot come from the device or link and is flagged cache-inflated.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/report.h"
#include "ciuic/status.h"

namespace ciuic::bench {

struct Limits {
  double disk_write_gbps = 0;  // 1e9 bytes/s, O_DIRECT, fsynced
  double disk_read_gbps = 0;   // O_DIRECT
  double disk_rand_iops = 0;   // 4 KiB, O_DIRECT, io_uring QD32
  double loopback_gbps = 0;    // one TCP stream over 127.0.0.1
  nlohmann::json ToJson() const;
};

// Measures the limits with `bytes` of data under `dir` (removed afterwards); `drop_caches` runs
// between write and read.
// `streams` parallel streams (as many as the seq phase uses: a virtio disk scales with them).
Result<Limits> MeasureLimits(const std::string& dir,
                             uint64_t bytes,
                             int streams,
                             const std::function<void()>& drop_caches);

// Marks each seq/rand metric of `report` above its limit as cache-inflated (with a note).
// `over_network[target]` says whether the target's data also crosses loopback TCP (then the
// lower of disk and loopback is its limit).
void FlagCacheInflated(Report& report,
                       const Limits& limits,
                       const std::map<std::string, bool>& over_network);

}  // namespace ciuic::bench
