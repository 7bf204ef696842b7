// The `cache` phase: the node cache (docs/design.md "Node cache") against the local disk, in
// one run (issue 16 item 6). Thread-safety: runs its own threads and joins them before
// returning.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "bench/report.h"
#include "ciuic/status.h"

namespace ciuic::bench {

struct CacheOptions {
  std::string cluster_file;  // the cluster measured
  std::string work_dir;      // local disk: the node cache and the local file live here
  uint64_t size = 512ull << 20;
  int readers = 4;          // threads of the sequential reads
  int rand_threads = 8;     // threads of the 4 KiB random reads (one read each in flight)
  double rand_seconds = 3;  // per random-read measurement
  std::vector<int> ranks = {1, 2, 4, 8};  // clients reading one file at once
  int run = 0;
  std::function<void()> drop_caches = [] {};
  std::function<void(const std::string&)> progress = [](const std::string&) {};
};

// Writes one file of `size` bytes to the cluster and the same bytes to a local file, then, with
// the page cache dropped before each measurement:
//   cache_fill            reading it through an empty node cache (from the OSTs)     GB/s
//   cache_hit_seq         reading it again: every block a hit                        GB/s
//   local_seq             the local file, the same readers and request size          GB/s
//   cache_hit_seq_vs_local                                         (the issue: >= 0.85)
//   cache_hit_rand_4k, local_rand_4k, cache_hit_rand_vs_local      4 KiB IOPS (>= 0.6)
//   cache_ranks<N>_ost_bytes  N clients of this machine reading the file at once through an
//                         empty cache: bytes the OSSes read, / the file's size (<= 1.1)
//   cache_ranks<N>_time, nocache_ranks<N>_ost_bytes   the time of that; the same without the
//                         cache (N times the file)
//   local_ranks<N>_pagecache_time   N readers of the local file at once, every byte already in
//                         the page cache: the memory work alone (copy and check) of N loads,
//                         the floor under cache_ranks<N>_time on this machine
// Every byte read is checked. Removes the files and the cache after.
Status RunCachePhase(const CacheOptions& o, Report* report);

// The sum over the OSSes of the cluster of `cluster_file` (their metrics endpoints, from the
// cluster directory's run/oss*.metrics_port) of metric `name`, all label sets together.
// NotFound when the cluster has no endpoints.
Result<double> SumOssMetric(const std::string& cluster_file, const std::string& name);

}  // namespace ciuic::bench
