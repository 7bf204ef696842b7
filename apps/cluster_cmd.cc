#include "cluster_cmd.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "ciuic/client.h"
#include "common/config.h"

namespace ciuic::cli {
namespace fs = std::filesystem;
namespace {

constexpr const char* kShapeFile = "cluster.shape";

struct Shape {
  int num_oss = 2;
  int osts_per_oss = 2;
  std::string io_engine = "auto";
  // The cold tier's URL (HSM); "" = the default, file://<cluster dir>/cold.
  std::string cold_tier;
  // HSM policy process (`ciuic hsm sweep --every`): seconds between passes, 0 = none.
  int hsm_every_s = 0;
  double hsm_high = 90;
  double hsm_low = 80;
  std::string hsm_default = "release-at-watermark";
  // Copies of each object of files whose layout does not say (ciuic-mds --default-replicas).
  int replicas = 1;
  // Bandwidth bound of each OSS's resync copies, MiB/s (ciuic-oss --resync-mbps); 0: none.
  int resync_mbps = 128;
};

void Fail(const std::string& msg) {
  fmt::print(stderr, "ciuic: {}\n", msg);
}

std::string SelfDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

// Finds a sibling binary (ciuic-mds, ciuic-oss) next to this executable, else on PATH.
std::string FindBinary(const std::string& name) {
  fs::path p = fs::path(SelfDir()) / name;
  if (::access(p.c_str(), X_OK) == 0)
    return p.string();
  return name;
}

Result<uint16_t> PickFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return Status::FromErrno(errno, "socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    int e = errno;
    ::close(fd);
    return Status::FromErrno(e, "cannot find a free port");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

bool PortFree(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

std::map<std::string, std::string> ReadKv(const fs::path& p) {
  std::map<std::string, std::string> kv;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (line.empty() || line[0] == '#' || eq == std::string::npos)
      continue;
    auto trim = [](std::string s) {
      s.erase(0, s.find_first_not_of(" \t"));
      s.erase(s.find_last_not_of(" \t\r") + 1);
      return s;
    };
    kv[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return kv;
}

Result<Shape> LoadShape(const fs::path& dir) {
  fs::path p = dir / kShapeFile;
  if (!fs::exists(p))
    return Status::NotFound("no " + p.string());
  auto kv = ReadKv(p);
  Shape s;
  try {
    s.num_oss = std::stoi(kv.at("num_oss"));
    s.osts_per_oss = std::stoi(kv.at("osts_per_oss"));
    if (kv.count("io_engine"))
      s.io_engine = kv["io_engine"];
    if (kv.count("cold_tier"))
      s.cold_tier = kv["cold_tier"];
    if (kv.count("hsm_every_s"))
      s.hsm_every_s = std::stoi(kv["hsm_every_s"]);
    if (kv.count("hsm_high"))
      s.hsm_high = std::stod(kv["hsm_high"]);
    if (kv.count("hsm_low"))
      s.hsm_low = std::stod(kv["hsm_low"]);
    if (kv.count("hsm_default"))
      s.hsm_default = kv["hsm_default"];
    if (kv.count("replicas"))
      s.replicas = std::stoi(kv["replicas"]);
    if (kv.count("resync_mbps"))
      s.resync_mbps = std::stoi(kv["resync_mbps"]);
  } catch (const std::exception&) {
    return Status::InvalidArgument(p.string() + " is malformed");
  }
  if (s.num_oss < 1 || s.osts_per_oss < 1 || s.resync_mbps < 0)
    return Status::InvalidArgument(p.string() + " is malformed");
  return s;
}

Status SaveShape(const fs::path& dir, const Shape& s) {
  std::ofstream out(dir / kShapeFile, std::ios::trunc);
  out << "# shape of the local cluster started by `ciuic cluster up`\n"
      << "num_oss = " << s.num_oss << "\nosts_per_oss = " << s.osts_per_oss
      << "\nio_engine = " << s.io_engine << "\n";
  if (!s.cold_tier.empty())
    out << "cold_tier = " << s.cold_tier << "\n";
  out << "hsm_every_s = " << s.hsm_every_s << "\nhsm_high = " << s.hsm_high
      << "\nhsm_low = " << s.hsm_low << "\nhsm_default = " << s.hsm_default << "\n"
      << "replicas = " << s.replicas << "\nresync_mbps = " << s.resync_mbps << "\n";
  if (!out)
    return Status::IoError("cannot write " + (dir / kShapeFile).string());
  return Status::OK();
}

pid_t ReadPid(const fs::path& p) {
  std::ifstream in(p);
  long pid = 0;
  if (!(in >> pid) || pid <= 0)
    return 0;
  return static_cast<pid_t>(pid);
}

// A zombie (state Z in /proc/PID/stat) is not alive: its process has exited.
bool IsZombie(pid_t pid) {
  std::ifstream st(fmt::format("/proc/{}/stat", pid));
  std::string s;
  std::getline(st, s);
  auto rp = s.rfind(')');
  return rp != std::string::npos && rp + 2 < s.size() && s[rp + 2] == 'Z';
}

// True when `pid` is alive and is one of our server binaries (pid files can go stale).
bool IsOurProcess(pid_t pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0)
    return false;
  std::ifstream in(fmt::format("/proc/{}/cmdline", pid));
  std::string cmd;
  std::getline(in, cmd, '\0');
  if (cmd.find("ciuic-mds") == std::string::npos && cmd.find("ciuic-oss") == std::string::npos) {
    return false;
  }
  return !IsZombie(pid);
}

std::string LastLines(const fs::path& p, int n) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty())
      lines.push_back(line);
  }
  std::string out;
  for (size_t i = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0; i < lines.size();
       ++i) {
    out += (out.empty() ? "" : " | ") + lines[i];
  }
  return out;
}

// Starts `argv` as a daemon (own session, stdio to `out_log`); returns its pid.
Result<pid_t> Spawn(const std::vector<std::string>& argv, const fs::path& out_log) {
  pid_t pid = ::fork();
  if (pid < 0)
    return Status::FromErrno(errno, "fork");
  if (pid == 0) {
    ::setsid();
    int devnull = ::open("/dev/null", O_RDONLY);
    int log = ::open(out_log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (devnull >= 0)
      ::dup2(devnull, 0);
    if (log >= 0) {
      ::dup2(log, 1);
      ::dup2(log, 2);
    }
    for (int fd = 3; fd < 1024; ++fd)
      ::close(fd);
    std::vector<char*> args;
    for (const auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "cannot execute %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  return pid;
}

Status WritePid(const fs::path& p, pid_t pid) {
  std::ofstream out(p, std::ios::trunc);
  out << pid << "\n";
  return out ? Status::OK() : Status::IoError("cannot write " + p.string());
}

// Waits until `port_file` appears (the server is serving) or the process dies.
Status WaitForStart(pid_t pid,
                    const fs::path& port_file,
                    const fs::path& log,
                    const std::string& what,
                    int timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (fs::exists(port_file))
      return Status::OK();
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) {
      return Status::Unavailable(fmt::format("{} exited at start: {}", what, LastLines(log, 1)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::TimedOut(
      fmt::format("{} did not start within {} s (see {})", what, timeout_s, log.string()));
}

std::vector<std::pair<std::string, fs::path>> PidFiles(const fs::path& dir, const Shape& shape) {
  std::vector<std::pair<std::string, fs::path>> out;
  for (int i = 0; i < shape.num_oss; ++i) {
    out.emplace_back(fmt::format("oss{}", i), dir / "run" / fmt::format("oss{}.pid", i));
  }
  out.emplace_back("mds", dir / "run" / "mds.pid");
  return out;
}

// The HSM policy process of the cluster: `ciuic ... hsm sweep --every`.
fs::path PolicyPidFile(const fs::path& dir) {
  return dir / "run" / "policy.pid";
}

bool IsPolicyProcess(pid_t pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0)
    return false;
  std::ifstream in(fmt::format("/proc/{}/cmdline", pid));
  std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (cmd.find(std::string("\0sweep\0", 7)) == std::string::npos ||
      cmd.find("--every") == std::string::npos)
    return false;
  return !IsZombie(pid);
}

// The data repositories' export agent of the cluster: `ciuic ... repo agent`.
fs::path AgentPidFile(const fs::path& dir) {
  return dir / "run" / "repo-agent.pid";
}

bool IsAgentProcess(pid_t pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0)
    return false;
  std::ifstream in(fmt::format("/proc/{}/cmdline", pid));
  std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (cmd.find(std::string("\0repo\0agent", 11)) == std::string::npos)
    return false;
  return !IsZombie(pid);
}

// Applies the HSM flags given to `cluster up` to `shape`; false (after one line) when bad.
bool ApplyHsmFlags(const ClusterUpOptions& o, Shape* shape) {
  if (o.hsm_every_s >= 0)
    shape->hsm_every_s = o.hsm_every_s;
  if (o.hsm_high >= 0)
    shape->hsm_high = o.hsm_high;
  if (o.hsm_low >= 0)
    shape->hsm_low = o.hsm_low;
  if (!o.hsm_default.empty())
    shape->hsm_default = o.hsm_default;
  if (o.replicas > 0)
    shape->replicas = o.replicas;
  if (o.resync_mbps >= 0)
    shape->resync_mbps = o.resync_mbps;
  if (shape->replicas < 1 || shape->replicas > shape->num_oss) {
    Fail(fmt::format("--replicas {}: each copy needs its own OSS; this cluster has {} (1 to {})",
                     shape->replicas, shape->num_oss, shape->num_oss));
    return false;
  }
  if (!(shape->hsm_low <= shape->hsm_high && shape->hsm_high <= 100)) {
    Fail(fmt::format("--hsm-low {} must not be above --hsm-high {}", shape->hsm_low,
                     shape->hsm_high));
    return false;
  }
  const std::string& d = shape->hsm_default;
  if (d != "never" && d != "release-at-watermark" && d.rfind("archive-after=", 0) != 0) {
    Fail(
        fmt::format("--hsm-default {}: expected never, release-at-watermark or "
                    "archive-after=SECONDS",
                    d));
    return false;
  }
  return true;
}

}  // namespace

std::string MetricsEndpoint::Url() const {
  return fmt::format("http://{}:{}/metrics", host, port);
}

std::vector<MetricsEndpoint> MetricsEndpoints(const std::string& dir_in) {
  fs::path dir = fs::absolute(dir_in);
  std::vector<MetricsEndpoint> out;
  auto shape = LoadShape(dir);
  if (!shape.ok())
    return out;
  for (const auto& [name, pidfile] : PidFiles(dir, *shape)) {
    if (!IsOurProcess(ReadPid(pidfile)))
      continue;
    std::ifstream in(dir / "run" / (name + ".metrics_port"));
    unsigned port = 0;
    if (in >> port && port > 0 && port < 65536)
      out.push_back({name, "127.0.0.1", static_cast<uint16_t>(port)});
  }
  return out;
}

std::string DefaultClusterDir(const std::string& dir) {
  if (!dir.empty())
    return dir;
  if (const char* env = std::getenv("CIUIC_CLUSTER"); env != nullptr && *env != '\0') {
    return fs::path(env).parent_path().string();
  }
  const char* home = std::getenv("HOME");
  return fmt::format("{}/ciuic", home ? home : ".");
}

int ClusterUp(const ClusterUpOptions& o) {
  if (o.cold_tier.rfind("mem://", 0) == 0) {
    Fail(
        fmt::format("--cold-tier {}: a mem:// store lives inside one process; the OSS "
                    "processes of a cluster cannot share it (use file:///DIR or s3://...)",
                    o.cold_tier));
    return 1;
  }
  std::error_code ec;
  fs::path dir = fs::absolute(o.dir, ec);
  fs::create_directories(dir / "run", ec);
  fs::create_directories(dir / "logs", ec);
  // The cluster directory holds the admin key and all the data: owner only (0700).
  for (const fs::path& p : {dir, dir / "run", dir / "logs"}) {
    if (!ec)
      fs::permissions(p, fs::perms::owner_all, ec);
  }
  if (ec) {
    Fail(fmt::format("cannot create cluster directory {}: {}", dir.string(), ec.message()));
    return 1;
  }
  fs::path conf = dir / "cluster.conf";
  ClusterFile cf;
  Shape shape{o.num_oss, o.osts_per_oss, o.io_engine, o.cold_tier};
  if (!ApplyHsmFlags(o, &shape))
    return 1;
  if (fs::exists(conf)) {
    auto loaded = ClusterFile::Load(conf);
    if (!loaded.ok()) {
      Fail(loaded.status().message());
      return 1;
    }
    cf = *loaded;
    auto s = LoadShape(dir);
    if (s.ok())
      shape = *s;  // an existing cluster keeps its shape and data
    if (!o.cold_tier.empty() && o.cold_tier != shape.cold_tier) {
      Fail(fmt::format("cluster in {} already has cold tier '{}'; --cold-tier cannot change it",
                       dir.string(), shape.cold_tier.empty() ? "(default)" : shape.cold_tier));
      return 1;
    }
    // The HSM policy may change at each start.
    if (!ApplyHsmFlags(o, &shape))
      return 1;
    if (auto st = SaveShape(dir, shape); !st.ok()) {
      Fail(st.message());
      return 1;
    }
  } else {
    if (o.num_oss < 1 || o.osts_per_oss < 1 || o.num_oss * o.osts_per_oss > 256) {
      Fail("need 1..256 OSTs: --oss and --osts-per-oss must be at least 1");
      return 1;
    }
    cf.cluster_uuid = NewUuid();
    cf.secret_hex = HexEncode(RandomBytes(32));
    uint16_t port = static_cast<uint16_t>(o.mds_port);
    if (port == 0) {
      auto p = PickFreePort();
      if (!p.ok()) {
        Fail(p.status().message());
        return 1;
      }
      port = *p;
    }
    cf.mds = HostPort{"127.0.0.1", port};
    if (auto s = cf.Save(conf); !s.ok()) {
      Fail(s.message());
      return 1;
    }
    if (auto s = SaveShape(dir, shape); !s.ok()) {
      Fail(s.message());
      return 1;
    }
  }

  if (!o.node_cache.empty() || !o.node_cache_size.empty() || o.node_cache_min_free >= 0) {
    if (!o.node_cache.empty()) {
      cf.node_cache = o.node_cache == "none" || o.node_cache == "off"
                          ? std::string()
                          : fs::absolute(o.node_cache, ec).string();
    }
    if (!o.node_cache_size.empty()) {
      Result<uint64_t> n = ParseSize(o.node_cache_size);
      if (!n.ok() || *n == 0) {
        Fail(fmt::format("--node-cache-size '{}': want a size such as 20G", o.node_cache_size));
        return 1;
      }
      cf.node_cache_bytes = *n;
    }
    if (o.node_cache_min_free >= 0)
      cf.node_cache_min_free_pct = o.node_cache_min_free;
    if (auto s = cf.Save(conf); !s.ok()) {
      Fail(s.message());
      return 1;
    }
  }

  // The cold tier (HSM): a directory beside the OSTs unless the cluster names another store.
  std::string cold_url = shape.cold_tier;
  if (cold_url.empty()) {
    fs::create_directories(dir / "cold", ec);
    fs::permissions(dir / "cold", fs::perms::owner_all, ec);
    cold_url = "file://" + (dir / "cold").string();
  }

  // Refuse to start twice; when only some servers run (one crashed or was killed), start the
  // others and leave the running ones alone.
  std::set<std::string> running;
  for (const auto& [name, pidfile] : PidFiles(dir, shape)) {
    if (IsOurProcess(ReadPid(pidfile)))
      running.insert(name);
  }
  const size_t servers = static_cast<size_t>(shape.num_oss) + 1;
  if (running.size() == servers) {
    Fail(fmt::format("cluster in {} is already running; stop it with `ciuic cluster down {}`",
                     dir.string(), dir.string()));
    return 1;
  }
  if (!running.empty()) {
    fmt::print("ciuic cluster up: {} of {} servers running; starting the others\n", running.size(),
               servers);
  }
  if (!running.count("mds") && !PortFree(cf.mds.port)) {
    Fail(fmt::format("MDS port {} is in use by another program", cf.mds.port));
    return 1;
  }

  // MDS.
  if (!running.count("mds")) {
    fs::path mds_port_file = dir / "run" / "mds.port";
    fs::remove(mds_port_file, ec);
    fs::remove(dir / "run" / "mds.metrics_port", ec);
    fs::create_directories(dir / "mds", ec);
    fs::permissions(dir / "mds", fs::perms::owner_all, ec);
    std::vector<std::string> mds_argv = {FindBinary("ciuic-mds"),
                                         "--data",
                                         (dir / "mds").string(),
                                         "--listen",
                                         cf.mds.ToString(),
                                         "--cluster-file",
                                         conf.string(),
                                         "--log",
                                         (dir / "logs" / "mds.log").string(),
                                         "--port-file",
                                         mds_port_file.string(),
                                         "--metrics-port",
                                         "0",
                                         "--metrics-port-file",
                                         (dir / "run" / "mds.metrics_port").string(),
                                         "--default-replicas",
                                         std::to_string(shape.replicas)};
    auto mds_pid = Spawn(mds_argv, dir / "logs" / "mds.out");
    if (!mds_pid.ok()) {
      Fail(mds_pid.status().message());
      return 1;
    }
    (void)WritePid(dir / "run" / "mds.pid", *mds_pid).ok();
    if (auto s = WaitForStart(*mds_pid, mds_port_file, dir / "logs" / "mds.out", "ciuic-mds",
                              o.timeout_s);
        !s.ok()) {
      Fail(s.message());
      return 1;
    }
  }

  // OSS processes.
  for (int i = 0; i < shape.num_oss; ++i) {
    if (running.count(fmt::format("oss{}", i)))
      continue;
    std::vector<std::string> argv = {FindBinary("ciuic-oss")};
    for (int j = 0; j < shape.osts_per_oss; ++j) {
      int index = i * shape.osts_per_oss + j;
      fs::path ost = dir / fmt::format("oss{}", i) / fmt::format("ost{}", index);
      fs::create_directories(ost, ec);
      // Object files are the data itself: no other local user may read them.
      fs::permissions(ost.parent_path(), fs::perms::owner_all, ec);
      fs::permissions(ost, fs::perms::owner_all, ec);
      argv.push_back("--ost");
      argv.push_back(fmt::format("{}:{}", index, ost.string()));
    }
    fs::path port_file = dir / "run" / fmt::format("oss{}.port", i);
    fs::path metrics_port_file = dir / "run" / fmt::format("oss{}.metrics_port", i);
    fs::remove(port_file, ec);
    fs::remove(metrics_port_file, ec);
    for (const std::string& a :
         {std::string("--listen"), std::string("127.0.0.1:0"), std::string("--cluster-file"),
          conf.string(), std::string("--io-engine"), shape.io_engine, std::string("--log"),
          (dir / "logs" / fmt::format("oss{}.log", i)).string(), std::string("--port-file"),
          port_file.string(), std::string("--metrics-port"), std::string("0"),
          std::string("--metrics-port-file"), metrics_port_file.string(),
          std::string("--cold-tier"), cold_url, std::string("--resync-mbps"),
          std::to_string(shape.resync_mbps)}) {
      argv.push_back(a);
    }
    auto pid = Spawn(argv, dir / "logs" / fmt::format("oss{}.out", i));
    if (!pid.ok()) {
      Fail(pid.status().message());
      return 1;
    }
    (void)WritePid(dir / "run" / fmt::format("oss{}.pid", i), *pid).ok();
    if (auto s = WaitForStart(*pid, port_file, dir / "logs" / fmt::format("oss{}.out", i),
                              fmt::format("ciuic-oss {}", i), o.timeout_s);
        !s.ok()) {
      Fail(s.message());
      return 1;
    }
  }

  // Wait until the MDS sees every OST up.
  ClientOptions copts;
  copts.cluster_file = conf.string();
  copts.ost_retry_ms = 2000;
  auto client = Client::Connect(copts);
  if (!client.ok()) {
    Fail(
        fmt::format("cluster started but a client cannot connect: {}", client.status().ToString()));
    return 1;
  }
  const size_t want = static_cast<size_t>(shape.num_oss * shape.osts_per_oss);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.timeout_s);
  size_t up = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    auto map = (*client)->OstMap();
    up = 0;
    if (map.ok()) {
      for (const auto& ost : *map)
        up += ost.state == "up" ? 1 : 0;
    }
    if (up >= want)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (up < want) {
    Fail(fmt::format("only {} of {} OSTs registered with the MDS within {} s (see {}/logs)", up,
                     want, o.timeout_s, dir.string()));
    return 1;
  }
  // The HSM policy process: a client of the cluster like any other (docs/design.md "HSM
  // policy"), restarted with the cluster.
  if (shape.hsm_every_s > 0 && !IsPolicyProcess(ReadPid(PolicyPidFile(dir)))) {
    std::vector<std::string> argv = {FindBinary("ciuic"),
                                     "--cluster",
                                     conf.string(),
                                     "hsm",
                                     "sweep",
                                     "--every",
                                     std::to_string(shape.hsm_every_s),
                                     "--high",
                                     fmt::format("{}", shape.hsm_high),
                                     "--low",
                                     fmt::format("{}", shape.hsm_low),
                                     "--default",
                                     shape.hsm_default};
    auto pid = Spawn(argv, dir / "logs" / "policy.out");
    if (!pid.ok()) {
      Fail(pid.status().message());
      return 1;
    }
    (void)WritePid(PolicyPidFile(dir), *pid).ok();
  }
  // The export agent: directories linked with --export-on-close export what writers close
  // (docs/design.md "Data repositories"). It holds the repositories' credentials as the OSSes
  // do: those of this environment.
  if (!IsAgentProcess(ReadPid(AgentPidFile(dir)))) {
    std::vector<std::string> argv = {FindBinary("ciuic"), "--cluster", conf.string(), "repo",
                                     "agent"};
    auto pid = Spawn(argv, dir / "logs" / "repo-agent.out");
    if (!pid.ok()) {
      Fail(pid.status().message());
      return 1;
    }
    (void)WritePid(AgentPidFile(dir), *pid).ok();
  }
  fmt::print("ciuic cluster up: MDS at {}, {} OSS x {} OSTs, data in {}\n", cf.mds.ToString(),
             shape.num_oss, shape.osts_per_oss, dir.string());
  fmt::print("cluster file: {}\n  export CIUIC_CLUSTER={}\n", conf.string(), conf.string());
  return 0;
}

int ClusterDown(const std::string& dir_in, int timeout_s) {
  fs::path dir = fs::absolute(dir_in);
  auto shape = LoadShape(dir);
  if (!shape.ok()) {
    Fail(fmt::format("{} is not a ciuic cluster directory ({})", dir.string(),
                     shape.status().message()));
    return 1;
  }
  int stopped = 0;
  std::vector<std::pair<std::string, pid_t>> live;
  if (pid_t pp = ReadPid(PolicyPidFile(dir)); IsPolicyProcess(pp)) {
    ::kill(pp, SIGTERM);
    live.emplace_back("policy", pp);
  }
  if (pid_t ap = ReadPid(AgentPidFile(dir)); IsAgentProcess(ap)) {
    ::kill(ap, SIGTERM);
    live.emplace_back("repo agent", ap);
  }
  for (const auto& [name, pidfile] : PidFiles(dir, *shape)) {
    pid_t pid = ReadPid(pidfile);
    if (IsOurProcess(pid)) {
      ::kill(pid, SIGTERM);
      live.emplace_back(name, pid);
    }
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (const auto& [name, pid] : live) {
    while (IsOurProcess(pid) && std::chrono::steady_clock::now() < deadline) {
      ::waitpid(pid, nullptr, WNOHANG);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (IsOurProcess(pid)) {
      fmt::print(stderr, "ciuic: {} (pid {}) did not stop in {} s; killing it\n", name, pid,
                 timeout_s);
      ::kill(pid, SIGKILL);
    }
    ++stopped;
  }
  for (const auto& [name, pidfile] : PidFiles(dir, *shape)) {
    std::error_code ec;
    fs::remove(pidfile, ec);
  }
  std::error_code pec;
  fs::remove(PolicyPidFile(dir), pec);
  fs::remove(AgentPidFile(dir), pec);
  if (stopped == 0) {
    fmt::print("ciuic cluster in {} was not running\n", dir.string());
  } else {
    fmt::print("ciuic cluster down: stopped {} processes; data kept in {}\n", stopped,
               dir.string());
  }
  return 0;
}

int ClusterStatus(const std::string& dir_in) {
  fs::path dir = fs::absolute(dir_in);
  auto shape = LoadShape(dir);
  if (!shape.ok()) {
    Fail(fmt::format("{} is not a ciuic cluster directory: start one with `ciuic cluster up {}`",
                     dir.string(), dir.string()));
    return 1;
  }
  int running = 0;
  std::string procs;
  for (const auto& [name, pidfile] : PidFiles(dir, *shape)) {
    pid_t pid = ReadPid(pidfile);
    bool alive = IsOurProcess(pid);
    running += alive ? 1 : 0;
    procs +=
        fmt::format("  {:<6} {}\n", name, alive ? fmt::format("running (pid {})", pid) : "stopped");
  }
  if (running == 0) {
    Fail(fmt::format("cluster not running: start it with `ciuic cluster up {}`", dir.string()));
    return 1;
  }
  fmt::print("cluster {} ({} of {} processes running)\n{}", dir.string(), running,
             shape->num_oss + 1, procs);
  if (auto eps = MetricsEndpoints(dir.string()); !eps.empty()) {
    fmt::print("metrics (Prometheus; `ciuic top` shows them live):\n");
    for (const auto& e : eps)
      fmt::print("  {:<6} {}\n", e.name, e.Url());
  }
  ClientOptions copts;
  copts.cluster_file = (dir / "cluster.conf").string();
  copts.ost_retry_ms = 2000;
  auto client = Client::Connect(copts);
  if (!client.ok()) {
    Fail(fmt::format("MDS not reachable: {}", client.status().ToString()));
    return 1;
  }
  auto map = (*client)->OstMap();
  if (!map.ok()) {
    Fail(map.status().ToString());
    return 1;
  }
  uint64_t cap = 0, free = 0;
  fmt::print("{:>4}  {:<22} {:>6} {:>12} {:>12}\n", "OST", "OSS", "state", "capacity", "free");
  for (const auto& o : *map) {
    fmt::print("{:>4}  {:<22} {:>6} {:>12} {:>12}\n", o.index, o.addr, o.state,
               FormatSize(o.capacity), FormatSize(o.free));
    cap += o.capacity;
    free += o.free;
  }
  auto sf = (*client)->Statfs();
  if (sf.ok()) {
    fmt::print("total: {} free of {} ({} inodes used)\n", FormatSize(sf->free_bytes),
               FormatSize(sf->total_bytes), sf->total_inodes - sf->free_inodes);
  }
  fmt::print("replicas: {} per object by default; resync copies {}\n", shape->replicas,
             shape->resync_mbps == 0 ? std::string("unbounded")
                                     : fmt::format("at most {} MiB/s per OSS", shape->resync_mbps));
  auto chains = (*client)->Chains();
  if (chains.ok() && !chains->empty()) {
    std::map<uint32_t, std::string> ost_state;
    for (const auto& o : *map)
      ost_state[o.index] = o.state;
    size_t degraded = 0, unavailable = 0;
    std::string lines;
    for (const auto& ch : *chains) {
      bool all = true, any = false;
      std::string members;
      for (const auto& m : ch.members) {
        const bool down = ost_state[m.ost] == "down";
        all &= m.state == "serving" && !down;
        any |= m.state == "serving" && !down;
        members += fmt::format(" {}:{}{}", m.ost, m.state, down ? "(down)" : "");
        if (m.state == "syncing" && m.sync_objects_total > 0) {
          members += fmt::format("({}/{} objects, {} copied)", m.sync_objects_done,
                                 m.sync_objects_total, FormatSize(m.sync_bytes_copied));
        }
      }
      degraded += all ? 0 : 1;
      unavailable += any ? 0 : 1;
      if (!all)
        lines += fmt::format("  chain {:>4} v{}{}\n", ch.id - kChainBase, ch.version, members);
    }
    fmt::print("chains: {} ({} degraded, {} without a serving copy)\n{}", chains->size(), degraded,
               unavailable, lines);
  }
  return 0;
}

}  // namespace ciuic::cli
