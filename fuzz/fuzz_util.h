// Helpers shared by the libFuzzer targets in fuzz/: a reader that takes typed values off the
// fuzzer's input, and a blocking in-process RPC call for the server targets.
// Thread-safety: a FuzzReader belongs to one call; CallInProcess blocks its caller.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "net/rpc.h"

namespace ciuic::fuzz {

// Takes little-endian integers and byte strings off the front of the input; past the end every
// value is zero and every string empty, so a target never reads out of bounds.
class FuzzReader {
 public:
  FuzzReader(const uint8_t* data, size_t size) : rest_(reinterpret_cast<const char*>(data), size) {}
  bool empty() const { return rest_.empty(); }
  size_t size() const { return rest_.size(); }
  uint8_t U8() { return static_cast<uint8_t>(Int(1)); }
  uint16_t U16() { return static_cast<uint16_t>(Int(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Int(4)); }
  // Up to `n` bytes.
  std::string_view Bytes(size_t n) {
    std::string_view b = rest_.substr(0, n);
    rest_.remove_prefix(b.size());
    return b;
  }
  // A string of U16() bytes at most.
  std::string_view Sized() { return Bytes(U16()); }
  std::string_view Rest() { return Bytes(rest_.size()); }

 private:
  uint64_t Int(size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n && !rest_.empty(); ++i) {
      v |= uint64_t{static_cast<uint8_t>(rest_[0])} << (8 * i);
      rest_.remove_prefix(1);
    }
    return v;
  }
  std::string_view rest_;
};

// Hands one request to `server`'s handler (RpcServer::TEST_Dispatch) and waits for the reply.
// A handler that never replies is a bug: after 60 s the process aborts, which the fuzzer
// reports with the input.
inline net::RpcServer::TestReply CallInProcess(net::RpcServer* server,
                                               net::MsgType type,
                                               net::Role role,
                                               uint32_t key_id,
                                               std::string body,
                                               std::string data = {}) {
  struct Waiter {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    net::RpcServer::TestReply reply;
  };
  auto w = std::make_shared<Waiter>();
  server->TEST_Dispatch(type, role, key_id, std::move(body), std::move(data),
                        [w](net::RpcServer::TestReply r) {
                          std::lock_guard<std::mutex> lock(w->mu);
                          w->reply = std::move(r);
                          w->done = true;
                          w->cv.notify_all();
                        });
  std::unique_lock<std::mutex> lock(w->mu);
  if (!w->cv.wait_for(lock, std::chrono::seconds(60), [&] { return w->done; })) {
    std::fprintf(stderr, "fuzz: no reply to message type %u in 60 s\n",
                 static_cast<unsigned>(type));
    std::abort();
  }
  return std::move(w->reply);
}

}  // namespace ciuic::fuzz
