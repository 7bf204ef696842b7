// `ciuic cluster up|down|status`: a local cluster of real processes (1 MDS + N OSS on 127.0.0.1)
// with its data, logs and cluster file under one directory (docs/formats/cluster-dir.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ciuic::cli {

struct ClusterUpOptions {
  std::string dir;
  int num_oss = 2;
  int osts_per_oss = 2;
  int mds_port = 0;  // 0: pick a free port the first time, then keep it
  std::string io_engine = "auto";
  // The cold tier's URL for HSM (file:///dir, s3://bucket/prefix, mem://name); "" = a
  // directory `cold` in the cluster directory. Fixed when the cluster is made.
  std::string cold_tier;
  int timeout_s = 30;
  // HSM policy (docs/design.md "HSM policy"): a `ciuic hsm sweep --every` process run with the
  // cluster. Negative / empty: keep what the cluster saved (new clusters: off, 90 %, 80 %,
  // release-at-watermark). Saved in cluster.shape like the cold tier, but changeable.
  int hsm_every_s = -1;  // 0: no policy process
  double hsm_high = -1;
  double hsm_low = -1;
  std::string hsm_default;
  // Copies of each object of files whose layout does not say; 0: keep what the cluster saved
  // (new clusters: 1). At most --oss.
  int replicas = 0;
  // Bandwidth bound of each OSS's resync copies in MiB/s, 0 = none; negative: keep what the
  // cluster saved (new clusters: 128).
  int resync_mbps = -1;
  // The node cache of this machine's clients, recorded in cluster.conf: a directory, "none" to
  // turn it off, or empty to keep what the file says (new clusters: none). Its size cap: empty
  // keeps it (default 8 GiB).
  std::string node_cache;
  std::string node_cache_size;
  double node_cache_min_free = -1;  // percent; negative: unchanged
};

// Each returns the process exit code and prints one clear line on failure.
int ClusterUp(const ClusterUpOptions& options);
int ClusterDown(const std::string& dir, int timeout_s);
int ClusterStatus(const std::string& dir);

// A server's metrics endpoint, as recorded in DIR/run/<name>.metrics_port.
struct MetricsEndpoint {
  std::string name;  // mds, oss0, oss1, ...
  std::string host;
  uint16_t port = 0;
  std::string Url() const;
};
// The metrics endpoints of the cluster in `dir` whose servers are running.
std::vector<MetricsEndpoint> MetricsEndpoints(const std::string& dir);

// The cluster directory: `dir` if given, else the directory of $CIUIC_CLUSTER, else ~/ciuic.
std::string DefaultClusterDir(const std::string& dir);

}  // namespace ciuic::cli
