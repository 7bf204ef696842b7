#include "bench/options.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/config.h"

namespace ciuic::bench {

Result<TargetSpec> ParseTarget(const std::string& spec) {
  TargetSpec t;
  if (spec == "ciuic") {
    t.kind = TargetKind::kCiuic;
    t.name = "ciuic";
    return t;
  }
  if (spec.size() == 8 && spec.rfind("ciuic-r", 0) == 0 && spec[7] >= '1' && spec[7] <= '8') {
    t.kind = TargetKind::kCiuic;
    t.name = spec;
    t.replicas = static_cast<uint32_t>(spec[7] - '0');
    return t;
  }
  if (spec == "fuse") {
    t.kind = TargetKind::kFuse;
    t.name = "fuse";
    return t;
  }
  auto colon = spec.find(':');
  std::string kind = spec.substr(0, colon);
  std::string dir = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind != "local" && kind != "path") {
    return Status::InvalidArgument(
        fmt::format("unknown target '{}' (known: ciuic, ciuic-r1..ciuic-r8, fuse, local:DIR, "
                    "path:DIR)",
                    spec));
  }
  if (dir.empty()) {
    return Status::InvalidArgument(
        fmt::format("target '{}' needs a directory: {}:/some/dir", spec, kind));
  }
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  t.dir = dir;
  if (kind == "local") {
    t.kind = TargetKind::kLocal;
    t.name = "local";
    return t;
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(
        fmt::format("target '{}': {} is not an existing directory (mount it first)", spec, dir));
  }
  t.kind = TargetKind::kPath;
  t.name = "path:" + dir;
  return t;
}

Status CheckScalingAllowed(uint32_t euid) {
  if (euid != 0) {
    return Status::PermissionDenied(
        "the scaling phase needs root (it creates network namespaces, veth links and tc "
        "shaping); run as root or leave 'scaling' out of --phases");
  }
  return Status::OK();
}

namespace {

Result<std::vector<int>> ParseIntList(const std::string& what, const std::string& s) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 64) {
      return Status::InvalidArgument(
          fmt::format("{}: '{}' is not a list of counts 1..64 such as 1,2,4,8", what, s));
    }
    out.push_back(static_cast<int>(v));
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

Result<Options> ParseOptions(const std::vector<std::string>& args) {
  Options o;
  std::vector<std::string> targets;
  std::string phases;
  std::string size_s;
  std::string block_s;
  std::string per_oss_s;
  std::string rand_file_s;
  std::string tier_size_s;
  std::string cache_size_s;
  std::string tier_s3_size_s;
  std::string scaling_oss_s;
  std::string scaling_clients_s;
  bool no_progress = false;
  CLI::App app{
      "ciuic-benchmark: ciuic side by side with a local directory, a FUSE mount and peer file "
      "systems, with the same method on every target.\n"
      "Example: ciuic-benchmark --quick   (starts a fresh local cluster in a temp dir)"};
  app.name("ciuic-benchmark");
  app.add_option("--target", targets,
                 "target (repeatable): ciuic, ciuic-rN (N copies of each object), fuse, "
                 "local:DIR, path:DIR (any mounted file system); default: local:<work dir> and "
                 "ciuic");
  app.add_option(
      "--phases", phases,
      "comma-separated phases: seq, rand, latency, meta, scaling, loader, checkpoint, tier, "
      "cache "
      "(default: all)");
  app.add_option("--cluster", o.cluster_file,
                 "cluster file of a running cluster; default: start a fresh local cluster");
  app.add_option("--size", size_s, "bytes written per seq phase, all clients together (1G)");
  app.add_option("--block", block_s, "IO size of the seq phases (1M)");
  app.add_option("--clients", o.clients, "seq: independent clients")->check(CLI::Range(1, 16));
  app.add_option("--threads", o.threads, "seq: threads per client")->check(CLI::Range(1, 64));
  app.add_option("--qd", o.qd, "rand: queue depth")->check(CLI::Range(1, 1024));
  app.add_option("--batch", o.batch, "rand: IOs submitted together")->check(CLI::Range(1, 1024));
  app.add_option("--rand-seconds", o.rand_seconds, "rand: seconds per run")
      ->check(CLI::Range(0.2, 3600.0));
  app.add_option("--rand-file", rand_file_s, "rand: bytes of the file read at random (512M)");
  app.add_option("--latency-ops", o.latency_ops, "latency: operations sampled per kind")
      ->check(CLI::Range(10, 10000000));
  app.add_option("--meta-files", o.meta_files, "meta: files per client")
      ->check(CLI::Range(1, 10000000));
  app.add_option("--meta-clients", o.meta_clients, "meta: clients")->check(CLI::Range(1, 64));
  app.add_option("--runs", o.runs, "runs per phase (min/median/max reported)")
      ->check(CLI::Range(1, 100));
  app.add_option("--scaling-oss", scaling_oss_s, "scaling: OSS counts (1,2,4,8)");
  app.add_option("--scaling-clients", scaling_clients_s, "scaling: client counts (1,2,4)");
  app.add_option("--scaling-mbit", o.scaling_mbit, "scaling: shaped rate of each OSS link")
      ->check(CLI::Range(1, 100000));
  app.add_option("--scaling-per-oss", per_oss_s, "scaling: bytes read per OSS (96M)");
  app.add_option("--tier-size", tier_size_s,
                 "tier: bytes of the file archived, released and restored (1G)");
  app.add_option("--cache-size", cache_size_s,
                 "cache: bytes of the file read through the node cache and from the local disk "
                 "(512M)");
  app.add_option("--tier-cold", o.tier_cold,
                 "tier: the cold tier URL of the --cluster given (a fresh local cluster's is "
                 "known)");
  app.add_option("--tier-s3-samples", o.tier_s3_samples,
                 "tier: objects of the S3 data set read by CiuicDataLoader (linked) and torch "
                 "(s3fs); 0 leaves that part out (4000)")
      ->check(CLI::Range(0, 10000000));
  app.add_option("--tier-s3-sample-size", tier_s3_size_s, "tier: bytes per S3 object (100K)");
  app.add_option("--tier-s3-workers", o.tier_s3_workers, "tier: workers of both loaders (4)")
      ->check(CLI::Range(0, 64));
  app.add_flag("--quick", o.quick, "small sizes and one run: the whole suite in under 3 minutes");
  app.add_flag("--with-peers", o.with_peers,
               "also start a FUSE passthrough of the local disk, MooseFS and GlusterFS with the "
               "peers scripts and measure them");
  app.add_option("--peers-dir", o.peers_dir, "directory of the peers scripts");
  app.add_option("--json", o.json_path, "write all results as JSON here");
  app.add_option("--charts", o.charts_dir, "write PNG charts into this directory");
  app.add_option("--work-dir", o.work_dir, "temp data directory (default $TMPDIR or /tmp)");
  app.add_flag("--no-progress", no_progress, "no progress lines");
  std::vector<std::string> rev(args.rbegin(), args.rend());
  try {
    app.parse(rev);
  } catch (const CLI::CallForHelp&) {
    o.show_help = true;
    o.help_text = app.help();
    return o;
  } catch (const CLI::ParseError& e) {
    return Status::InvalidArgument(e.what());
  }
  o.progress = !no_progress;

  if (o.quick) {
    if (size_s.empty())
      size_s = "256M";
    if (app.count("--runs") == 0)
      o.runs = 1;
    if (app.count("--rand-seconds") == 0)
      o.rand_seconds = 2;
    if (app.count("--latency-ops") == 0)
      o.latency_ops = 500;
    if (app.count("--meta-files") == 0)
      o.meta_files = 1000;
    if (scaling_oss_s.empty())
      scaling_oss_s = "1,2,4";
    if (scaling_clients_s.empty())
      scaling_clients_s = "1,2";
    if (per_oss_s.empty())
      per_oss_s = "24M";
    if (rand_file_s.empty())
      rand_file_s = "128M";
    if (tier_size_s.empty())
      tier_size_s = "64M";
    if (cache_size_s.empty())
      cache_size_s = "32M";
    if (app.count("--tier-s3-samples") == 0)
      o.tier_s3_samples = 200;
  }
  if (!tier_s3_size_s.empty()) {
    CIUIC_ASSIGN_OR_RETURN(o.tier_s3_sample_size, ParseSize(tier_s3_size_s));
  }
  if (o.tier_s3_sample_size < 16 || o.tier_s3_sample_size > (64u << 20))
    return Status::InvalidArgument("--tier-s3-sample-size must be 16 bytes to 64M");
  if (!tier_size_s.empty()) {
    CIUIC_ASSIGN_OR_RETURN(o.tier_size, ParseSize(tier_size_s));
  }
  if (o.tier_size < (8u << 20) || o.tier_size % (8u << 20) != 0)
    return Status::InvalidArgument("--tier-size must be a multiple of 8M");
  if (!cache_size_s.empty()) {
    CIUIC_ASSIGN_OR_RETURN(o.cache_size, ParseSize(cache_size_s));
  }
  if (o.cache_size < (1u << 20) || o.cache_size % (1u << 20) != 0)
    return Status::InvalidArgument("--cache-size must be a multiple of 1M");
  if (!rand_file_s.empty()) {
    CIUIC_ASSIGN_OR_RETURN(o.rand_file, ParseSize(rand_file_s));
  }
  if (o.rand_file < (1u << 20))
    return Status::InvalidArgument("--rand-file must be at least 1M");
  if (!size_s.empty()) {
    CIUIC_ASSIGN_OR_RETURN(o.size, ParseSize(size_s));
  }
  if (!block_s.empty()) {
    CIUIC_ASSIGN_OR_RETURN(o.block, ParseSize(block_s));
  }
  if (!per_oss_s.empty()) {
    CIUIC_ASSIGN_OR_RETURN(o.scaling_per_oss, ParseSize(per_oss_s));
  }
  if (!scaling_oss_s.empty()) {
    CIUIC_ASSIGN_OR_RETURN(o.scaling_oss, ParseIntList("--scaling-oss", scaling_oss_s));
  }
  if (!scaling_clients_s.empty()) {
    CIUIC_ASSIGN_OR_RETURN(o.scaling_clients, ParseIntList("--scaling-clients", scaling_clients_s));
  }
  if (o.block < 4096 || o.block % 4096 != 0 || o.block > (64u << 20))
    return Status::InvalidArgument("--block must be a multiple of 4 KiB up to 64 MiB");
  const uint64_t streams = static_cast<uint64_t>(o.clients) * static_cast<uint64_t>(o.threads);
  if (o.size < o.block * streams) {
    return Status::InvalidArgument(
        fmt::format("--size {} must hold at least one block per thread ({} x {})",
                    FormatSize(o.size), streams, FormatSize(o.block)));
  }
  if (o.scaling_per_oss < (1u << 20))
    return Status::InvalidArgument("--scaling-per-oss must be at least 1M");

  if (phases.empty()) {
    o.phases = AllPhases();
  } else {
    std::vector<std::string> want;
    size_t pos = 0;
    for (;;) {
      size_t comma = phases.find(',', pos);
      std::string p =
          phases.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      if (std::find(AllPhases().begin(), AllPhases().end(), p) == AllPhases().end()) {
        return Status::InvalidArgument(
            fmt::format("unknown phase '{}' (known: {})", p, fmt::join(AllPhases(), ", ")));
      }
      want.push_back(p);
      if (comma == std::string::npos)
        break;
      pos = comma + 1;
    }
    for (const auto& p : AllPhases()) {  // run order, no duplicates
      if (std::find(want.begin(), want.end(), p) != want.end())
        o.phases.push_back(p);
    }
  }

  if (o.work_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    o.work_dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  if (targets.empty()) {
    o.targets.push_back(TargetSpec{TargetKind::kLocal, "local", ""});
    o.targets.push_back(TargetSpec{TargetKind::kCiuic, "ciuic", ""});
  }
  for (const auto& spec : targets) {
    CIUIC_ASSIGN_OR_RETURN(TargetSpec t, ParseTarget(spec));
    for (const auto& seen : o.targets) {
      if (seen.name == t.name && seen.dir == t.dir)
        return Status::InvalidArgument(fmt::format("target '{}' given twice", spec));
    }
    o.targets.push_back(std::move(t));
  }
  return o;
}

}  // namespace ciuic::bench
