// Helpers shared by the net tests: an echo server, deadline waits, test bytes.
#pragma once

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ciuic.pb.h"
#include "net/rpc.h"

namespace ciuic::net::testing {

inline constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";
inline constexpr char kUuid[] = "8c4e1f60-2d7e-4c5e-9a3b-1f2e3d4c5b6a";

// Polls `pred` until it holds or `timeout` passes; returns its last value.
inline bool WaitFor(const std::function<bool()>& pred,
                    std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline)
      return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

inline std::vector<uint8_t> TestBytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x = rng();
    std::memcpy(v.data() + i, &x, 8);
  }
  for (; i < n; ++i)
    v[i] = static_cast<uint8_t>(rng());
  return v;
}

inline RpcServer::Options ServerOptions() {
  RpcServer::Options o;
  o.secret = kSecret;
  o.cluster_uuid = kUuid;
  o.name = "test-server";
  return o;
}

inline ChannelOptions ClientOptions() {
  ChannelOptions o;
  o.secret = kSecret;
  return o;
}

// Registers kGetXattr as an echo: the reply's value is the request's name and the reply's data
// segment is the request's data segment.
inline void RegisterEcho(RpcServer* server) {
  server->Register(MsgType::kGetXattr, [](ServerCall call) {
    pb::GetXattrReq req;
    Status s = call.ParseBody(&req);
    if (!s.ok()) {
      call.ReplyError(s);
      return;
    }
    pb::GetXattrResp resp;
    resp.set_value(req.name());
    auto buf = std::make_shared<AlignedBuffer>(std::move(call.data()));
    std::vector<ConstSpan> spans;
    if (!buf->empty())
      spans.push_back({buf->data(), buf->size()});
    call.Reply(resp, std::move(spans), buf);
  });
}

inline pb::GetXattrReq EchoReq(const std::string& name) {
  pb::GetXattrReq r;
  r.set_name(name);
  return r;
}

}  // namespace ciuic::net::testing
