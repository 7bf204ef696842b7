// net_bench: RPC throughput over loopback with data segments.
//
//   net_bench [--size BYTES] [--inflight N] [--seconds S] [--server-threads N] [--client-threads N]
//             [--metrics 0|1] [--micro N]
//
// Runs an RpcServer and an RpcChannel in one process. "write" sends SIZE bytes per call to the
// server (which receives them into an aligned buffer and answers with an empty reply); "read"
// asks for SIZE bytes, which the server sends from one static buffer and the client receives
// straight into a per-slot destination. N calls are kept in flight. --metrics 1 has the server
// export its metrics (and the client send a job id), to measure their cost per request.
// --micro N runs only the per-request accounting that RpcServer does with metrics on, N times on
// one thread, and prints its cost in ns (the loopback figures above are too noisy to show it on a
// shared 2-core machine).
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ciuic.pb.h"
#include "common/metrics.h"
#include "net/rpc.h"
#include "net/rpc_metrics.h"

namespace ciuic::net {
namespace {

struct Args {
  size_t size = 1 << 20;
  int inflight = 16;
  double seconds = 3;
  int server_threads = 1;
  int client_threads = 1;
  bool metrics = false;
};

struct Run {
  std::shared_ptr<RpcChannel> ch;
  MsgType type;
  size_t size;
  std::chrono::steady_clock::time_point deadline;
  std::vector<uint8_t> payload;
  std::vector<std::vector<uint8_t>> dests;
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> errors{0};
  std::mutex mu;
  std::condition_variable cv;
  int active = 0;

  void Issue(int slot) {
    std::vector<ConstSpan> out;
    if (type == MsgType::kWrite)
      out.push_back({payload.data(), payload.size()});
    pb::ReadReq req;
    ch->CallAsync(type, req, std::move(out), std::span<uint8_t>(dests[slot]),
                  [this, slot](Result<Reply> r) {
                    if (!r.ok()) {
                      ++errors;
                      std::fprintf(stderr, "call failed: %s\n", r.status().ToString().c_str());
                    } else {
                      ++calls;
                    }
                    if (r.ok() && std::chrono::steady_clock::now() < deadline) {
                      Issue(slot);
                      return;
                    }
                    std::lock_guard<std::mutex> lock(mu);
                    if (--active == 0)
                      cv.notify_all();
                  });
  }
};

// CPU seconds (user + system) this process has used: the cost per call on a machine whose
// cores are shared, where calls/s depends on what else runs.
double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

void Measure(const char* name, const std::shared_ptr<RpcChannel>& ch, MsgType type, const Args& a) {
  Run run;
  run.ch = ch;
  run.type = type;
  run.size = a.size;
  run.payload.assign(a.size, 0x5A);
  run.dests.assign(a.inflight, std::vector<uint8_t>(type == MsgType::kRead ? a.size : 0));
  auto start = std::chrono::steady_clock::now();
  const double cpu0 = CpuSeconds();
  run.deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(a.seconds));
  run.active = a.inflight;
  for (int i = 0; i < a.inflight; ++i)
    run.Issue(i);
  {
    std::unique_lock<std::mutex> lock(run.mu);
    run.cv.wait(lock, [&] { return run.active == 0; });
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double calls = static_cast<double>(run.calls.load());
  double cpu = CpuSeconds() - cpu0;
  std::printf(
      "%-5s size=%zu inflight=%d: %.0f calls/s, %.2f GiB/s, %.1f us/call avg latency, "
      "%.2f us CPU/call (client + server), errors=%llu\n",
      name, a.size, a.inflight, calls / secs,
      calls * static_cast<double>(a.size) / secs / (1024.0 * 1024 * 1024),
      secs / calls * a.inflight * 1e6, cpu / calls * 1e6,
      static_cast<unsigned long long>(run.errors.load()));
}

// Repeats what ServerConn::Dispatch and CallState::Account do per request when the server
// exports metrics.
void Micro(uint64_t n) {
  metrics::Registry registry;
  auto m = std::make_shared<detail::RpcMetrics>(&registry, 64);
  detail::OpMetrics* op = m->AddOp(static_cast<uint16_t>(MsgType::kRead));
  m->Freeze([] { return size_t{1}; }, [] { return uint64_t{0}; });
  detail::JobStats* job = m->Job("bench");
  auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < n; ++i) {
    std::shared_ptr<detail::RpcMetrics> held = m;  // CallState's copy
    auto received = std::chrono::steady_clock::now();
    op->requests->Inc();
    op->request_bytes->Inc(32 + 40);
    held->inflight()->Add(1);
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                  std::chrono::steady_clock::now() - received)
                  .count();
    op->latency->Observe(static_cast<uint64_t>(us));
    op->reply_bytes->Inc(32 + 20 + 4096);
    held->inflight()->Add(-1);
    job->ops[op->index].fetch_add(1, std::memory_order_relaxed);
    job->read_bytes.fetch_add(4096, std::memory_order_relaxed);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("accounting per request (metrics on): %.1f ns (%llu requests)\n", secs / n * 1e9,
              static_cast<unsigned long long>(n));
}

int Main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--size") {
      a.size = std::strtoull(v, nullptr, 10);
    } else if (k == "--inflight") {
      a.inflight = std::atoi(v);
    } else if (k == "--seconds") {
      a.seconds = std::atof(v);
    } else if (k == "--server-threads") {
      a.server_threads = std::atoi(v);
    } else if (k == "--client-threads") {
      a.client_threads = std::atoi(v);
    } else if (k == "--micro") {
      Micro(std::strtoull(v, nullptr, 10));
      return 0;
    } else if (k == "--metrics") {
      a.metrics = std::atoi(v) != 0;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (a.inflight < 1 || a.size == 0 || a.size > (64u << 20)) {
    std::fprintf(stderr, "need --inflight >= 1 and 0 < --size <= 64 MiB\n");
    return 2;
  }
  RpcServer::Options so;
  so.secret = "bench-secret";
  so.io_threads = a.server_threads;
  so.name = "bench";
  metrics::Registry registry;
  if (a.metrics)
    so.metrics = &registry;
  RpcServer server(so);
  auto payload = std::make_shared<std::vector<uint8_t>>(a.size, 0xA5);
  server.Register(MsgType::kWrite, [](ServerCall c) { c.Reply(pb::WriteResp()); });
  server.Register(MsgType::kRead, [payload](ServerCall c) {
    c.Reply(pb::ReadResp(), {ConstSpan{payload->data(), payload->size()}}, payload);
  });
  if (Status s = server.Start(); !s.ok()) {
    std::fprintf(stderr, "server: %s\n", s.ToString().c_str());
    return 1;
  }
  EventLoop loop(a.client_threads);
  ChannelOptions co;
  co.secret = "bench-secret";
  if (a.metrics)
    co.job_id = "bench";
  auto ch = RpcChannel::Connect(&loop, HostPort{"127.0.0.1", server.port()}, co);
  if (!ch.ok()) {
    std::fprintf(stderr, "connect: %s\n", ch.status().ToString().c_str());
    return 1;
  }
  Measure("write", *ch, MsgType::kWrite, a);
  Measure("read", *ch, MsgType::kRead, a);
  if (a.metrics) {
    auto ex = metrics::ParseExposition(registry.Render());
    std::printf("metrics: %s, %.0f requests counted\n", ex.ok() ? "parse" : "DO NOT PARSE",
                ex.ok() ? ex->Sum("ciuic_rpc_requests_total") : 0.0);
  }
  (*ch)->Close();
  return 0;
}

}  // namespace
}  // namespace ciuic::net

int main(int argc, char** argv) {
  return ciuic::net::Main(argc, argv);
}
