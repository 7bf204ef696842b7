// ciuic-clientload: many clients at once against a running cluster, to see that the servers'
// state stays bounded. Starts N clients (each its own Client: own connections, own MDS
// session), each in its own thread running a mixed data and metadata load for S seconds
// (create + write + close, stat, read back, readdir, rename, unlink, files held open), then
// drops them all and prints each server's resident memory and open descriptors before the
// load, at its end (clients still connected) and after the clients went away.
//
// Usage: ciuic-clientload CLUSTER_DIR [--clients 200] [--seconds 20] [--settle-ms 3000]
// CLUSTER_DIR is a `ciuic cluster up` directory (its cluster.conf and run/*.pid are read).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "ciuic/client.h"

namespace {

namespace fs = std::filesystem;

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "ciuic-clientload: %s\nusage: ciuic-clientload CLUSTER_DIR [--clients N] "
               "[--seconds S] [--settle-ms MS]\n",
               why.c_str());
  std::exit(2);
}

long Number(const std::string& flag, const char* v, long lo, long hi) {
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || n < lo || n > hi)
    Usage(fmt::format("{} wants a number in {}..{}, not '{}'", flag, lo, hi, v));
  return n;
}

struct Usage_ {
  uint64_t rss_kib = 0;
  uint64_t fds = 0;
  uint64_t threads = 0;
};

Usage_ Measure(pid_t pid) {
  Usage_ u;
  std::ifstream st(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(st, line)) {
    if (line.rfind("VmRSS:", 0) == 0)
      u.rss_kib = std::strtoull(line.c_str() + 6, nullptr, 10);
    if (line.rfind("Threads:", 0) == 0)
      u.threads = std::strtoull(line.c_str() + 8, nullptr, 10);
  }
  std::error_code ec;
  for (auto it = fs::directory_iterator(fmt::format("/proc/{}/fd", pid), ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    ++u.fds;
  }
  return u;
}

std::map<std::string, pid_t> Servers(const std::string& dir) {
  std::map<std::string, pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir + "/run", ec)) {
    if (e.path().extension() != ".pid")
      continue;
    std::ifstream in(e.path());
    long pid = 0;
    if (in >> pid && pid > 0 && ::kill(static_cast<pid_t>(pid), 0) == 0)
      out[e.path().stem().string()] = static_cast<pid_t>(pid);
  }
  return out;
}

struct Counts {
  std::atomic<uint64_t> ops{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> bytes{0};
};

void Load(ciuic::Client* c, int id, int64_t until_ms, Counts* counts) {
  using ciuic::Status;
  std::mt19937_64 rng(static_cast<uint64_t>(id) * 7919 + 1);
  const std::string dir = fmt::format("/clientload/c{}", id);
  if (!c->MkdirAll(dir).ok()) {
    counts->errors.fetch_add(1);
    return;
  }
  std::vector<std::unique_ptr<ciuic::File>> held;  // files kept open a while
  std::string buf;
  auto now = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  for (uint64_t n = 0; now() < until_ms; ++n) {
    const std::string path = fmt::format("{}/f{}", dir, n % 64);
    const int op = static_cast<int>(rng() % 100);
    Status s;
    if (op < 35) {
      const size_t len = 1024 + rng() % (64 * 1024);
      buf.assign(len, static_cast<char>('a' + n % 26));
      s = c->WriteFile(path, buf);
      if (s.ok())
        counts->bytes.fetch_add(len);
    } else if (op < 55) {
      auto r = c->ReadFile(path);
      s = r.ok() || r.status().code() == ciuic::StatusCode::kNotFound ? Status::OK() : r.status();
      if (r.ok())
        counts->bytes.fetch_add(r->size());
    } else if (op < 75) {
      auto r = c->Stat(path);
      s = r.ok() || r.status().code() == ciuic::StatusCode::kNotFound ? Status::OK() : r.status();
    } else if (op < 82) {
      s = c->ReadDir(dir).status();
    } else if (op < 88) {
      s = c->Rename(path, fmt::format("{}/f{}", dir, (n + 7) % 64));
      if (s.code() == ciuic::StatusCode::kNotFound)
        s = Status::OK();
    } else if (op < 94) {
      s = c->Unlink(path);
      if (s.code() == ciuic::StatusCode::kNotFound)
        s = Status::OK();
    } else {
      // Hold a file open (a session's opens), closing the oldest past 8.
      auto f = c->Open(path, O_CREAT | O_RDWR, 0644);
      s = f.status();
      if (f.ok())
        held.push_back(std::move(*f));
      if (held.size() > 8) {
        s = held.front()->Close();
        held.erase(held.begin());
      }
    }
    counts->ops.fetch_add(1);
    if (!s.ok())
      counts->errors.fetch_add(1);
  }
  for (auto& f : held)
    f->Close().IgnoreError();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-')
    Usage("missing CLUSTER_DIR");
  const std::string dir = argv[1];
  int clients = 200, seconds = 20, settle_ms = 3000;
  for (int i = 2; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc)
      Usage(f + " needs a value");
    if (f == "--clients") {
      clients = static_cast<int>(Number(f, argv[++i], 1, 10000));
    } else if (f == "--seconds") {
      seconds = static_cast<int>(Number(f, argv[++i], 1, 3600));
    } else if (f == "--settle-ms") {
      settle_ms = static_cast<int>(Number(f, argv[++i], 0, 600000));
    } else {
      Usage(fmt::format("unknown option '{}'", f));
    }
  }
  auto servers = Servers(dir);
  if (servers.empty())
    Usage(fmt::format("no running servers in {}/run (start them with `ciuic cluster up {}`)", dir,
                      dir));
  std::map<std::string, Usage_> before, during, after;
  for (const auto& [name, pid] : servers)
    before[name] = Measure(pid);

  ciuic::ClientOptions o;
  o.cluster_file = dir + "/cluster.conf";
  o.io_threads = 1;
  o.readahead_bytes = 0;
  std::vector<std::unique_ptr<ciuic::Client>> conns;
  for (int i = 0; i < clients; ++i) {
    auto c = ciuic::Client::Connect(o);
    if (!c.ok()) {
      std::fprintf(stderr, "ciuic-clientload: client %d: %s\n", i, c.status().ToString().c_str());
      return 1;
    }
    conns.push_back(std::move(*c));
  }
  Counts counts;
  const int64_t until = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count() +
                        static_cast<int64_t>(seconds) * 1000;
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i)
    threads.emplace_back(Load, conns[static_cast<size_t>(i)].get(), i, until, &counts);
  for (auto& t : threads)
    t.join();
  for (const auto& [name, pid] : servers)
    during[name] = Measure(pid);
  conns.clear();  // every client ends its session and closes its connections
  std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
  for (const auto& [name, pid] : servers)
    after[name] = Measure(pid);

  std::printf("%d clients for %d s: %lu ops (%.0f/s), %lu bytes, %lu errors\n", clients, seconds,
              static_cast<unsigned long>(counts.ops.load()),
              static_cast<double>(counts.ops.load()) / seconds,
              static_cast<unsigned long>(counts.bytes.load()),
              static_cast<unsigned long>(counts.errors.load()));
  std::printf("%-6s %12s %12s %12s %8s %8s %8s %8s %8s %8s\n", "server", "RSS before", "RSS end",
              "RSS after", "fds bef", "fds end", "fds aft", "thr bef", "thr end", "thr aft");
  for (const auto& [name, pid] : servers) {
    const auto &b = before[name], &d = during[name], &a = after[name];
    std::printf("%-6s %9lu KiB %9lu KiB %9lu KiB %8lu %8lu %8lu %8lu %8lu %8lu\n", name.c_str(),
                static_cast<unsigned long>(b.rss_kib), static_cast<unsigned long>(d.rss_kib),
                static_cast<unsigned long>(a.rss_kib), static_cast<unsigned long>(b.fds),
                static_cast<unsigned long>(d.fds), static_cast<unsigned long>(a.fds),
                static_cast<unsigned long>(b.threads), static_cast<unsigned long>(d.threads),
                static_cast<unsigned long>(a.threads));
  }
  return counts.errors.load() == 0 ? 0 : 1;
}
