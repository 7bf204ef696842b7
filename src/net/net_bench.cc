// net_bench: RPC throughput over loopback with data segments.
//
//   net_bench [--size BYTES] [--inflight N] [--seconds S] [--server-threads N] [--client-threads N]
//
// Runs an RpcServer and an RpcChannel in one process. "write" sends SIZE bytes per call to the
// server (which receives them into an aligned buffer and answers with an empty reply); "read"
// asks for SIZE bytes, which the server sends from one static buffer and the client receives
// straight into a per-slot destination. N calls are kept in flight.
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
#include "net/rpc.h"

namespace ciuic::net {
namespace {

struct Args {
  size_t size = 1 << 20;
  int inflight = 16;
  double seconds = 3;
  int server_threads = 1;
  int client_threads = 1;
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

void Measure(const char* name, const std::shared_ptr<RpcChannel>& ch, MsgType type, const Args& a) {
  Run run;
  run.ch = ch;
  run.type = type;
  run.size = a.size;
  run.payload.assign(a.size, 0x5A);
  run.dests.assign(a.inflight, std::vector<uint8_t>(type == MsgType::kRead ? a.size : 0));
  auto start = std::chrono::steady_clock::now();
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
  std::printf(
      "%-5s size=%zu inflight=%d: %.0f calls/s, %.2f GiB/s, %.1f us/call avg latency, "
      "errors=%llu\n",
      name, a.size, a.inflight, calls / secs,
      calls * static_cast<double>(a.size) / secs / (1024.0 * 1024 * 1024),
      secs / calls * a.inflight * 1e6, static_cast<unsigned long long>(run.errors.load()));
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
  auto ch = RpcChannel::Connect(&loop, HostPort{"127.0.0.1", server.port()}, co);
  if (!ch.ok()) {
    std::fprintf(stderr, "connect: %s\n", ch.status().ToString().c_str());
    return 1;
  }
  Measure("write", *ch, MsgType::kWrite, a);
  Measure("read", *ch, MsgType::kRead, a);
  (*ch)->Close();
  return 0;
}

}  // namespace
}  // namespace ciuic::net

int main(int argc, char** argv) {
  return ciuic::net::Main(argc, argv);
}
