// The in-process phases of the benchmark (seq, rand, latency, meta), run against one Target.
// Each adds one value per run to the Report. The driver drops caches before each phase.
// Thread-safety: a phase uses its own threads and joins them before returning.
#pragma once

#include <functional>
#include <set>
#include <string>

#include "bench/options.h"
#include "bench/report.h"
#include "bench/target.h"

namespace ciuic::bench {

struct PhaseContext {
  const Options* options = nullptr;
  Report* report = nullptr;
  int run = 0;
  // Drops the page cache (the driver's policy; may do nothing without root).
  std::function<void()> drop_caches = [] {};
  // Prints one progress line (the driver decides where).
  std::function<void(const std::string&)> progress = [](const std::string&) {};
};

// Sequential write then read, file-per-process and one shared file, options.clients clients x
// options.threads threads. Every write is fsynced before its time is taken. Metrics
// seq_{write,read}_{fpp,shared} in GB/s (1e9 bytes/s), with first/last done across clients.
Status RunSeqPhase(Target& t, const PhaseContext& ctx);

// Writes (fsynced) the random-read data file, then 4 KiB random reads at options.qd in flight,
// submitted options.batch at a time. Metric rand_read_4k (IOPS).
Status RunRandPhase(Target& t, const PhaseContext& ctx);

// QD1 latency of 4 KiB reads at random offsets and of create, stat and unlink in one directory:
// lat_{read_4k,create,stat,unlink}_{p50,p99,p999} in microseconds, plus CDF series for charts.
Status RunLatencyPhase(Target& t, const PhaseContext& ctx);

// mdtest-like: create, stat, readdir, unlink of options.meta_files files per client, in one
// shared directory and in per-client directories, options.meta_clients clients; each step
// starts when every client finished the previous one. meta_{create,stat,readdir,unlink,all}_
// {shared,perclient} in ops/s (readdir: entries/s).
Status RunMetaPhase(Target& t, const PhaseContext& ctx);

// Bytes of the random-read data file for these options.
uint64_t RandFileSize(const Options& o);

}  // namespace ciuic::bench
