// The `tier` phase: ciuic's cold tier measured against the object store under it, in one run
// (issue 14 item 5). Thread-safety: runs its own threads and joins them before returning.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "bench/report.h"
#include "ciuic/status.h"

namespace ciuic::bench {

struct TierOptions {
  std::string cluster_file;  // the cluster measured
  std::string cold_url;      // its cold tier (the store its OSSes archive to)
  uint64_t size = 1ull << 30;
  int readers = 4;                  // threads reading the file, each a contiguous share
  int get_threads = 16;             // parallel ranged GETs against the store
  uint64_t get_range = 8ull << 20;  // bytes per GET
  uint64_t io_size = 8ull << 20;    // bytes per read or write call on the file
  int run = 0;
  std::function<void()> drop_caches = [] {};
  std::function<void(const std::string&)> progress = [](const std::string&) {};
};

// Writes one file of `size` bytes (fsynced), then, with the page cache dropped before each read:
//   tier_read_hot      reading it from the OSTs                        GB/s
//   tier_archive       `hsm archive` (OSSes copy to the store)          GB/s of file bytes
//   tier_store_get     the store's own limit: parallel ranged GETs of the archived objects
//   tier_read_restore  reading it after `hsm release` (restore from the store, then read)
//   tier_restore_vs_store  tier_read_restore / tier_store_get (the issue asks >= 0.8)
// Every byte read is checked against what was written. Removes the file (and its copy) after.
Status RunTierPhase(const TierOptions& o, Report* report);

}  // namespace ciuic::bench
