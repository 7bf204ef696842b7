#include "bench/scaling.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "bench/proc.h"
#include "bench/stats.h"
#include "ciuic/client.h"
#include "common/config.h"

namespace ciuic::bench {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kSubnet = "10.77.0";  // inside the tool's own namespaces only
constexpr uint16_t kMdsPort = 7100;
constexpr uint16_t kOssPort = 7200;

// Runs a command of the network setup (ip, tc); kInternal with its output on failure.
Status Sh(const std::vector<std::string>& argv, const std::string& log) {
  CIUIC_ASSIGN_OR_RETURN(int rc, RunCommand(argv, log, 30));
  if (rc != 0) {
    return Status::Internal(
        fmt::format("`{}` failed ({}): {}", fmt::join(argv, " "), rc, LastLines(log, 2)));
  }
  return Status::OK();
}

// The namespaces, veth links and bridge of one phase run. Remove() undoes everything Create()
// did, also after a partial Create().
class Topology {
 public:
  Topology(std::string prefix, std::string log, int num_oss, int mbit)
      : prefix_(std::move(prefix)), log_(std::move(log)), num_oss_(num_oss), mbit_(mbit) {}

  std::string Ns(const std::string& node) const { return prefix_ + "-" + node; }
  std::string Hub() const { return Ns("hub"); }
  static std::string MdsAddr() { return fmt::format("{}.1", kSubnet); }
  static std::string ClientAddr() { return fmt::format("{}.2", kSubnet); }
  static std::string OssAddr(int i) { return fmt::format("{}.{}", kSubnet, 10 + i); }

  Status Create() {
    CIUIC_RETURN_IF_ERROR(AddNs(Hub()));
    CIUIC_RETURN_IF_ERROR(Sh({"ip", "-n", Hub(), "link", "add", "br0", "type", "bridge"}, log_));
    CIUIC_RETURN_IF_ERROR(Sh({"ip", "-n", Hub(), "link", "set", "br0", "up"}, log_));
    CIUIC_RETURN_IF_ERROR(Node("mds", MdsAddr(), false));
    CIUIC_RETURN_IF_ERROR(Node("cli", ClientAddr(), false));
    for (int i = 0; i < num_oss_; ++i)
      CIUIC_RETURN_IF_ERROR(Node(fmt::format("oss{}", i), OssAddr(i), true));
    return Status::OK();
  }

  // Deletes the namespaces (which deletes the veths in them). Processes must be gone first.
  void Remove() {
    for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
      auto rc = RunCommand({"ip", "netns", "del", *it}, log_, 30);
      if (!rc.ok() || *rc != 0)
        std::fprintf(stderr, "ciuic-benchmark: could not delete network namespace %s\n",
                     it->c_str());
    }
    created_.clear();
  }

 private:
  Status AddNs(const std::string& ns) {
    CIUIC_RETURN_IF_ERROR(Sh({"ip", "netns", "add", ns}, log_));
    created_.push_back(ns);
    return Sh({"ip", "-n", ns, "link", "set", "lo", "up"}, log_);
  }

  Status Shape(const std::string& ns, const std::string& dev) {
    return Sh({"tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate",
               fmt::format("{}mbit", mbit_), "burst", "256kb", "latency", "100ms"},
              log_);
  }

  // A node namespace with eth0 (addr/24) linked to the bridge; no default route.
  Status Node(const std::string& node, const std::string& addr, bool shaped) {
    const std::string ns = Ns(node);
    const std::string hub_end = "v" + node;
    CIUIC_RETURN_IF_ERROR(AddNs(ns));
    CIUIC_RETURN_IF_ERROR(Sh({"ip", "-n", Hub(), "link", "add", hub_end, "type", "veth", "peer",
                              "name", "eth0", "netns", ns},
                             log_));
    CIUIC_RETURN_IF_ERROR(Sh({"ip", "-n", Hub(), "link", "set", hub_end, "master", "br0"}, log_));
    CIUIC_RETURN_IF_ERROR(Sh({"ip", "-n", Hub(), "link", "set", hub_end, "up"}, log_));
    CIUIC_RETURN_IF_ERROR(Sh({"ip", "-n", ns, "addr", "add", addr + "/24", "dev", "eth0"}, log_));
    CIUIC_RETURN_IF_ERROR(Sh({"ip", "-n", ns, "link", "set", "eth0", "up"}, log_));
    if (shaped) {
      CIUIC_RETURN_IF_ERROR(Shape(ns, "eth0"));
      CIUIC_RETURN_IF_ERROR(Shape(Hub(), hub_end));
    }
    return Status::OK();
  }

  std::string prefix_;
  std::string log_;
  int num_oss_;
  int mbit_;
  std::vector<std::string> created_;
};

// One cluster (MDS + n OSS) started in the topology's namespaces, stopped by Stop().
class NsCluster {
 public:
  NsCluster(const ScalingOptions& o, const Topology& topo, std::string dir)
      : o_(o), topo_(topo), dir_(std::move(dir)) {}

  Status Start(int n) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    fs::create_directories(dir_, ec);
    if (ec)
      return Status::IoError(fmt::format("cannot create {}: {}", dir_, ec.message()));
    ClusterFile cf;
    cf.cluster_uuid = NewUuid();
    cf.secret_hex = HexEncode(RandomBytes(32));
    cf.mds = HostPort{Topology::MdsAddr(), kMdsPort};
    conf_ = dir_ + "/cluster.conf";
    CIUIC_RETURN_IF_ERROR(cf.Save(conf_));
    CIUIC_RETURN_IF_ERROR(
        StartServer("mds", {o_.bin_dir + "/ciuic-mds", "--data", dir_ + "/mds", "--listen",
                            cf.mds.ToString(), "--cluster-file", conf_, "--heartbeat-ms", "200"}));
    for (int i = 0; i < n; ++i) {
      const std::string node = fmt::format("oss{}", i);
      fs::create_directories(fmt::format("{}/ost{}", dir_, i), ec);
      CIUIC_RETURN_IF_ERROR(StartServer(
          node, {o_.bin_dir + "/ciuic-oss", "--ost", fmt::format("{}:{}/ost{}", i, dir_, i),
                 "--listen", fmt::format("{}:{}", Topology::OssAddr(i), kOssPort), "--cluster-file",
                 conf_, "--heartbeat-ms", "200"}));
    }
    return Status::OK();
  }

  void Stop() {
    for (auto it = pids_.rbegin(); it != pids_.rend(); ++it)
      StopProcess(*it, 5000);
    pids_.clear();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  const std::string& conf() const { return conf_; }

 private:
  Status StartServer(const std::string& node, std::vector<std::string> argv) {
    const std::string port_file = fmt::format("{}/{}.port", dir_, node);
    const std::string log = fmt::format("{}/{}.log", dir_, node);
    argv.insert(argv.end(), {"--port-file", port_file, "--log", log});
    argv.insert(argv.begin(), {"ip", "netns", "exec", topo_.Ns(node)});
    CIUIC_ASSIGN_OR_RETURN(pid_t pid, Spawn(argv, log));
    pids_.push_back(pid);
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      if (fs::exists(port_file))
        return Status::OK();
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) {
        pids_.pop_back();
        return Status::Unavailable(fmt::format("{} in namespace {} exited at start: {}", node,
                                               topo_.Ns(node), LastLines(log, 2)));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return Status::TimedOut(fmt::format("{} did not start within 20 s (see {})", node, log));
  }

  const ScalingOptions& o_;
  const Topology& topo_;
  std::string dir_;
  std::string conf_;
  std::vector<pid_t> pids_;
};

// Moves the calling thread into network namespace `ns` (threads it starts inherit it).
Status EnterNetns(const std::string& ns) {
  std::string path = "/var/run/netns/" + ns;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::FromErrno(errno, path);
  int rc = ::setns(fd, CLONE_NEWNET);
  int err = errno;
  ::close(fd);
  if (rc != 0)
    return Status::FromErrno(err, "setns " + ns);
  return Status::OK();
}

struct ReadResult {
  double gbps = 0;
  double first_done_s = 0;
  double last_done_s = 0;
};

// The client side, run on a thread inside the client namespace: waits for n OSTs, writes one
// file per OST (explicit 1-stripe layout on that OST, fsynced), then reads.
class ScalingClient {
 public:
  ScalingClient(const ScalingOptions& o, std::string conf, int n)
      : o_(o), conf_(std::move(conf)), n_(n) {}

  Status Prepare() {
    ClientOptions co;
    co.cluster_file = conf_;
    co.ost_retry_ms = 10000;
    CIUIC_ASSIGN_OR_RETURN(writer_, Client::Connect(co));
    auto deadline = Clock::now() + std::chrono::seconds(20);
    for (;;) {
      CIUIC_ASSIGN_OR_RETURN(auto osts, writer_->OstMap());
      int up = static_cast<int>(std::count_if(osts.begin(), osts.end(),
                                              [](const OstStatus& s) { return s.state == "up"; }));
      if (up >= n_)
        break;
      if (Clock::now() > deadline)
        return Status::TimedOut(fmt::format("only {} of {} OSTs came up", up, n_));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    CIUIC_RETURN_IF_ERROR(writer_->MkdirAll("/scaling", 0755));
    std::vector<std::thread> ts;
    std::vector<Status> st(static_cast<size_t>(n_));
    for (int i = 0; i < n_; ++i) {
      ts.emplace_back([this, i, &st] { st[static_cast<size_t>(i)] = WriteOne(i); });
    }
    for (auto& t : ts)
      t.join();
    for (const auto& s : st)
      CIUIC_RETURN_IF_ERROR(s);
    return Status::OK();
  }

  // `clients` independent clients; client c reads range c of every file, one thread per file.
  Result<ReadResult> Read(int clients) {
    std::vector<std::unique_ptr<Client>> cs;
    for (int c = 0; c < clients; ++c) {
      ClientOptions co;
      co.cluster_file = conf_;
      CIUIC_ASSIGN_OR_RETURN(auto cl, Client::Connect(co));
      cs.push_back(std::move(cl));
    }
    const uint64_t block = 1u << 20;
    const uint64_t share = o_.per_oss / static_cast<uint64_t>(clients) / block * block;
    std::vector<double> done(static_cast<size_t>(clients), 0);
    std::vector<Status> st(static_cast<size_t>(clients * n_));
    auto start = Clock::now();
    std::vector<std::thread> client_threads;
    for (int c = 0; c < clients; ++c) {
      client_threads.emplace_back([&, c] {
        std::vector<std::thread> ts;
        for (int i = 0; i < n_; ++i) {
          ts.emplace_back([&, c, i] {
            st[static_cast<size_t>(c * n_ + i)] =
                ReadRange(*cs[static_cast<size_t>(c)], i, share * static_cast<uint64_t>(c), share);
          });
        }
        for (auto& t : ts)
          t.join();
        done[static_cast<size_t>(c)] = std::chrono::duration<double>(Clock::now() - start).count();
      });
    }
    for (auto& t : client_threads)
      t.join();
    for (const auto& s : st)
      CIUIC_RETURN_IF_ERROR(s);
    ReadResult r;
    r.first_done_s = *std::min_element(done.begin(), done.end());
    r.last_done_s = *std::max_element(done.begin(), done.end());
    r.gbps = static_cast<double>(share * static_cast<uint64_t>(clients * n_)) / r.last_done_s / 1e9;
    return r;
  }

  void Close() { writer_.reset(); }

 private:
  static std::string FileName(int i) { return fmt::format("/scaling/ost{}.dat", i); }

  Status WriteOne(int i) {
    FileLayout layout;
    layout.pattern = 1;
    LayoutComponent comp;
    comp.stripe_count = 1;
    comp.stripe_size = 1u << 20;
    comp.osts = {static_cast<uint32_t>(i)};
    layout.components.push_back(comp);
    OpenOptions oo;
    oo.layout = &layout;
    oo.size_hint = o_.per_oss;
    CIUIC_ASSIGN_OR_RETURN(auto f,
                           writer_->Open(FileName(i), O_CREAT | O_TRUNC | O_RDWR, 0644, oo));
    std::string buf(1u << 20, static_cast<char>('a' + i));
    for (uint64_t off = 0; off < o_.per_oss; off += buf.size())
      CIUIC_RETURN_IF_ERROR(f->Pwrite(buf.data(), buf.size(), off).status());
    CIUIC_RETURN_IF_ERROR(f->Fsync());
    FileLayout got = f->layout();
    CIUIC_RETURN_IF_ERROR(f->Close());
    if (got.components.empty() || got.components[0].osts.size() != 1 ||
        got.components[0].osts[0] != static_cast<uint32_t>(i)) {
      return Status::Internal(
          fmt::format("{}: layout {} is not on OST {}", FileName(i), got.ToString(), i));
    }
    return Status::OK();
  }

  Status ReadRange(Client& c, int i, uint64_t off, uint64_t len) {
    CIUIC_ASSIGN_OR_RETURN(auto f, c.Open(FileName(i), O_RDONLY));
    std::string buf(1u << 20, '\0');
    for (uint64_t pos = off; pos < off + len; pos += buf.size()) {
      CIUIC_ASSIGN_OR_RETURN(size_t got, f->Pread(buf.data(), buf.size(), pos));
      if (got != buf.size())
        return Status::IoError(fmt::format("{}: short read at {}", FileName(i), pos));
    }
    return f->Close();
  }

  const ScalingOptions& o_;
  std::string conf_;
  int n_;
  std::unique_ptr<Client> writer_;
};

}  // namespace

Status CheckScalingPrerequisites(const ScalingOptions& o) {
  if (::geteuid() != 0) {
    return Status::PermissionDenied(
        "needs root (network namespaces, veth links, tc shaping): run as root or leave "
        "'scaling' out of --phases");
  }
  for (const std::string tool : {"ip", "tc"}) {
    if (::access(("/usr/sbin/" + tool).c_str(), X_OK) != 0 &&
        ::access(("/sbin/" + tool).c_str(), X_OK) != 0) {
      return Status::NotFound(fmt::format("{} not found (apt-get install iproute2)", tool));
    }
  }
  for (const char* bin : {"ciuic-mds", "ciuic-oss"}) {
    std::string path = o.bin_dir + "/" + bin;
    if (::access(path.c_str(), X_OK) != 0)
      return Status::NotFound(fmt::format("{} not found next to the benchmark", path));
    // Both must accept --listen HOST:PORT (the address they serve on is the one they advertise).
    std::string log = o.work_dir + "/help.txt";
    auto rc = RunCommand({path, "--help"}, log, 10);
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ::unlink(log.c_str());
    if (!rc.ok() || *rc != 0 || text.find("--listen") == std::string::npos)
      return Status::NotFound(fmt::format("{} has no --listen option", path));
  }
  return Status::OK();
}

Status RunScalingPhase(const ScalingOptions& o, Report* report) {
  if (o.oss_counts.empty())
    return Status::InvalidArgument("no OSS counts");
  std::error_code ec;
  fs::create_directories(o.work_dir, ec);
  if (ec)
    return Status::IoError(fmt::format("cannot create {}: {}", o.work_dir, ec.message()));
  const int max_oss = *std::max_element(o.oss_counts.begin(), o.oss_counts.end());
  const std::string log = o.work_dir + "/netsetup.log";
  Topology topo(fmt::format("cb{}", ::getpid()), log, max_oss, o.mbit);
  int topo_cleanup = AddCleanup([&topo] { topo.Remove(); });
  NsCluster cluster(o, topo, o.work_dir + "/cluster");
  int cluster_cleanup = AddCleanup([&cluster] { cluster.Stop(); });

  Status result = [&]() -> Status {
    o.progress(fmt::format("scaling: creating {} network namespaces, {} Mbit/s per OSS link",
                           max_oss + 3, o.mbit));
    CIUIC_RETURN_IF_ERROR(topo.Create());
    double t1 = 0;
    const double link_gbps = o.mbit * 1e6 / 8 / 1e9;
    for (int n : o.oss_counts) {
      CIUIC_RETURN_IF_ERROR(cluster.Start(n));
      // The client runs on a thread inside the client namespace.
      Status st;
      std::vector<std::pair<int, ReadResult>> by_clients;
      std::vector<ReadResult> runs;
      std::thread th([&] {
        st = EnterNetns(topo.Ns("cli"));
        if (!st.ok())
          return;
        ScalingClient client(o, cluster.conf(), n);
        st = client.Prepare();
        if (!st.ok())
          return;
        for (int r = 0; r < o.runs && st.ok(); ++r) {
          o.drop_caches();
          auto rr = client.Read(1);
          if (!rr.ok()) {
            st = rr.status();
            return;
          }
          runs.push_back(*rr);
        }
        if (n == max_oss) {
          for (int c : o.client_counts) {
            if (c == 1)
              continue;
            o.drop_caches();
            auto rr = client.Read(c);
            if (!rr.ok()) {
              st = rr.status();
              return;
            }
            by_clients.emplace_back(c, *rr);
          }
        }
        client.Close();
      });
      th.join();
      cluster.Stop();
      CIUIC_RETURN_IF_ERROR(st);
      std::vector<double> gbps;
      for (const auto& r : runs) {
        Metric& m = report->Add("scaling", fmt::format("scaling_read_oss{}", n), "ciuic", r.gbps,
                                "GB/s", true);
        m.extra["first_done_s"].push_back(r.first_done_s);
        m.extra["last_done_s"].push_back(r.last_done_s);
        m.extra["link_limit_GBps"] = link_gbps * n;
        if (ExceedsLimit(r.gbps, link_gbps * n, 0.05)) {
          m.cache_inflated = true;
          m.note = "above the shaped links' rate: shaping did not hold";
        }
        gbps.push_back(r.gbps);
      }
      double tn = Summarize(gbps).median;
      if (n == 1)
        t1 = tn;
      if (t1 > 0) {
        report->Add("scaling", fmt::format("scaling_eff_oss{}", n), "ciuic",
                    ScalingEfficiency(t1, tn, n), "ratio", true);
      }
      o.progress(fmt::format(
          "scaling: {} OSS: {:.3f} GB/s (links {:.3f} GB/s){}", n, tn, link_gbps * n,
          t1 > 0 ? fmt::format(", efficiency {:.0f}%", 100 * ScalingEfficiency(t1, tn, n)) : ""));
      if (n == max_oss) {
        if (t1 > 0)
          report->Add("scaling", "scaling_eff_max", "ciuic", ScalingEfficiency(t1, tn, n), "ratio",
                      true);
        std::vector<std::pair<double, double>> pts = {{1.0, tn}};
        for (const auto& [c, r] : by_clients) {
          Metric& m = report->Add("scaling", fmt::format("scaling_read_clients{}", c), "ciuic",
                                  r.gbps, "GB/s", true);
          m.extra["oss"] = n;
          m.extra["first_done_s"].push_back(r.first_done_s);
          m.extra["last_done_s"].push_back(r.last_done_s);
          report->Add("scaling", fmt::format("scaling_eff_clients{}", c), "ciuic",
                      tn > 0 ? r.gbps / tn : 0, "ratio", true);
          pts.emplace_back(c, r.gbps);
          o.progress(
              fmt::format("scaling: {} OSS, {} clients: {:.3f} GB/s (first done {:.2f} s, "
                          "last done {:.2f} s)",
                          n, c, r.gbps, r.first_done_s, r.last_done_s));
        }
        if (pts.size() > 1)
          report->AddSeries("scaling_clients", fmt::format("ciuic, {} OSS", n), pts);
      }
    }
    std::vector<std::pair<double, double>> pts, ideal;
    for (int n : o.oss_counts) {
      const Metric* m = report->Find(fmt::format("scaling_read_oss{}", n), "ciuic");
      if (m != nullptr)
        pts.emplace_back(n, Summarize(m->runs).median);
      ideal.emplace_back(n, t1 * n);
    }
    report->AddSeries("scaling_read", "ciuic", pts);
    report->AddSeries("scaling_read", "ideal (N x T(1))", ideal);
    report->AddSeries("scaling_read", fmt::format("links ({} Mbit/s each)", o.mbit), [&] {
      std::vector<std::pair<double, double>> l;
      for (int n : o.oss_counts)
        l.emplace_back(n, link_gbps * n);
      return l;
    }());
    return Status::OK();
  }();
  RunCleanup(cluster_cleanup);
  RunCleanup(topo_cleanup);
  fs::remove_all(o.work_dir, ec);
  return result;
}

}  // namespace ciuic::bench
