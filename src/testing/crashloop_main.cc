// ciuic-crashloop: crashes servers over and over under a mixed data and metadata workload and
// verifies, after each crash, everything the cluster acknowledged (AckedWorkload). Two modes:
//
//   power  an in-process MiniCluster in power-loss mode: each cycle cuts the power of the whole
//          cluster, of one OSS or of the MDS, dropping every byte no fsync made durable;
//          acknowledged = fsync (or FsyncDir) returned OK.
//   kill   real ciuic-mds / ciuic-oss processes started by `ciuic cluster up`: each cycle sends
//          SIGKILL to a random server and restarts it with `ciuic cluster up` (which starts
//          the servers that are not running). The page cache survives, so acknowledged = any
//          call that returned OK.
//
// Usage: ciuic-crashloop power|kill [--cycles N] [--seconds S] [--seed X] [--oss N]
//                                   [--generation K] [--max-file-bytes B] [--torn]
//                                   [--victim any|whole|oss|mds] [--bin-dir DIR] [--dir DIR]
//                                   [--replicas R] [--outage-every K] [--quiet]
// With --replicas R > 1 (kill mode, --victim oss) every object has R copies on distinct OSSes,
// so a killed OSS must cost no operation at all: the loop also fails when one did. With
// --outage-every K, every K-th killed OSS stays down 4 s (past the MDS's dead time) while the
// workload goes on, so its copies leave their chains and must catch up when it returns; the loop
// ends by waiting for every chain to serve again, then kills each OSS in turn and verifies
// everything from the copies left.
// Every K cycles the workload starts over in a new directory (so a verification stays short);
// the older directories are verified once more at the end. Prints one line per cycle and a
// summary; exits 1 when anything acknowledged was lost or reported corrupt, or when the loop
// could not run (a server that does not come back, a workload that makes no progress).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "ciuic/client.h"
#include "testing/acked_workload.h"
#include "testing/mini_cluster.h"

namespace ciuic::testing {
namespace {

namespace fs = std::filesystem;

struct Args {
  std::string mode;
  int cycles = 100;
  int seconds = 0;  // 0: no time bound
  uint64_t seed = 0;
  int num_oss = 2;
  int generation = 10;
  uint32_t max_file_bytes = 128 * 1024;
  bool torn = false;
  bool quiet = false;
  int outage_every = 0;
  std::string victim = "any";  // any, whole, oss, mds
  int replicas = 1;
  std::string bin_dir;
  std::string dir;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "ciuic-crashloop: %s\nusage: ciuic-crashloop power|kill [--cycles N] [--seconds S] "
               "[--seed X] [--oss N] [--generation K] [--max-file-bytes B] [--torn] [--victim "
               "any|whole|oss|mds] [--bin-dir DIR] [--dir DIR] [--replicas R] [--outage-every K] "
               "[--quiet]\n",
               why.c_str());
  std::exit(2);
}

long ParseNumber(const std::string& flag, const char* v, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n < lo || n > hi)
    Usage(fmt::format("{} wants a number in {}..{}, not '{}'", flag, lo, hi, v));
  return n;
}

Args Parse(int argc, char** argv) {
  Args a;
  if (argc < 2)
    Usage("missing mode");
  a.mode = argv[1];
  if (a.mode != "power" && a.mode != "kill")
    Usage(fmt::format("unknown mode '{}' (power or kill)", a.mode));
  for (int i = 2; i < argc; ++i) {
    const std::string f = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc)
        Usage(f + " needs a value");
      return argv[++i];
    };
    if (f == "--cycles") {
      a.cycles = static_cast<int>(ParseNumber(f, value(), 1, 1000000));
    } else if (f == "--seconds") {
      a.seconds = static_cast<int>(ParseNumber(f, value(), 1, 86400 * 7));
    } else if (f == "--seed") {
      a.seed = static_cast<uint64_t>(ParseNumber(f, value(), 0, 0x7fffffffffffffff));
    } else if (f == "--oss") {
      a.num_oss = static_cast<int>(ParseNumber(f, value(), 1, 16));
    } else if (f == "--generation") {
      a.generation = static_cast<int>(ParseNumber(f, value(), 1, 1000000));
    } else if (f == "--max-file-bytes") {
      a.max_file_bytes = static_cast<uint32_t>(ParseNumber(f, value(), 0, 64 << 20));
    } else if (f == "--victim") {
      a.victim = value();
      if (a.victim != "any" && a.victim != "whole" && a.victim != "oss" && a.victim != "mds")
        Usage(fmt::format("--victim wants any, whole, oss or mds, not '{}'", a.victim));
    } else if (f == "--replicas") {
      a.replicas = static_cast<int>(ParseNumber(f, value(), 1, 8));
    } else if (f == "--torn") {
      a.torn = true;
    } else if (f == "--outage-every") {
      a.outage_every = static_cast<int>(ParseNumber(f, value(), 1, 1000000));
    } else if (f == "--quiet") {
      a.quiet = true;
    } else if (f == "--bin-dir") {
      a.bin_dir = value();
    } else if (f == "--dir") {
      a.dir = value();
    } else {
      Usage(fmt::format("unknown option '{}'", f));
    }
  }
  if (a.seed == 0)
    a.seed = std::random_device{}() | 1;
  if (a.mode == "kill" && a.bin_dir.empty()) {
    // Next to this binary's build tree: BUILD/src/testing/ciuic-crashloop -> BUILD/apps.
    std::error_code ec;
    fs::path self = fs::read_symlink("/proc/self/exe", ec);
    fs::path guess = self.parent_path().parent_path().parent_path() / "apps";
    if (ec || !fs::exists(guess / "ciuic"))
      Usage("kill mode needs --bin-dir DIR (where ciuic, ciuic-mds and ciuic-oss are)");
    a.bin_dir = guess.string();
  }
  if (a.replicas > a.num_oss)
    Usage(fmt::format("--replicas {} needs at least that many OSSes (--oss)", a.replicas));
  if (a.replicas > 1 && (a.mode != "kill" || a.victim != "oss"))
    Usage("--replicas above 1 goes with kill mode and --victim oss");
  if (a.mode == "power" && a.torn)
    std::printf("torn tails: on (the MDS's unsynced WAL tail is torn at a random byte)\n");
  return a;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Short bounds: IO that a crash cut off fails within a few seconds instead of retrying for 30.
// With replicas the IO must ride the failover out instead (the MDS changes chains after 3 s).
ClientOptions ShortBounds(ClientOptions o, int replicas = 1) {
  o.uid = 0;
  o.gid = 0;
  o.ost_retry_ms = replicas > 1 ? 30000 : 1000;
  o.io_timeout_ms = replicas > 1 ? 10000 : 3000;
  o.mds_timeout_ms = 3000;
  return o;
}

// What each mode provides: a client, the crash of cycle `n`, and the recovery from it.
class Target {
 public:
  virtual ~Target() = default;
  virtual Status Start() = 0;
  virtual Result<std::unique_ptr<Client>> Connect() = 0;
  // Crashes something; returns what (for the log).
  virtual Result<std::string> Crash(std::mt19937_64& rng, uint64_t cycle) = 0;
  virtual Status Recover() = 0;
  // kill -9 of OSS `i` without a restart (Recover brings it back).
  virtual Status KillOss(int) { return Status::NotSupported("no single OSS kills here"); }
  // Stops the cluster; `keep`: leave its data and logs for a look (the loop failed).
  virtual Status Stop(bool keep) = 0;
};

class PowerTarget : public Target {
 public:
  explicit PowerTarget(const Args& a) : a_(a) {}

  Status Start() override {
    MiniClusterOptions o;
    o.power_loss = true;
    o.num_oss = a_.num_oss;
    CIUIC_ASSIGN_OR_RETURN(cluster_, MiniCluster::Start(o));
    return Status::OK();
  }
  Result<std::unique_ptr<Client>> Connect() override {
    return cluster_->NewClient(ShortBounds(ClientOptions{}));
  }
  Result<std::string> Crash(std::mt19937_64& rng, uint64_t cycle) override {
    int victim = static_cast<int>(rng() % static_cast<uint64_t>(a_.num_oss + 2));
    if (a_.victim == "whole")
      victim = 0;
    else if (a_.victim == "oss")
      victim = 1 + victim % a_.num_oss;
    else if (a_.victim == "mds")
      victim = a_.num_oss + 1;
    const uint64_t torn = a_.torn && rng() % 2 == 0 ? a_.seed + cycle : 0;
    whole_ = victim == 0;
    if (whole_) {
      CIUIC_RETURN_IF_ERROR(cluster_->CutPower(torn));
      return std::string("power cut of the whole cluster");
    }
    if (victim <= a_.num_oss) {
      CIUIC_RETURN_IF_ERROR(cluster_->PowerCycleOss(victim - 1));
      return fmt::format("power cut of oss{}", victim - 1);
    }
    CIUIC_RETURN_IF_ERROR(cluster_->PowerCycleMds(torn));
    return std::string("power cut of the mds");
  }
  Status Recover() override {
    if (whole_)
      return cluster_->RestorePower();
    return cluster_->WaitForOsts(cluster_->num_osts());
  }
  Status Stop(bool) override {
    cluster_.reset();
    return Status::OK();
  }

 private:
  const Args& a_;
  std::unique_ptr<MiniCluster> cluster_;
  bool whole_ = false;
};

class KillTarget : public Target {
 public:
  explicit KillTarget(const Args& a) : a_(a) {}

  Status Start() override {
    if (a_.dir.empty()) {
      char tmpl[] = "/tmp/ciuic-crashloop-XXXXXX";
      if (::mkdtemp(tmpl) == nullptr)
        return Status::FromErrno(errno, "mkdtemp");
      dir_ = tmpl;
      remove_dir_ = true;
    } else {
      dir_ = a_.dir;
    }
    log_ = dir_ + "/crashloop-cli.log";
    return Ciuic({"cluster", "up", dir_, "--oss", std::to_string(a_.num_oss), "--osts-per-oss",
                  a_.replicas > 1 ? "1" : "2", "--replicas", std::to_string(a_.replicas),
                  "--timeout", "60"});
  }
  Result<std::unique_ptr<Client>> Connect() override {
    ClientOptions o;
    o.cluster_file = dir_ + "/cluster.conf";
    return Client::Connect(ShortBounds(o, a_.replicas));
  }
  Result<std::string> Crash(std::mt19937_64& rng, uint64_t) override {
    int victim = static_cast<int>(rng() % static_cast<uint64_t>(a_.num_oss + 1));
    if (a_.victim == "mds")
      victim = a_.num_oss;
    else if (a_.victim == "oss")
      victim %= a_.num_oss;
    const std::string name = victim == a_.num_oss ? "mds" : fmt::format("oss{}", victim);
    CIUIC_RETURN_IF_ERROR(Kill(name));
    return fmt::format("kill -9 of {}", name);
  }
  Status KillOss(int i) override { return Kill(fmt::format("oss{}", i)); }
  Status Kill(const std::string& name) {
    std::ifstream in(fmt::format("{}/run/{}.pid", dir_, name));
    long pid = 0;
    if (!(in >> pid) || pid <= 0)
      return Status::NotFound(fmt::format("no pid file for {} in {}/run", name, dir_));
    if (::kill(static_cast<pid_t>(pid), SIGKILL) != 0)
      return Status::FromErrno(errno, fmt::format("kill -9 {} (pid {})", name, pid));
    // Gone when it is a zombie or reaped (its sockets and files are closed by then).
    const int64_t deadline = NowMs() + 10000;
    while (NowMs() < deadline && !Dead(static_cast<pid_t>(pid)))
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!Dead(static_cast<pid_t>(pid)))
      return Status::TimedOut(fmt::format("{} (pid {}) outlived kill -9 by 10 s", name, pid));
    return Status::OK();
  }
  Status Recover() override { return Ciuic({"cluster", "up", dir_, "--timeout", "60"}); }
  Status Stop(bool keep) override {
    Status s = Ciuic({"cluster", "down", dir_});
    if (keep) {
      std::printf("cluster directory kept for a look: %s\n", dir_.c_str());
    } else if (s.ok() && remove_dir_) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
    return s;
  }

 private:
  static bool Dead(pid_t pid) {
    if (::kill(pid, 0) != 0)
      return true;
    std::ifstream st(fmt::format("/proc/{}/stat", pid));
    std::string s;
    std::getline(st, s);
    const auto rp = s.rfind(')');
    return rp != std::string::npos && rp + 2 < s.size() && s[rp + 2] == 'Z';
  }

  // Runs `ciuic ARGS...` with its output appended to the log; on failure the error names the
  // command and quotes its last line.
  Status Ciuic(const std::vector<std::string>& args) {
    const std::string bin = a_.bin_dir + "/ciuic";
    const pid_t pid = ::fork();
    if (pid < 0)
      return Status::FromErrno(errno, "fork");
    const std::string out_path = log_ + ".last";
    if (pid == 0) {
      FILE* out = std::fopen(out_path.c_str(), "w");
      if (out != nullptr) {
        ::dup2(::fileno(out), 1);
        ::dup2(::fileno(out), 2);
      }
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(bin.c_str()));
      for (const auto& s : args)
        argv.push_back(const_cast<char*>(s.c_str()));
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      std::fprintf(stderr, "cannot run %s: %s\n", bin.c_str(), std::strerror(errno));
      ::_exit(127);
    }
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    // Its output, kept in the log; an error quotes its "ciuic: ..." line (else its last one).
    std::ifstream in(out_path);
    std::ofstream log(log_, std::ios::app);
    std::string line, last, error;
    while (std::getline(in, line)) {
      log << line << "\n";
      if (!line.empty())
        last = line;
      if (line.rfind("ciuic: ", 0) == 0)
        error = line;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
      return Status::OK();
    std::string cmd = "ciuic";
    for (const auto& s : args)
      cmd += " " + s;
    return Status::Internal(
        fmt::format("`{}` failed: {} (its output: {})", cmd, error.empty() ? last : error, log_));
  }

  const Args& a_;
  std::string dir_;
  std::string log_;
  bool remove_dir_ = false;
};

struct Totals {
  uint64_t cycles = 0;
  uint64_t ops = 0;
  uint64_t acked = 0;
  uint64_t files = 0;
  uint64_t bytes = 0;
  uint64_t losses = 0;
  uint64_t false_corruptions = 0;
};

void Add(Totals* t, const AckedWorkloadStats& s) {
  t->files += s.files;
  t->bytes += s.bytes_verified;
  t->losses += s.losses;
  t->false_corruptions += s.false_corruptions;
}

void PrintProblems(const AckedWorkloadStats& s) {
  for (const auto& p : s.problems)
    std::printf("  problem: %s\n", p.c_str());
}

// Waits until every chain has all its members serving (resync done), at most `timeout_ms`.
Status WaitAllServing(Target* target, int timeout_ms) {
  const int64_t deadline = NowMs() + timeout_ms;
  std::string last;
  while (NowMs() < deadline) {
    auto c = target->Connect();
    if (c.ok()) {
      auto chains = (*c)->Chains();
      if (chains.ok()) {
        size_t behind = 0;
        for (const auto& ch : *chains) {
          for (const auto& m : ch.members)
            behind += m.state == "serving" ? 0 : 1;
        }
        if (behind == 0)
          return Status::OK();
        last = fmt::format("{} member(s) not serving", behind);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return Status::TimedOut(
      fmt::format("chains did not all serve again within {} s ({})", timeout_ms / 1000, last));
}

Status CheckEveryCopy(const Args& a,
                      Target* target,
                      std::vector<std::unique_ptr<AckedWorkload>>& generations) {
  const int64_t t0 = NowMs();
  CIUIC_RETURN_IF_ERROR(WaitAllServing(target, 120000));
  std::printf("every chain serving %.1f s after the last cycle\n",
              static_cast<double>(NowMs() - t0) / 1000.0);
  for (int i = 0; i < a.num_oss; ++i) {
    CIUIC_RETURN_IF_ERROR(target->KillOss(i));
    auto v = target->Connect();
    if (!v.ok())
      return v.status();
    Totals t;
    for (auto& g : generations) {
      AckedWorkloadStats s = g->Verify(**v);
      Add(&t, s);
      PrintProblems(s);
    }
    v->reset();
    std::printf("with oss%d down: %lu files, %lu bytes, losses %lu, false corruptions %lu\n", i,
                static_cast<unsigned long>(t.files), static_cast<unsigned long>(t.bytes),
                static_cast<unsigned long>(t.losses),
                static_cast<unsigned long>(t.false_corruptions));
    if (t.losses != 0 || t.false_corruptions != 0) {
      return Status::Corruption(
          fmt::format("with oss{} down, the other copies lack acknowledged data", i));
    }
    CIUIC_RETURN_IF_ERROR(target->Recover());
    CIUIC_RETURN_IF_ERROR(WaitAllServing(target, 120000));
  }
  return Status::OK();
}

int Main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  std::printf("crashloop %s: seed %lu, up to %d cycles%s, %d OSS\n", a.mode.c_str(),
              static_cast<unsigned long>(a.seed), a.cycles,
              a.seconds > 0 ? fmt::format(" or {} s", a.seconds).c_str() : "", a.num_oss);
  std::fflush(stdout);
  std::unique_ptr<Target> target;
  if (a.mode == "power") {
    target = std::make_unique<PowerTarget>(a);
  } else {
    target = std::make_unique<KillTarget>(a);
  }
  if (Status s = target->Start(); !s.ok()) {
    std::fprintf(stderr, "ciuic-crashloop: cannot start the cluster: %s\n", s.ToString().c_str());
    return 1;
  }
  std::mt19937_64 rng(a.seed);
  std::vector<std::unique_ptr<AckedWorkload>> generations;
  Totals total;
  Status fatal;
  const int64_t start = NowMs();
  for (int cycle = 0; cycle < a.cycles && fatal.ok(); ++cycle) {
    if (a.seconds > 0 && NowMs() - start >= static_cast<int64_t>(a.seconds) * 1000)
      break;
    if (cycle % a.generation == 0) {
      AckedWorkloadOptions o;
      o.root = fmt::format("/crashloop/g{}", generations.size());
      o.seed = a.seed + static_cast<uint64_t>(cycle);
      o.max_file_bytes = a.max_file_bytes;
      o.process_crash = a.mode == "kill";
      generations.push_back(std::make_unique<AckedWorkload>(o));
    }
    AckedWorkload& wl = *generations.back();
    auto c = target->Connect();
    if (!c.ok()) {
      fatal = c.status();
      break;
    }
    // Run until the workload has some acknowledged operations in hand, then crash mid-flight.
    const uint64_t want = wl.acked() + 10 + rng() % 40;
    AckedWorkloadStats run;
    std::thread t([&] { run = wl.Run(**c); });
    const int64_t deadline = NowMs() + 60000;
    while (wl.acked() < want && NowMs() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // polling the workload
    const bool progressed = wl.acked() >= want;
    Result<std::string> what = progressed ? target->Crash(rng, static_cast<uint64_t>(cycle))
                                          : Result<std::string>(std::string("no crash"));
    // kill mode restarts the victim while the workload still runs (its retries may succeed);
    // power mode's whole-cluster cut restores power only after the workload stopped.
    Status back = Status::OK();
    if (what.ok() && a.mode == "kill") {
      if (a.outage_every > 0 && cycle % a.outage_every == a.outage_every - 1)
        std::this_thread::sleep_for(std::chrono::milliseconds(4000));  // past the dead time
      back = target->Recover();
    }
    wl.Stop();
    t.join();
    c->reset();
    if (a.replicas > 1 && run.failed > 0) {
      PrintProblems(run);
      fatal = Status::IoError(
          fmt::format("cycle {}: {} operation(s) failed although every object has {} copies", cycle,
                      run.failed, a.replicas));
      break;
    }
    if (!progressed) {
      PrintProblems(run);
      fatal = Status::TimedOut(
          fmt::format("cycle {}: the workload acknowledged too little in 60 s", cycle));
      break;
    }
    if (!what.ok()) {
      fatal = what.status();
      break;
    }
    if (a.mode != "kill")
      back = target->Recover();
    if (!back.ok()) {
      fatal = back;
      break;
    }
    auto v = target->Connect();
    if (!v.ok()) {
      fatal = v.status();
      break;
    }
    AckedWorkloadStats s = wl.Verify(**v);
    ++total.cycles;
    total.ops += run.ops;
    total.acked += run.acked;
    Add(&total, s);
    if (!a.quiet || s.losses != 0 || s.false_corruptions != 0) {
      std::printf(
          "cycle %d: %s | ops %lu acked %lu | verified %lu files, %lu bytes | losses %lu, "
          "false corruptions %lu\n",
          cycle, what->c_str(), static_cast<unsigned long>(run.ops),
          static_cast<unsigned long>(run.acked), static_cast<unsigned long>(s.files),
          static_cast<unsigned long>(s.bytes_verified), static_cast<unsigned long>(s.losses),
          static_cast<unsigned long>(s.false_corruptions));
    }
    PrintProblems(s);
    std::fflush(stdout);
  }
  // Everything acknowledged in every generation, once more at the end.
  Totals final_check;
  if (fatal.ok() && !generations.empty()) {
    auto v = target->Connect();
    if (!v.ok()) {
      fatal = v.status();
    } else {
      for (auto& g : generations) {
        AckedWorkloadStats s = g->Verify(**v);
        Add(&final_check, s);
        PrintProblems(s);
      }
    }
    std::printf(
        "final check of %zu generation(s): %lu files, %lu bytes, losses %lu, false "
        "corruptions %lu\n",
        generations.size(), static_cast<unsigned long>(final_check.files),
        static_cast<unsigned long>(final_check.bytes),
        static_cast<unsigned long>(final_check.losses),
        static_cast<unsigned long>(final_check.false_corruptions));
    total.losses += final_check.losses;
    total.false_corruptions += final_check.false_corruptions;
  }
  // Replicated: every copy caught up. Once every chain serves again, each OSS in turn is killed
  // and everything acknowledged is read from the copies left.
  if (fatal.ok() && a.replicas > 1 && !generations.empty())
    fatal = CheckEveryCopy(a, target.get(), generations);
  const double secs = static_cast<double>(NowMs() - start) / 1000.0;
  const bool failed = !fatal.ok() || total.losses != 0 || total.false_corruptions != 0;
  Status stopped = target->Stop(failed);
  std::printf(
      "crashloop %s: %lu cycles in %.0f s, %lu ops (%lu acknowledged), %lu files and %lu bytes "
      "verified, losses %lu, false corruptions %lu\n",
      a.mode.c_str(), static_cast<unsigned long>(total.cycles), secs,
      static_cast<unsigned long>(total.ops), static_cast<unsigned long>(total.acked),
      static_cast<unsigned long>(total.files), static_cast<unsigned long>(total.bytes),
      static_cast<unsigned long>(total.losses),
      static_cast<unsigned long>(total.false_corruptions));
  if (!fatal.ok()) {
    std::fprintf(stderr, "ciuic-crashloop: %s\n", fatal.ToString().c_str());
    return 1;
  }
  if (!stopped.ok())
    std::fprintf(stderr, "ciuic-crashloop: stopping the cluster: %s\n", stopped.ToString().c_str());
  return total.losses == 0 && total.false_corruptions == 0 && total.cycles > 0 ? 0 : 1;
}

}  // namespace
}  // namespace ciuic::testing

int main(int argc, char** argv) {
  return ciuic::testing::Main(argc, argv);
}
