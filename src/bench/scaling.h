// The scaling phase: sequential read throughput of ciuic as OSS hosts (1, 2, 4, 8) and clients
// grow, on one machine. The MDS, each OSS and the client run in their own network namespaces,
// joined by veth pairs through a bridge in a namespace of their own; each OSS link is shaped
// with tc tbf on both ends (default 200 Mbit/s), so each OSS brings the bandwidth of one link,
// as a server would in a cluster. No namespace has a route out; everything is removed at the
// end, on errors and on SIGINT/SIGTERM (see proc.h). Needs root.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bench/report.h"
#include "ciuic/status.h"

namespace ciuic::bench {

struct ScalingOptions {
  std::string bin_dir;   // where ciuic-mds and ciuic-oss are
  std::string work_dir;  // data of the temporary clusters (removed afterwards)
  std::vector<int> oss_counts = {1, 2, 4, 8};
  std::vector<int> client_counts = {1, 2, 4};
  int mbit = 200;                  // rate of each OSS link
  uint64_t per_oss = 96ull << 20;  // bytes read from each OSS per measurement
  int runs = 1;                    // reads per configuration (min/median/max)
  std::function<void()> drop_caches = [] {};
  std::function<void(const std::string&)> progress = [](const std::string&) {};
};

// Checks what the phase needs (root, ip, tc, the server binaries and their --listen option);
// kPermissionDenied or kNotFound with the reason.
Status CheckScalingPrerequisites(const ScalingOptions& o);

// Runs the phase and adds scaling_read_oss<N> (GB/s), scaling_eff_oss<N>, scaling_read_clients<C>
// (at the largest OSS count), scaling_eff_clients<C> (relative to 1 client at that OSS count)
// and scaling_eff_max (efficiency at the largest OSS count) for target "ciuic", plus the
// throughput-vs-OSS chart series.
Status RunScalingPhase(const ScalingOptions& o, Report* report);

}  // namespace ciuic::bench
