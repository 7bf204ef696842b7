// Command-line options of ciuic-benchmark and their validation. ParseOptions never prints and
// never exits: errors come back as kInvalidArgument with a one-line message.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ciuic/status.h"

namespace ciuic::bench {

// The phases, in the order they run.
inline const std::vector<std::string>& AllPhases() {
  static const std::vector<std::string> kPhases = {
      "seq", "rand", "latency", "meta", "scaling", "loader", "checkpoint", "tier", "cache"};
  return kPhases;
}

enum class TargetKind { kCiuic, kLocal, kPath, kFuse };

struct TargetSpec {
  TargetKind kind = TargetKind::kLocal;
  std::string name;       // shown in tables: "ciuic", "local", "fuse", "path:<dir>" or a peer name
  std::string dir;        // local/path: the directory the benchmark works in
  uint32_t replicas = 0;  // ciuic-rN: copies of each object (0: the cluster's layouts)
};

struct Options {
  std::vector<TargetSpec> targets;
  std::vector<std::string> phases;
  std::string cluster_file;    // empty: start a fresh local cluster for the ciuic/fuse targets
  uint64_t size = 1ull << 30;  // bytes per seq write phase (all clients together)
  uint64_t block = 1u << 20;   // IO size of the seq phases
  int clients = 2;             // seq: independent clients (own Client / own file set)
  int threads = 2;             // seq: threads per client
  int qd = 32;                 // rand: IOs in flight
  int batch = 8;               // rand: IOs submitted per io_uring_submit / per refill
  double rand_seconds = 5;
  uint64_t rand_file = 512ull << 20;  // rand: bytes of the file read at random
  int latency_ops = 1000;             // latency: small reads and metadata ops sampled
  int meta_files = 2000;              // meta: files per client
  int meta_clients = 2;
  int runs = 3;
  std::vector<int> scaling_oss = {1, 2, 4, 8};
  std::vector<int> scaling_clients = {1, 2, 4};
  int scaling_mbit = 200;                  // shaped rate of each OSS link
  uint64_t scaling_per_oss = 96ull << 20;  // bytes read per OSS in the scaling phase
  uint64_t tier_size = 1ull << 30;  // tier: bytes of the file archived, released and restored
  std::string tier_cold;            // tier: the cluster's cold tier URL (with --cluster)
  int tier_s3_samples = 4000;       // tier, S3 part: objects of the data set (0: not run)
  uint64_t tier_s3_sample_size = 100u << 10;  // tier, S3 part: bytes per object
  int tier_s3_workers = 4;                    // tier, S3 part: workers of both loaders
  uint64_t cache_size = 512ull << 20;  // cache: bytes of the file read through the node cache
  bool quick = false;
  bool with_peers = false;
  std::string peers_dir;  // default: <repo>/../shared/peers when found
  std::string json_path;
  std::string charts_dir;
  std::string work_dir;  // temp data (local cluster, default local target); default $TMPDIR
  bool progress = true;
  bool show_help = false;
  std::string help_text;
};

// Parses `args` (argv without argv[0]). Applies --quick's smaller sizes first, so explicit
// options given with --quick still win. Errors (kInvalidArgument): unknown option or phase, a
// target without its path, a path target that is not an existing directory, bad sizes.
Result<Options> ParseOptions(const std::vector<std::string>& args);

// Parses one --target value: "ciuic", "fuse", "local:DIR", "path:DIR".
Result<TargetSpec> ParseTarget(const std::string& spec);

// OK when the scaling phase can run: it needs root (network namespaces, tc). `euid` is the
// caller's effective uid. kPermissionDenied with the reason otherwise.
Status CheckScalingAllowed(uint32_t euid);

}  // namespace ciuic::bench
