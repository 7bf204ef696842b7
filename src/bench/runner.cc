#include "bench/runner.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "bench/cache.h"
#include "bench/external.h"
#include "bench/limits.h"
#include "bench/options.h"
#include "bench/phases.h"
#include "bench/proc.h"
#include "bench/report.h"
#include "bench/scaling.h"
#include "bench/target.h"
#include "bench/tier.h"
#include "common/config.h"

namespace ciuic::bench {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// An ancestor of `from` that has `rel` under it, or "".
std::string FindUp(const std::string& from, const std::string& rel) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(from, ec);
  for (int i = 0; i < 8 && !p.empty(); ++i) {
    if (fs::exists(p / rel, ec))
      return (p / rel).string();
    if (p == p.parent_path())
      break;
    p = p.parent_path();
  }
  return "";
}

struct LiveTarget {
  std::unique_ptr<Target> target;
  bool over_network = false;
};

class Driver {
 public:
  explicit Driver(Options o) : o_(std::move(o)), start_(Clock::now()) {}

  int Run();

 private:
  void Progress(const std::string& line) {
    if (!o_.progress)
      return;
    double s = std::chrono::duration<double>(Clock::now() - start_).count();
    std::fprintf(stderr, "[%6.1f s] %s\n", s, line.c_str());
    std::fflush(stderr);
  }
  void Drop() {
    bool ok = DropCaches();
    drops_ok_ += ok ? 1 : 0;
    drops_failed_ += ok ? 0 : 1;
  }
  Status MakeWorkDir();
  Status StartLocalCluster();
  Status MountFuse(LiveTarget* out);
  void StartPeers();
  Status SetUpTargets();
  std::string SourceRoot() const;
  Status RunTierS3();

  Options o_;
  Clock::time_point start_;
  std::string bin_dir_ = SelfDir();
  std::string work_;  // this run's temp dir
  std::string cluster_file_;
  std::string cold_url_;  // the cluster's cold tier (tier phase)
  std::vector<LiveTarget> targets_;
  Report report_;
  int drops_ok_ = 0;
  int drops_failed_ = 0;
};

// The source tree: the ancestor of the binary that holds src/bench.
std::string Driver::SourceRoot() const {
  std::string src = FindUp(bin_dir_, "src/bench/runner.cc");
  return src.empty() ? "." : fs::path(src).parent_path().parent_path().parent_path().string();
}

// The tier phase's S3 part (bench/tier_s3.py): the loaders over a data set in S3. It runs once,
// whatever --runs says: each run is minutes of PUTs, a link and four epochs.
Status Driver::RunTierS3() {
  ExternalPhase ep;
  ep.phase = "tier";
  ep.script = SourceRoot() + "/bench/tier_s3.py";
  ep.python_path = bin_dir_ + "/../python";
  ep.cluster_file = cluster_file_;
  ep.local_dir = work_ + "/tier-s3";
  ep.json_out = work_ + "/tier-s3.json";
  ep.log_path = work_ + "/tier-s3.log";
  ep.quick = o_.quick;
  ep.timeout_s = 3600;
  const std::string mnt = work_ + "/tier-s3-mnt";
  ep.extra_args = {"--bin-dir",     bin_dir_,
                   "--samples",     std::to_string(o_.tier_s3_samples),
                   "--sample-size", std::to_string(o_.tier_s3_sample_size),
                   "--workers",     std::to_string(o_.tier_s3_workers),
                   "--mount",       mnt};
  std::error_code ec;
  fs::create_directories(ep.local_dir, ec);
  // The script unmounts its s3fs itself; this covers it being killed (timeout, signal).
  const std::string log = ep.log_path;
  AddCleanup([mnt, log] {
    if (::access(mnt.c_str(), F_OK) != 0)
      return;
    auto r = RunCommand({"fusermount", "-u", mnt}, log, 30);
    if (!r.ok() || *r != 0)  // not mounted (the usual case), or busy: lazily, to be sure
      RunCommand({"umount", "-l", mnt}, log, 30).status().IgnoreError();
  });
  Progress(fmt::format("tier: S3 data set of {} x {} with {}", o_.tier_s3_samples,
                       FormatSize(o_.tier_s3_sample_size), ep.script));
  Drop();
  return RunExternalPhase(ep, &report_);
}

Status Driver::MakeWorkDir() {
  std::string tmpl = o_.work_dir + "/ciuic-bench-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr)
    return Status::FromErrno(errno, "cannot create a temp dir under " + o_.work_dir);
  work_ = buf.data();
  // Peers' daemons run as their own users (MooseFS: mfs) and need to enter their data dirs.
  ::chmod(work_.c_str(), 0755);
  std::string w = work_;
  AddCleanup([w] {
    std::error_code ec;
    fs::remove_all(w, ec);
  });
  return Status::OK();
}

Status Driver::StartLocalCluster() {
  const std::string cli = bin_dir_ + "/ciuic";
  if (::access(cli.c_str(), X_OK) != 0)
    return Status::NotFound(cli + " not found: build the `ciuic` target or pass --cluster");
  const std::string dir = work_ + "/cluster";
  const std::string log = work_ + "/cluster-cmd.log";
  Progress(fmt::format("starting a fresh local cluster: ciuic cluster up {} --oss 2", dir));
  CIUIC_ASSIGN_OR_RETURN(
      int rc,
      RunCommand({cli, "cluster", "up", dir, "--oss", "2", "--osts-per-oss", "2"}, log, 120));
  // Registered even on failure: a half-started cluster is stopped too.
  AddCleanup([cli, dir, log] {
    auto r = RunCommand({cli, "cluster", "down", dir}, log, 60);
    if (!r.ok() || *r != 0)
      std::fprintf(stderr, "ciuic-benchmark: `ciuic cluster down %s` failed\n", dir.c_str());
  });
  if (rc != 0)
    return Status::Unavailable(fmt::format("ciuic cluster up failed: {}", LastLines(log, 2)));
  cluster_file_ = dir + "/cluster.conf";
  cold_url_ = "file://" + dir + "/cold";  // cluster up's default cold tier
  report_.Note(fmt::format("ciuic: fresh local cluster (1 MDS, 2 OSS x 2 OSTs) in a temp dir"));
  return Status::OK();
}

Status Driver::MountFuse(LiveTarget* out) {
  const std::string bin = bin_dir_ + "/ciuic-fuse";
  if (::access(bin.c_str(), X_OK) != 0)
    return Status::NotFound(bin + " does not exist (not built yet)");
  const std::string mnt = work_ + "/fuse-mnt";
  std::error_code ec;
  fs::create_directories(mnt, ec);
  const std::string log = work_ + "/fuse.log";
  CIUIC_ASSIGN_OR_RETURN(int rc, RunCommand({bin, cluster_file_, mnt, "--log", log}, log, 60));
  if (rc != 0)
    return Status::Unavailable(fmt::format("ciuic-fuse failed: {}", LastLines(log, 2)));
  AddCleanup([mnt, log] {
    auto r = RunCommand({"fusermount3", "-u", mnt}, log, 30);
    if (!r.ok() || *r != 0)
      RunCommand({"umount", "-l", mnt}, log, 30).status().IgnoreError();  // last resort
  });
  CIUIC_ASSIGN_OR_RETURN(
      out->target, NewPosixTarget("fuse", mnt + fmt::format("/fuse-bench-{}", ::getpid()), true));
  out->over_network = true;
  return Status::OK();
}

void Driver::StartPeers() {
  std::string dir = o_.peers_dir;
  if (dir.empty()) {
    dir = FindUp(bin_dir_, "shared/peers");
    if (dir.empty())
      dir = FindUp(".", "../shared/peers");
  }
  // fuse-passthrough is libfuse's passthrough_fh over a local directory: the FUSE ceiling of
  // this machine, measured in the same run so the ciuic mount can be judged against it.
  for (const std::string peer : {"fuse-passthrough", "moosefs", "glusterfs"}) {
    std::string up = dir + "/" + peer + "-up.sh";
    std::string down = dir + "/" + peer + "-down.sh";
    if (dir.empty() || ::access(up.c_str(), R_OK) != 0) {
      report_.Skip("peers", peer,
                   fmt::format("no {}-up.sh found (looked in {})", peer,
                               dir.empty() ? "../shared/peers" : dir));
      continue;
    }
    const std::string data = work_ + "/" + peer + "-data";
    const std::string mnt = work_ + "/" + peer + "-mnt";
    const std::string log = work_ + "/" + peer + ".log";
    Progress(fmt::format("starting peer {} with {} (installs its packages if missing)", peer, up));
    auto rc = RunCommand({"bash", up, data, mnt}, log, 900);
    AddCleanup([down, data, mnt, log] {
      RunCommand({"bash", down, data, mnt}, log, 120, {"PURGE=1"}).status().IgnoreError();
    });
    if (!rc.ok() || *rc != 0) {
      report_.Skip(
          "peers", peer,
          fmt::format("{} failed: {}", up, rc.ok() ? LastLines(log, 2) : rc.status().message()));
      continue;
    }
    // passthrough_fh mirrors "/", so its data directory is reached as MOUNT/<absolute DATA>.
    std::string bench_dir = mnt + "/ciuic-bench";
    std::string name = peer;
    if (peer == "fuse-passthrough") {
      std::error_code ec;
      bench_dir = mnt + std::filesystem::canonical(data, ec).string() + "/ciuic-bench";
      name = "passthrough";
    }
    // passthrough_fh reopens the backing file with O_DIRECT and hands it libfuse's buffers:
    // its direct IO is not a fair ceiling (the peers' README measures it buffered), so buffered.
    const bool passthrough = peer == "fuse-passthrough";
    auto t = NewPosixTarget(name, bench_dir, !passthrough, !passthrough);
    if (!t.ok()) {
      report_.Skip("peers", peer, t.status().message());
      continue;
    }
    report_.Note(fmt::format("peer {}: started with {} on loopback", peer, up));
    targets_.push_back(LiveTarget{std::move(*t), !passthrough});
  }
}

Status Driver::SetUpTargets() {
  bool in_process = false;  // a phase that runs on the targets
  for (const auto& p : o_.phases)
    in_process |= p == "seq" || p == "rand" || p == "latency" || p == "meta";
  bool need_cluster = false;
  for (const auto& t : o_.targets)
    need_cluster |= in_process && (t.kind == TargetKind::kCiuic || t.kind == TargetKind::kFuse);
  for (const auto& p : o_.phases)
    need_cluster |= p == "loader" || p == "checkpoint" || p == "tier" || p == "cache";
  if (need_cluster) {
    if (o_.cluster_file.empty()) {
      CIUIC_RETURN_IF_ERROR(StartLocalCluster());
    } else {
      CIUIC_ASSIGN_OR_RETURN(cluster_file_, FindClusterFile(o_.cluster_file));
      cold_url_ = o_.tier_cold;
    }
  }
  for (const auto& spec : o_.targets) {
    if (!in_process)
      break;  // scaling and the external phases bring their own
    LiveTarget lt;
    switch (spec.kind) {
      case TargetKind::kLocal: {
        std::string dir = spec.dir.empty() ? work_ + "/local" : spec.dir;
        CIUIC_ASSIGN_OR_RETURN(lt.target, NewPosixTarget("local", dir, false));
        break;
      }
      case TargetKind::kPath: {
        CIUIC_ASSIGN_OR_RETURN(
            lt.target,
            NewPosixTarget(spec.name, spec.dir + fmt::format("/ciuic-bench-{}", ::getpid()), true));
        lt.over_network = true;
        break;
      }
      case TargetKind::kCiuic: {
        CIUIC_ASSIGN_OR_RETURN(
            lt.target,
            NewCiuicTarget(cluster_file_, fmt::format("/{}-bench-{}", spec.name, ::getpid()),
                           spec.replicas));
        lt.over_network = true;
        break;
      }
      case TargetKind::kFuse: {
        Status s = MountFuse(&lt);
        if (!s.ok()) {
          report_.Skip("all", "fuse", s.message());
          Progress("fuse target skipped: " + s.message());
          continue;
        }
        break;
      }
    }
    if (!lt.target->direct_io())
      report_.Note(lt.target->name() + ": O_DIRECT refused, files are opened buffered");
    targets_.push_back(std::move(lt));
  }
  if (o_.with_peers && in_process)
    StartPeers();
  return Status::OK();
}

int Driver::Run() {
  int rc = 0;
  Status s = MakeWorkDir();
  if (!s.ok()) {
    std::fprintf(stderr, "ciuic-benchmark: %s\n", s.ToString().c_str());
    return 1;
  }
  nlohmann::json config = {{"phases", o_.phases},
                           {"size", o_.size},
                           {"block", o_.block},
                           {"clients", o_.clients},
                           {"threads", o_.threads},
                           {"qd", o_.qd},
                           {"batch", o_.batch},
                           {"rand_seconds", o_.rand_seconds},
                           {"latency_ops", o_.latency_ops},
                           {"meta_files", o_.meta_files},
                           {"meta_clients", o_.meta_clients},
                           {"runs", o_.runs},
                           {"scaling_oss", o_.scaling_oss},
                           {"scaling_clients", o_.scaling_clients},
                           {"scaling_mbit", o_.scaling_mbit},
                           {"scaling_per_oss", o_.scaling_per_oss},
                           {"tier_size", o_.tier_size},
                           {"cache_size", o_.cache_size},
                           {"tier_s3_samples", o_.tier_s3_samples},
                           {"tier_s3_sample_size", o_.tier_s3_sample_size},
                           {"tier_s3_workers", o_.tier_s3_workers},
                           {"quick", o_.quick},
                           {"fsync_every_write_phase", true}};
  report_.SetConfig(config);

  Limits limits;
  const bool data_phases = std::any_of(o_.phases.begin(), o_.phases.end(),
                                       [](const auto& p) { return p == "seq" || p == "rand"; });
  if (data_phases)
    Progress("measuring the physical limits (disk O_DIRECT, loopback TCP)");
  auto lim = !data_phases
                 ? Result<Limits>(Status::NotSupported("no seq or rand phase"))
                 : MeasureLimits(work_ + "/limits", o_.quick ? (256ull << 20) : (1ull << 30),
                                 std::max(2, o_.clients * o_.threads), [this] { Drop(); });
  if (lim.ok()) {
    limits = *lim;
    report_.SetLimits(limits.ToJson());
    Progress(
        fmt::format("limits: disk write {:.2f} GB/s, read {:.2f} GB/s, 4 KiB random {:.0f} "
                    "IOPS; loopback {:.2f} GB/s",
                    limits.disk_write_gbps, limits.disk_read_gbps, limits.disk_rand_iops,
                    limits.loopback_gbps));
  } else if (data_phases) {
    report_.Note("physical limits not measured: " + lim.status().message());
  }

  s = SetUpTargets();
  if (!s.ok()) {
    std::fprintf(stderr, "ciuic-benchmark: %s\n", s.ToString().c_str());
    return 1;
  }
  std::vector<std::string> names;
  std::map<std::string, bool> network;
  for (const auto& t : targets_) {
    names.push_back(t.target->name());
    network[t.target->name()] = t.over_network;
  }
  report_.SetTargets(names);
  Progress(fmt::format("targets: {}; phases: {}; {} run(s)", fmt::join(names, ", "),
                       fmt::join(o_.phases, ","), o_.runs));

  PhaseContext ctx;
  ctx.options = &o_;
  ctx.report = &report_;
  ctx.drop_caches = [this] { Drop(); };
  ctx.progress = [this](const std::string& l) { Progress(l); };
  using PhaseFn = Status (*)(Target&, const PhaseContext&);
  const std::vector<std::pair<std::string, PhaseFn>> in_process = {{"seq", RunSeqPhase},
                                                                   {"rand", RunRandPhase},
                                                                   {"latency", RunLatencyPhase},
                                                                   {"meta", RunMetaPhase}};
  std::map<std::string, bool> failed;  // phase/target pairs that failed once
  for (int run = 0; run < o_.runs; ++run) {
    ctx.run = run;
    for (const auto& [phase, fn] : in_process) {
      if (std::find(o_.phases.begin(), o_.phases.end(), phase) == o_.phases.end())
        continue;
      for (auto& t : targets_) {  // targets interleaved within a run
        const std::string key = phase + "/" + t.target->name();
        if (failed[key])
          continue;
        Progress(fmt::format("run {}/{}: {} on {}", run + 1, o_.runs, phase, t.target->name()));
        Drop();
        Status ps = fn(*t.target, ctx);
        if (!ps.ok()) {
          std::fprintf(stderr, "ciuic-benchmark: %s on %s failed: %s\n", phase.c_str(),
                       t.target->name().c_str(), ps.ToString().c_str());
          report_.Skip(phase, t.target->name(), "failed: " + ps.ToString());
          failed[key] = true;
          rc = 1;
        }
      }
    }
  }

  auto want = [&](const std::string& p) {
    return std::find(o_.phases.begin(), o_.phases.end(), p) != o_.phases.end();
  };
  if (want("scaling")) {
    ScalingOptions so;
    so.bin_dir = bin_dir_;
    so.work_dir = work_ + "/scaling";
    so.oss_counts = o_.scaling_oss;
    so.client_counts = o_.scaling_clients;
    so.mbit = o_.scaling_mbit;
    so.per_oss = o_.scaling_per_oss;
    so.runs = o_.runs;
    so.drop_caches = [this] { Drop(); };
    so.progress = [this](const std::string& l) { Progress(l); };
    std::error_code ec;
    fs::create_directories(so.work_dir, ec);
    Status ss = CheckScalingPrerequisites(so);
    if (!ss.ok()) {
      report_.Skip("scaling", "ciuic", ss.message());
      Progress("scaling skipped: " + ss.message());
    } else {
      ss = RunScalingPhase(so, &report_);
      if (!ss.ok()) {
        std::fprintf(stderr, "ciuic-benchmark: scaling failed: %s\n", ss.ToString().c_str());
        report_.Skip("scaling", "ciuic", "failed: " + ss.ToString());
        rc = 1;
      }
    }
  }
  if (want("tier")) {
    if (cold_url_.empty()) {
      report_.Skip("tier", "ciuic", "--cluster given without --tier-cold URL");
      Progress("tier skipped: --cluster given without --tier-cold URL");
    }
    for (int run = 0; run < o_.runs && !cold_url_.empty(); ++run) {
      TierOptions to;
      to.cluster_file = cluster_file_;
      to.cold_url = cold_url_;
      to.size = o_.tier_size;
      to.run = run;
      to.drop_caches = [this] { Drop(); };
      to.progress = [this](const std::string& l) { Progress(l); };
      Progress(fmt::format("run {}/{}: tier on ciuic", run + 1, o_.runs));
      Status ts = RunTierPhase(to, &report_);
      if (!ts.ok()) {
        std::fprintf(stderr, "ciuic-benchmark: tier failed: %s\n", ts.ToString().c_str());
        report_.Skip("tier", "ciuic", "failed: " + ts.ToString());
        rc = 1;
        break;
      }
    }
    if (o_.tier_s3_samples > 0) {
      Status ts = RunTierS3();
      if (!ts.ok()) {
        std::fprintf(stderr, "ciuic-benchmark: tier (S3 loaders) failed: %s\n",
                     ts.ToString().c_str());
        report_.Skip("tier", "ciuic", "failed: " + ts.ToString());
        rc = 1;
      }
    }
  }
  if (want("cache")) {
    for (int run = 0; run < o_.runs; ++run) {
      CacheOptions co;
      co.cluster_file = cluster_file_;
      co.work_dir = work_;
      co.size = o_.cache_size;
      co.run = run;
      if (o_.quick)
        co.rand_seconds = 1;
      co.drop_caches = [this] { Drop(); };
      co.progress = [this](const std::string& l) { Progress(l); };
      Progress(fmt::format("run {}/{}: cache on ciuic", run + 1, o_.runs));
      Status cs = RunCachePhase(co, &report_);
      if (!cs.ok()) {
        std::fprintf(stderr, "ciuic-benchmark: cache failed: %s\n", cs.ToString().c_str());
        report_.Skip("cache", "ciuic", "failed: " + cs.ToString());
        rc = 1;
        break;
      }
    }
  }
  for (const std::string phase : {"loader", "checkpoint"}) {
    if (!want(phase))
      continue;
    ExternalPhase ep;
    ep.phase = phase;
    ep.script = SourceRoot() + "/bench/phase_" + phase + ".py";
    ep.python_path = bin_dir_ + "/../python";
    ep.cluster_file = cluster_file_;
    ep.local_dir = work_ + "/" + phase + "-local";
    ep.json_out = work_ + "/" + phase + ".json";
    ep.log_path = work_ + "/" + phase + ".log";
    ep.quick = o_.quick;
    std::error_code ec;
    fs::create_directories(ep.local_dir, ec);
    Progress(fmt::format("{}: {}", phase, ep.script));
    Drop();
    Status es = RunExternalPhase(ep, &report_);
    if (!es.ok()) {
      std::fprintf(stderr, "ciuic-benchmark: %s failed: %s\n", phase.c_str(),
                   es.ToString().c_str());
      report_.Skip(phase, "", "failed: " + es.ToString());
      rc = 1;
    }
  }

  for (auto& t : targets_) {
    std::string root = t.target->Path("");
    root.pop_back();                          // the trailing '/'
    t.target->RemoveAll(root).IgnoreError();  // best-effort cleanup of our working dir
  }
  if (data_phases && lim.ok()) {
    // Measured again at the end; the higher of the two counts (the machine may have been busy
    // during one of them, and a limit measured too low would flag honest results).
    Progress("measuring the physical limits again");
    auto again = MeasureLimits(work_ + "/limits", o_.quick ? (256ull << 20) : (1ull << 30),
                               std::max(2, o_.clients * o_.threads), [this] { Drop(); });
    if (again.ok()) {
      limits.disk_write_gbps = std::max(limits.disk_write_gbps, again->disk_write_gbps);
      limits.disk_read_gbps = std::max(limits.disk_read_gbps, again->disk_read_gbps);
      limits.disk_rand_iops = std::max(limits.disk_rand_iops, again->disk_rand_iops);
      limits.loopback_gbps = std::max(limits.loopback_gbps, again->loopback_gbps);
      report_.SetLimits(limits.ToJson());
    }
  }
  FlagCacheInflated(report_, limits, network);
  if (drops_failed_ == 0 && drops_ok_ > 0) {
    report_.Note(fmt::format(
        "page cache dropped (sync + drop_caches) before every phase ({} times); every write "
        "phase fsynced; O_DIRECT on path targets where accepted",
        drops_ok_));
  } else if (drops_ok_ + drops_failed_ > 0) {
    report_.Note(fmt::format(
        "page cache could NOT be dropped {} of {} times (needs root: /proc/sys/vm/drop_caches); "
        "path targets use O_DIRECT where accepted; read figures above the disk limit are flagged",
        drops_failed_, drops_ok_ + drops_failed_));
  }
  report_.PrintTable(stdout);
  std::fflush(stdout);
  if (!o_.json_path.empty()) {
    std::ofstream out(o_.json_path);
    out << report_.ToJson().dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "ciuic-benchmark: cannot write %s\n", o_.json_path.c_str());
      rc = 1;
    }
  }
  if (!o_.charts_dir.empty()) {
    auto files = report_.WriteCharts(o_.charts_dir);
    if (!files.ok()) {
      std::fprintf(stderr, "ciuic-benchmark: charts: %s\n", files.status().ToString().c_str());
    } else {
      for (const auto& f : *files)
        Progress("chart: " + f);
    }
  }
  return rc;
}

}  // namespace

bool DropCaches() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f)
    return false;
  f << "3\n";
  f.flush();
  return static_cast<bool>(f);
}

int RunBenchmark(const std::vector<std::string>& args) {
  auto o = ParseOptions(args);
  if (!o.ok()) {
    std::fprintf(stderr, "ciuic-benchmark: %s (see --help)\n", o.status().message().c_str());
    return 2;
  }
  if (o->show_help) {
    std::fputs(o->help_text.c_str(), stdout);
    return 0;
  }
  int rc;
  {
    Driver d(std::move(*o));
    rc = d.Run();
  }
  RunAllCleanups();
  return rc;
}

}  // namespace ciuic::bench
