#include "bench/limits.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "bench/target.h"

namespace ciuic::bench {
namespace {
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

Result<double> LoopbackGbps(uint64_t bytes) {
  int ls = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (ls < 0)
    return Status::FromErrno(errno, "socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(ls, 1) != 0 ||
      ::getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    int e = errno;
    ::close(ls);
    return Status::FromErrno(e, "loopback listen");
  }
  int cs = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (cs < 0 || ::connect(cs, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    int e = errno;
    ::close(ls);
    if (cs >= 0)
      ::close(cs);
    return Status::FromErrno(e, "loopback connect");
  }
  int ss = ::accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
  ::close(ls);
  if (ss < 0) {
    int e = errno;
    ::close(cs);
    return Status::FromErrno(e, "loopback accept");
  }
  const size_t chunk = 1u << 20;
  std::vector<char> out(chunk, 'x');
  auto start = Clock::now();
  std::thread sender([&] {
    uint64_t sent = 0;
    while (sent < bytes) {
      ssize_t r = ::send(cs, out.data(), std::min<uint64_t>(chunk, bytes - sent), MSG_NOSIGNAL);
      if (r <= 0)
        break;
      sent += static_cast<uint64_t>(r);
    }
    ::shutdown(cs, SHUT_WR);
  });
  std::vector<char> in(chunk);
  uint64_t got = 0;
  for (;;) {
    ssize_t r = ::recv(ss, in.data(), chunk, 0);
    if (r <= 0)
      break;
    got += static_cast<uint64_t>(r);
  }
  double secs = Seconds(start);
  sender.join();
  ::close(cs);
  ::close(ss);
  if (got != bytes)
    return Status::IoError(fmt::format("loopback: received {} of {} bytes", got, bytes));
  return static_cast<double>(bytes) / secs / 1e9;
}

}  // namespace

nlohmann::json Limits::ToJson() const {
  return {{"disk_write_GBps", disk_write_gbps},
          {"disk_read_GBps", disk_read_gbps},
          {"disk_rand_4k_iops", disk_rand_iops},
          {"loopback_GBps", loopback_gbps}};
}

Result<Limits> MeasureLimits(const std::string& dir,
                             uint64_t bytes,
                             int streams,
                             const std::function<void()>& drop_caches) {
  Limits l;
  CIUIC_ASSIGN_OR_RETURN(auto t, NewPosixTarget("limits", dir, false));
  if (!t->direct_io())
    return Status::NotSupported(dir + ": O_DIRECT refused; cannot measure the disk");
  streams = std::max(streams, 1);
  const size_t block = 1u << 20;
  const uint64_t per = bytes / streams / block * block;
  std::vector<std::string> paths;
  for (int i = 0; i < streams; ++i)
    paths.push_back(t->Path(fmt::format(".limits-{}-{}", ::getpid(), i)));
  auto run = [&](bool write) -> Result<double> {
    std::vector<std::thread> ts;
    std::vector<Status> st(streams);
    auto start = Clock::now();
    for (int i = 0; i < streams; ++i) {
      ts.emplace_back([&, i] {
        auto f = t->Open(paths[static_cast<size_t>(i)], write, per);
        if (!f.ok()) {
          st[static_cast<size_t>(i)] = f.status();
          return;
        }
        char* buf = static_cast<char*>(std::aligned_alloc(4096, block));
        std::fill(buf, buf + block, static_cast<char>(i + 1));
        Status s;
        for (uint64_t off = 0; off < per && s.ok(); off += block) {
          if (write) {
            s = (*f)->Pwrite(buf, block, off);
          } else {
            s = (*f)->Pread(buf, block, off).status();
          }
        }
        if (s.ok() && write)
          s = (*f)->Fsync();
        Status cs = (*f)->Close();
        std::free(buf);
        st[static_cast<size_t>(i)] = s.ok() ? cs : s;
      });
    }
    for (auto& th : ts)
      th.join();
    double secs = Seconds(start);
    for (const auto& s : st)
      CIUIC_RETURN_IF_ERROR(s);
    return static_cast<double>(per * streams) / secs / 1e9;
  };
  auto cleanup = [&] {
    for (const auto& p : paths)
      ::unlink(p.c_str());
  };
  auto w = run(true);
  if (!w.ok()) {
    cleanup();
    return w.status();
  }
  l.disk_write_gbps = *w;
  drop_caches();
  auto r = run(false);
  if (!r.ok()) {
    cleanup();
    return r.status();
  }
  l.disk_read_gbps = *r;
  drop_caches();
  {
    auto f = t->Open(paths[0], false, 0);
    if (f.ok()) {
      auto start = Clock::now();
      auto ops = (*f)->RandomReads(per, 32, 8, 1.0, 7);
      double secs = Seconds(start);
      (*f)->Close().IgnoreError();  // read-only
      if (ops.ok())
        l.disk_rand_iops = static_cast<double>(*ops) / secs;
    }
  }
  cleanup();
  CIUIC_ASSIGN_OR_RETURN(l.loopback_gbps, LoopbackGbps(std::min<uint64_t>(bytes, 2ull << 30)));
  return l;
}

void FlagCacheInflated(Report& report,
                       const Limits& limits,
                       const std::map<std::string, bool>& over_network) {
  for (const auto& m : report.metrics()) {
    double limit = 0;
    std::string what;
    auto net = over_network.find(m.target);
    bool network = net != over_network.end() && net->second;
    if (m.name.rfind("seq_read", 0) == 0) {
      limit = limits.disk_read_gbps;
      what = "disk read";
    } else if (m.name.rfind("seq_write", 0) == 0) {
      limit = limits.disk_write_gbps;
      what = "disk write";
    } else if (m.name == "rand_read_4k") {
      limit = limits.disk_rand_iops;
      what = "disk 4 KiB random read";
    } else {
      continue;
    }
    if (network && m.unit == "GB/s" && limits.loopback_gbps > 0 && limits.loopback_gbps < limit) {
      limit = limits.loopback_gbps;
      what = "loopback TCP";
    }
    double median = Summarize(m.runs).median;
    // Fsynced writes cannot be served by a cache, so only a write far above the disk (a file
    // system that ignores fsync) is flagged; the limit's own noise is about 20 % here.
    const double slack = m.name.rfind("seq_write", 0) == 0 ? 0.5 : 0.1;
    if (ExceedsLimit(median, limit, slack)) {
      Metric* mm = report.FindMutable(m.name, m.target);
      mm->cache_inflated = true;
      mm->note = fmt::format("above the {} limit measured in this run ({:.3f}): cache-inflated",
                             what, limit);
    }
  }
}

}  // namespace ciuic::bench
