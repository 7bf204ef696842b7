// `ciuic top`: scrapes the servers' /metrics, computes rates between two scrapes, prints tables.
#include "top_cmd.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cluster_cmd.h"
#include "common/config.h"
#include "common/metrics.h"
#include "net/http_server.h"

namespace ciuic::cli {
namespace {

struct Endpoint {
  std::string name;
  HostPort addr;
  std::string path = "/metrics";
};

// Parses http://HOST:PORT[/path] or HOST:PORT.
Result<Endpoint> ParseUrl(const std::string& url) {
  std::string rest = url;
  if (rest.starts_with("http://"))
    rest = rest.substr(7);
  Endpoint e;
  e.name = rest;
  if (size_t slash = rest.find('/'); slash != std::string::npos) {
    e.path = rest.substr(slash);
    rest = rest.substr(0, slash);
    e.name = rest;
  }
  CIUIC_ASSIGN_OR_RETURN(e.addr, HostPort::Parse(rest));
  return e;
}

// What one round of scrapes saw, summed over the servers.
struct Snapshot {
  std::chrono::steady_clock::time_point at;
  int answered = 0;
  std::vector<std::string> failed;
  struct Job {
    double ops = 0, read = 0, written = 0;
  };
  std::map<std::string, Job> jobs;
  struct Ost {
    std::string server;
    double ops = 0, read = 0, written = 0, errors = 0, used = 0, capacity = 0;
  };
  std::map<int, Ost> osts;
};

Snapshot Scrape(const std::vector<Endpoint>& eps) {
  Snapshot s;
  s.at = std::chrono::steady_clock::now();
  for (const auto& e : eps) {
    auto r = net::HttpGet(e.addr, e.path, 2000);
    if (!r.ok() || r->status != 200) {
      s.failed.push_back(fmt::format(
          "{} ({})", e.name,
          r.ok() ? fmt::format("HTTP {}", r->status) : std::string(r.status().message())));
      continue;
    }
    auto ex = metrics::ParseExposition(r->body);
    if (!ex.ok()) {
      s.failed.push_back(fmt::format("{} ({})", e.name, ex.status().message()));
      continue;
    }
    ++s.answered;
    for (const auto& m : ex->samples) {
      auto label = [&](const char* k) {
        auto it = m.labels.find(k);
        return it == m.labels.end() ? std::string() : it->second;
      };
      if (m.name == "ciuic_job_ops_total") {
        s.jobs[label("job")].ops += m.value;
      } else if (m.name == "ciuic_job_read_bytes_total") {
        s.jobs[label("job")].read += m.value;
      } else if (m.name == "ciuic_job_write_bytes_total") {
        s.jobs[label("job")].written += m.value;
      } else if (m.name.starts_with("ciuic_ost_")) {
        Snapshot::Ost& o = s.osts[std::atoi(label("ost").c_str())];
        o.server = e.name;
        if (m.name == "ciuic_ost_ops_total")
          o.ops += m.value;
        else if (m.name == "ciuic_ost_errors_total")
          o.errors += m.value;
        else if (m.name == "ciuic_ost_read_bytes_total")
          o.read += m.value;
        else if (m.name == "ciuic_ost_write_bytes_total")
          o.written += m.value;
        else if (m.name == "ciuic_ost_used_bytes")
          o.used = m.value;
        else if (m.name == "ciuic_ost_capacity_bytes")
          o.capacity = m.value;
      }
    }
  }
  return s;
}

std::string Render(const Snapshot& prev, const Snapshot& cur) {
  double dt = std::chrono::duration<double>(cur.at - prev.at).count();
  if (dt <= 0)
    dt = 1;
  auto rate = [dt](double now, double before) { return now > before ? (now - before) / dt : 0.0; };
  constexpr double kMB = 1e6;
  std::time_t t = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  std::string out = fmt::format("ciuic top  {}  {} server(s) answered, interval {:.1f} s\n", when,
                                cur.answered, dt);
  for (const auto& f : cur.failed)
    out += fmt::format("  no answer: {}\n", f);
  out += fmt::format("\n{:<24} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "JOB", "OPS/s",
                     "READ MB/s", "WRITE MB/s", "OPS", "READ MB", "WRITE MB");
  for (const auto& [job, j] : cur.jobs) {
    auto it = prev.jobs.find(job);
    Snapshot::Job p = it == prev.jobs.end() ? Snapshot::Job{} : it->second;
    out += fmt::format("{:<24} {:>9.1f} {:>10.2f} {:>10.2f} {:>10.0f} {:>10.1f} {:>10.1f}\n",
                       job.empty() ? "-" : job.substr(0, 24), rate(j.ops, p.ops),
                       rate(j.read, p.read) / kMB, rate(j.written, p.written) / kMB, j.ops,
                       j.read / kMB, j.written / kMB);
  }
  if (cur.jobs.empty())
    out += "(no job has done IO yet)\n";
  out +=
      fmt::format("\n{:>4} {:<22} {:>9} {:>10} {:>10} {:>7} {:>10} {:>10} {:>5}\n", "OST", "SERVER",
                  "OPS/s", "READ MB/s", "WRITE MB/s", "ERRORS", "USED GB", "SIZE GB", "USE%");
  for (const auto& [index, o] : cur.osts) {
    auto it = prev.osts.find(index);
    Snapshot::Ost p = it == prev.osts.end() ? Snapshot::Ost{} : it->second;
    out += fmt::format(
        "{:>4} {:<22} {:>9.1f} {:>10.2f} {:>10.2f} {:>7.0f} {:>10.2f} {:>10.2f} {:>4.0f}%\n", index,
        o.server.substr(0, 22), rate(o.ops, p.ops), rate(o.read, p.read) / kMB,
        rate(o.written, p.written) / kMB, o.errors, o.used / 1e9, o.capacity / 1e9,
        o.capacity > 0 ? 100.0 * o.used / o.capacity : 0.0);
  }
  return out;
}

}  // namespace

int Top(const TopOptions& o) {
  std::vector<Endpoint> eps;
  for (const auto& u : o.urls) {
    auto e = ParseUrl(u);
    if (!e.ok()) {
      std::fprintf(stderr, "ciuic: bad endpoint '%s': %s\n", u.c_str(),
                   std::string(e.status().message()).c_str());
      return 1;
    }
    eps.push_back(*e);
  }
  if (o.urls.empty()) {
    for (const auto& m : MetricsEndpoints(o.dir))
      eps.push_back({m.name, HostPort{m.host, m.port}});
  }
  if (eps.empty()) {
    std::fprintf(stderr,
                 "ciuic: no metrics endpoints: no running server of the cluster in %s records "
                 "one (run/*.metrics_port); pass --url HOST:PORT\n",
                 o.dir.c_str());
    return 1;
  }
  const bool tty = ::isatty(STDOUT_FILENO) != 0 && !o.once;
  const auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(o.interval_s > 0 ? o.interval_s : 1.0));
  Snapshot prev = Scrape(eps);
  if (prev.answered == 0) {
    std::fprintf(stderr, "ciuic: no metrics endpoint answered: %s\n",
                 prev.failed.empty() ? "" : prev.failed[0].c_str());
    return 1;
  }
  for (int i = 0; o.iterations == 0 || i < o.iterations; ++i) {
    std::this_thread::sleep_until(prev.at + interval);
    Snapshot cur = Scrape(eps);
    std::string text = Render(prev, cur);
    if (tty)
      std::fputs("\x1b[H\x1b[2J", stdout);  // home, clear screen
    else if (i > 0)
      std::fputs("\n", stdout);
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    if (o.once)
      break;
    prev = std::move(cur);
  }
  return 0;
}

}  // namespace ciuic::cli
