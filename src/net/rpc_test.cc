// End-to-end RPC tests over real TCP on 127.0.0.1 with ephemeral ports.
#include "net/rpc.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ciuic.pb.h"
#include "common/crc32c.h"
#include "common/thread_pool.h"
#include "net/test_util.h"

namespace ciuic::net {
namespace {

using testing::ClientOptions;
using testing::EchoReq;
using testing::RegisterEcho;
using testing::ServerOptions;
using testing::TestBytes;
using testing::WaitFor;

// Holds ServerCalls that a test answers later.
class CallParking {
 public:
  void Park(ServerCall c) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(std::move(c));
    ++parked_total_;
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_.size();
  }
  size_t parked_total() {
    std::lock_guard<std::mutex> lock(mu_);
    return parked_total_;
  }
  std::vector<ServerCall> TakeAll() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(calls_);
  }

 private:
  std::mutex mu_;
  std::vector<ServerCall> calls_;
  size_t parked_total_ = 0;
};

class RpcTest : public ::testing::Test {
 protected:
  void StartServer(RpcServer::Options o = ServerOptions()) {
    server_ = std::make_unique<RpcServer>(std::move(o));
    RegisterEcho(server_.get());
    server_->Register(MsgType::kRead, [this](ServerCall c) { parking_.Park(std::move(c)); });
    server_->Register(MsgType::kWrite, [](ServerCall c) { (void)c; });  // drops without reply
    // Answers with the CRC32C of the request's data segment.
    server_->Register(MsgType::kSetXattr, [](ServerCall c) {
      pb::GetXattrResp resp;
      resp.set_value(std::to_string(Crc32c(c.data().data(), c.data().size())));
      c.Reply(resp);
    });
    server_->Register(MsgType::kRegisterOss, [](ServerCall c) { c.Reply(pb::RegisterOssResp()); },
                      {Role::kOss});
    ASSERT_TRUE(server_->Start().ok());
  }
  HostPort addr() const { return HostPort{"127.0.0.1", server_->port()}; }
  std::shared_ptr<RpcChannel> Connect(ChannelOptions o = ClientOptions()) {
    auto ch = RpcChannel::Connect(&loop_, addr(), o);
    EXPECT_TRUE(ch.ok()) << ch.status().ToString();
    return ch.ok() ? *ch : nullptr;
  }

  EventLoop loop_{2};
  std::unique_ptr<RpcServer> server_;
  CallParking parking_;
};

TEST_F(RpcTest, EchoRoundTripWithBody) {
  StartServer();
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  EXPECT_EQ(ch->cluster_uuid(), testing::kUuid);
  EXPECT_TRUE(ch->connected());
  pb::GetXattrResp resp;
  ASSERT_TRUE(ch->CallMsg(MsgType::kGetXattr, EchoReq("hello"), &resp).ok());
  EXPECT_EQ(resp.value(), "hello");
  // A big body (several MiB) goes through as well.
  std::string big(3 << 20, 'x');
  ASSERT_TRUE(ch->CallMsg(MsgType::kGetXattr, EchoReq(big), &resp).ok());
  EXPECT_EQ(resp.value(), big);
  EXPECT_EQ(server_->connections_accepted(), 1u);
  EXPECT_EQ(server_->frames_rejected(), 0u);
}

TEST_F(RpcTest, DataSegmentLandsInCallerDestination) {
  StartServer();
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  for (size_t size : {size_t{1}, size_t{4095}, size_t{65536}, size_t{1} << 20, size_t{5} << 20}) {
    auto data = TestBytes(size, size);
    std::vector<uint8_t> dest(size + 100, 0xEE);
    // Sent in two spans to exercise the gather write.
    size_t half = size / 2;
    auto r = ch->Call(MsgType::kGetXattr, EchoReq("d"),
                      {ConstSpan{data.data(), half}, ConstSpan{data.data() + half, size - half}},
                      std::span<uint8_t>(dest));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->data_len, size);
    EXPECT_TRUE(r->data_in_dest);
    EXPECT_TRUE(r->data.empty());
    EXPECT_EQ(std::memcmp(dest.data(), data.data(), size), 0) << size;
    EXPECT_EQ(dest[size], 0xEE);
  }
}

TEST_F(RpcTest, DataSegmentTooBigForDestinationGoesToReplyData) {
  StartServer();
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  auto data = TestBytes(300000, 7);
  std::vector<uint8_t> dest(1000, 0xEE);
  auto r = ch->Call(MsgType::kGetXattr, EchoReq("d"), {ConstSpan{data.data(), data.size()}},
                    std::span<uint8_t>(dest));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->data_in_dest);
  ASSERT_EQ(r->data.size(), data.size());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r->data.data()) % kDirectIoAlign, 0u);
  EXPECT_EQ(std::memcmp(r->data.data(), data.data(), data.size()), 0);
  EXPECT_EQ(dest[0], 0xEE);
}

TEST_F(RpcTest, ServerReceivesDataInAlignedBuffer) {
  auto o = ServerOptions();
  server_ = std::make_unique<RpcServer>(o);
  std::atomic<bool> aligned{false};
  server_->Register(MsgType::kWrite, [&](ServerCall c) {
    aligned = reinterpret_cast<uintptr_t>(c.data().data()) % kDirectIoAlign == 0 &&
              c.data().size() == 8192;
    c.Reply(pb::WriteResp());
  });
  ASSERT_TRUE(server_->Start().ok());
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  auto data = TestBytes(8192, 1);
  ASSERT_TRUE(
      ch->Call(MsgType::kWrite, pb::WriteReq(), {ConstSpan{data.data(), data.size()}}).ok());
  EXPECT_TRUE(aligned);
}

TEST_F(RpcTest, ManyConcurrentPipelinedCallsFromSeveralThreads) {
  auto o = ServerOptions();
  o.io_threads = 2;
  StartServer(o);
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  constexpr int kThreads = 4;
  constexpr int kCallsPerThread = 300;
  std::atomic<int> ok{0};
  std::atomic<int> bad{0};
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsPerThread; ++i) {
        std::string name = std::to_string(t) + "/" + std::to_string(i);
        auto data = std::make_shared<std::vector<uint8_t>>(TestBytes(1000 + i, t * 1000 + i));
        auto dest = std::make_shared<std::vector<uint8_t>>(data->size());
        ch->CallAsync(MsgType::kGetXattr, EchoReq(name), {ConstSpan{data->data(), data->size()}},
                      std::span<uint8_t>(*dest), [&, name, data, dest](Result<Reply> r) {
                        pb::GetXattrResp resp;
                        if (r.ok() && Parse(r->body, &resp, "resp").ok() && resp.value() == name &&
                            r->data_in_dest && *data == *dest) {
                          ++ok;
                        } else {
                          ++bad;
                        }
                        ++done;
                      });
      }
    });
  }
  for (auto& t : threads)
    t.join();
  ASSERT_TRUE(WaitFor([&] { return done.load() == kThreads * kCallsPerThread; }));
  EXPECT_EQ(ok.load(), kThreads * kCallsPerThread);
  EXPECT_EQ(bad.load(), 0);
}

TEST_F(RpcTest, HandlerRepliesLaterFromAnotherThread) {
  StartServer();
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  std::thread replier([&] {
    ASSERT_TRUE(WaitFor([&] { return parking_.size() == 1; }));
    for (auto& c : parking_.TakeAll()) {
      pb::ReadResp resp;
      static const char kPayload[] = "late data";
      c.Reply(resp, {ConstSpan{kPayload, sizeof(kPayload)}});
    }
  });
  std::vector<uint8_t> dest(64);
  auto r = ch->Call(MsgType::kRead, pb::ReadReq(), {}, std::span<uint8_t>(dest));
  replier.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->data_len, sizeof("late data"));
  EXPECT_STREQ(reinterpret_cast<const char*>(dest.data()), "late data");
}

TEST_F(RpcTest, DroppedServerCallRepliesInternal) {
  StartServer();
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  auto r = ch->Call(MsgType::kWrite, pb::WriteReq());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("no reply"), std::string::npos);
}

TEST_F(RpcTest, SecondReplyIsIgnored) {
  auto o = ServerOptions();
  server_ = std::make_unique<RpcServer>(o);
  server_->Register(MsgType::kPunch, [](ServerCall c) {
    c.Reply(pb::PunchResp());
    c.ReplyError(Status::IoError("too late"));
    EXPECT_TRUE(c.replied());
  });
  ASSERT_TRUE(server_->Start().ok());
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  for (int i = 0; i < 3; ++i) {
    pb::PunchResp resp;
    EXPECT_TRUE(ch->CallMsg(MsgType::kPunch, pb::PunchReq(), &resp).ok());
  }
}

TEST_F(RpcTest, UnknownTypeIsNotSupportedAndConnectionStaysUp) {
  StartServer();
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  auto data = TestBytes(100000, 3);
  auto r = ch->Call(MsgType::kRename, pb::RenameReq(), {ConstSpan{data.data(), data.size()}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotSupported);
  EXPECT_TRUE(ch->connected());
  pb::GetXattrResp resp;
  ASSERT_TRUE(ch->CallMsg(MsgType::kGetXattr, EchoReq("still up"), &resp).ok());
  EXPECT_EQ(resp.value(), "still up");
  EXPECT_EQ(server_->frames_rejected(), 0u);
}

TEST_F(RpcTest, PingIsAnsweredWithoutAHandler) {
  StartServer();
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  auto r = ch->Call(MsgType::kPing, pb::CloseSessionResp());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->body.empty());
}

TEST_F(RpcTest, RoleRestrictedHandler) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  pb::RegisterOssResp resp;
  Status s = client->CallMsg(MsgType::kRegisterOss, pb::RegisterOssReq(), &resp);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_TRUE(client->connected());
  auto o = ClientOptions();
  o.role = Role::kOss;
  auto oss = Connect(o);
  ASSERT_NE(oss, nullptr);
  EXPECT_TRUE(oss->CallMsg(MsgType::kRegisterOss, pb::RegisterOssReq(), &resp).ok());
}

TEST_F(RpcTest, ClientWithWrongSecretIsDenied) {
  StartServer();
  auto o = ClientOptions();
  o.secret = "not the cluster secret";
  auto ch = RpcChannel::Connect(&loop_, addr(), o);
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kPermissionDenied) << ch.status().ToString();
  // The server still serves clients that know the secret.
  EXPECT_NE(Connect(), nullptr);
}

TEST_F(RpcTest, ServerWithWrongSecretIsDenied) {
  auto so = ServerOptions();
  so.secret = "an impostor's secret";
  StartServer(so);
  auto ch = RpcChannel::Connect(&loop_, addr(), ClientOptions());
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kPermissionDenied) << ch.status().ToString();
}

TEST_F(RpcTest, UnknownKeyIdIsDenied) {
  StartServer();
  auto o = ClientOptions();
  o.key_id = 7;
  auto ch = RpcChannel::Connect(&loop_, addr(), o);
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kPermissionDenied) << ch.status().ToString();
}

TEST_F(RpcTest, ProtocolVersionMismatchIsNotSupported) {
  StartServer();
  auto o = ClientOptions();
  o.min_version = kProtocolVersion + 1;
  o.max_version = kProtocolVersion + 3;
  auto ch = RpcChannel::Connect(&loop_, addr(), o);
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kNotSupported) << ch.status().ToString();
  EXPECT_NE(Connect(), nullptr);
}

TEST_F(RpcTest, OverlappingVersionRangesAgreeOnTheHighest) {
  auto so = ServerOptions();
  so.max_version = kProtocolVersion + 2;
  StartServer(so);
  auto o = ClientOptions();
  o.max_version = kProtocolVersion + 1;
  EXPECT_NE(Connect(o), nullptr);
}

TEST(RpcConnectTest, UnreachableServerIsUnavailable) {
  // Find a free port, then make sure nothing listens on it.
  uint16_t port;
  {
    RpcServer s(ServerOptions());
    ASSERT_TRUE(s.Start().ok());
    port = s.port();
  }
  EventLoop loop;
  auto ch = RpcChannel::Connect(&loop, HostPort{"127.0.0.1", port}, ClientOptions());
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kUnavailable) << ch.status().ToString();
}

TEST_F(RpcTest, TimeoutAndLateReplyIsDiscarded) {
  StartServer();
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  std::vector<uint8_t> dest(4096, 0xAB);
  auto r = ch->Call(MsgType::kRead, pb::ReadReq(), {}, std::span<uint8_t>(dest), 100);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kTimedOut) << r.status().ToString();
  // The late reply carries data for the destination the caller gave up: it must not land there.
  ASSERT_TRUE(WaitFor([&] { return parking_.size() == 1; }));
  auto payload = std::make_shared<std::vector<uint8_t>>(4096, 0x11);
  for (auto& c : parking_.TakeAll()) {
    c.Reply(pb::ReadResp(), {ConstSpan{payload->data(), payload->size()}}, payload);
  }
  // Replies come back in order on one connection: once the echo is back, the late reply was read.
  pb::GetXattrResp resp;
  ASSERT_TRUE(ch->CallMsg(MsgType::kGetXattr, EchoReq("after"), &resp).ok());
  EXPECT_EQ(resp.value(), "after");
  for (uint8_t b : dest)
    ASSERT_EQ(b, 0xAB);
  EXPECT_TRUE(ch->connected());
}

TEST_F(RpcTest, ServerStoppedWhileCallsPendingFailsThemUnavailable) {
  StartServer();
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  std::atomic<int> unavailable{0};
  std::atomic<int> done{0};
  for (int i = 0; i < 5; ++i) {
    ch->CallAsync(MsgType::kRead, pb::ReadReq(), {}, {}, [&](Result<Reply> r) {
      if (!r.ok() && r.status().code() == StatusCode::kUnavailable)
        ++unavailable;
      ++done;
    });
  }
  ASSERT_TRUE(WaitFor([&] { return parking_.size() == 5; }));
  server_->Stop();
  ASSERT_TRUE(WaitFor([&] { return done.load() == 5; }));
  EXPECT_EQ(unavailable.load(), 5);
  EXPECT_TRUE(WaitFor([&] { return !ch->connected(); }));
  // Replies after Stop are no-ops; the calls die with the test after this.
  for (auto& c : parking_.TakeAll())
    c.Reply(pb::ReadResp());
  auto r = ch->Call(MsgType::kGetXattr, EchoReq("x"));
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("lost"), std::string::npos) << r.status().ToString();
}

TEST_F(RpcTest, ServerCallsHeldByOtherThreadsSurviveServerDestruction) {
  StartServer();
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  ch->CallAsync(MsgType::kRead, pb::ReadReq(), {}, {}, [](Result<Reply>) {});
  ASSERT_TRUE(WaitFor([&] { return parking_.size() == 1; }));
  std::vector<ServerCall> held = parking_.TakeAll();
  std::thread t([&] { server_.reset(); });
  t.join();
  held[0].Reply(pb::ReadResp());
  held.clear();  // destructors after the server is gone
}

TEST_F(RpcTest, BackpressureBoundsRequestsInFlightPerConnection) {
  auto o = ServerOptions();
  o.max_inflight_per_conn = 2;
  StartServer(o);
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  std::atomic<int> done{0};
  for (int i = 0; i < 10; ++i) {
    ch->CallAsync(MsgType::kRead, pb::ReadReq(), {}, {}, [&](Result<Reply> r) {
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      ++done;
    });
  }
  size_t answered = 0;
  while (answered < 10) {
    ASSERT_TRUE(WaitFor([&] { return parking_.size() > 0; }));
    EXPECT_LE(parking_.size(), 2u);
    auto calls = parking_.TakeAll();
    EXPECT_LE(calls.size(), 2u);
    for (auto& c : calls)
      c.Reply(pb::ReadResp());
    answered += calls.size();
  }
  ASSERT_TRUE(WaitFor([&] { return done.load() == 10; }));
  EXPECT_EQ(parking_.parked_total(), 10u);
}

TEST_F(RpcTest, ClosedChannelFailsCallsAtOnce) {
  StartServer();
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  ch->Close();
  EXPECT_FALSE(ch->connected());
  auto r = ch->Call(MsgType::kGetXattr, EchoReq("x"));
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
}

TEST_F(RpcTest, CallbackRunsOnLoopThreadAndMayIssueCalls) {
  StartServer();
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  std::atomic<int> done{0};
  ch->CallAsync(MsgType::kGetXattr, EchoReq("a"), {}, {}, [&](Result<Reply> r) {
    EXPECT_TRUE(r.ok());
    // A blocking call here would deadlock; it is refused instead.
    EXPECT_EQ(ch->Call(MsgType::kPing, pb::CloseSessionResp()).status().code(),
              StatusCode::kInternal);
    ch->CallAsync(MsgType::kGetXattr, EchoReq("b"), {}, {}, [&](Result<Reply> r2) {
      EXPECT_TRUE(r2.ok());
      ++done;
    });
  });
  ASSERT_TRUE(WaitFor([&] { return done.load() == 1; }));
}

TEST_F(RpcTest, EventLoopStoppedBeforeChannelFailsCalls) {
  StartServer();
  auto loop = std::make_unique<EventLoop>(1);
  auto ch = RpcChannel::Connect(loop.get(), addr(), ClientOptions());
  ASSERT_TRUE(ch.ok());
  loop.reset();
  auto r = (*ch)->Call(MsgType::kGetXattr, EchoReq("x"));
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
}

// Callbacks that issue the next call run while the previous write completes: the write queue
// must not free or resend frames that a new write is sending. Small replies to big requests
// make replies arrive before write completions.
TEST_F(RpcTest, ClosedLoopPipelineFromCallbacksKeepsDataIntact) {
  StartServer();
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  constexpr int kSlots = 16;
  constexpr int kCallsPerSlot = 12;
  struct Slot {
    std::vector<uint8_t> out;
    int left = kCallsPerSlot;
  };
  std::vector<Slot> slots(kSlots);
  std::atomic<int> bad{0};
  std::atomic<int> finished{0};
  std::function<void(int)> issue = [&](int i) {
    Slot& s = slots[i];
    s.out.resize((1 << 20) - 4096 * i);
    for (size_t k = 0; k < s.out.size(); ++k)
      s.out[k] = static_cast<uint8_t>(k * 7 + i * 13 + s.left);
    std::string want = std::to_string(Crc32c(s.out.data(), s.out.size()));
    ch->CallAsync(MsgType::kSetXattr, EchoReq("crc"), {ConstSpan{s.out.data(), s.out.size()}}, {},
                  [&, i, want](Result<Reply> r) {
                    pb::GetXattrResp resp;
                    if (!r.ok() || !Parse(r->body, &resp, "resp").ok() || resp.value() != want) {
                      ++bad;
                    }
                    if (--slots[i].left > 0 && r.ok()) {
                      issue(i);
                    } else {
                      ++finished;
                    }
                  });
  };
  for (int i = 0; i < kSlots; ++i)
    issue(i);
  // Generous: sanitizer builds are slow, and returning early would free what callbacks use.
  ASSERT_TRUE(WaitFor([&] { return finished.load() == kSlots; }, std::chrono::minutes(3)));
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(server_->frames_rejected(), 0u);
}

TEST_F(RpcTest, MaxConnectionsRefusesTheRest) {
  auto o = ServerOptions();
  o.max_connections = 2;
  StartServer(o);
  auto a = Connect();
  auto b = Connect();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto c = RpcChannel::Connect(&loop_, addr(), ClientOptions());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status().ToString();
  a->Close();
  // The slot frees once the server has seen the close.
  EXPECT_TRUE(WaitFor([&] { return RpcChannel::Connect(&loop_, addr(), ClientOptions()).ok(); }));
}

TEST_F(RpcTest, IdleConnectionsAreClosedWhenConfigured) {
  auto o = ServerOptions();
  o.idle_timeout_ms = 100;
  StartServer(o);
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  EXPECT_TRUE(WaitFor([&] { return !ch->connected(); }));
  EXPECT_EQ(ch->Call(MsgType::kPing, pb::CloseSessionResp()).status().code(),
            StatusCode::kUnavailable);
}

// A timed-out request that is still queued is never sent and fails at once; one whose write has
// started keeps its out_data referenced, so its callback waits for the write to end (here: the
// server stopped reading, so the client's stall watchdog ends the connection).
TEST_F(RpcTest, TimeoutOfQueuedAndOfPartlyWrittenRequests) {
  auto so = ServerOptions();
  so.max_inflight_per_conn = 1;
  StartServer(so);
  auto co = ClientOptions();
  co.stall_timeout_ms = 300;
  auto ch = Connect(co);
  ASSERT_NE(ch, nullptr);
  std::mutex mu;
  std::vector<std::string> order;
  std::vector<StatusCode> codes(3, StatusCode::kOk);
  auto record = [&](int i, const char* name) {
    return [&, i, name](Result<Reply> r) {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(name);
      codes[i] = r.status().code();
    };
  };
  // A parks on the server, which then stops reading this connection.
  ch->CallAsync(MsgType::kRead, pb::ReadReq(), {}, {}, record(0, "A"));
  ASSERT_TRUE(WaitFor([&] { return parking_.size() == 1; }));
  // B's 40 MiB cannot all fit in the socket buffers: its write stays in progress.
  std::vector<uint8_t> big(40 << 20, 0x42);
  ch->CallAsync(MsgType::kGetXattr, EchoReq("B"), {ConstSpan{big.data(), big.size()}}, {},
                record(1, "B"), 100);
  // C waits in the queue behind B.
  ch->CallAsync(MsgType::kGetXattr, EchoReq("C"), {}, {}, record(2, "C"), 100);
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return order.size() == 3;
  }));
  EXPECT_EQ(order[0], "C");
  EXPECT_EQ(codes[2], StatusCode::kTimedOut);
  EXPECT_EQ(codes[1], StatusCode::kTimedOut);
  EXPECT_EQ(codes[0], StatusCode::kUnavailable);
  EXPECT_FALSE(ch->connected());
}

// Replies race with Stop(): every call ends (OK or kUnavailable), nothing crashes.
TEST_F(RpcTest, RepliesFromWorkersRacingWithStop) {
  ThreadPool workers(2, 100000, "workers");
  auto o = ServerOptions();
  server_ = std::make_unique<RpcServer>(o);
  server_->Register(MsgType::kRead, [&](ServerCall c) {
    auto held = std::make_shared<ServerCall>(std::move(c));
    if (!workers.TrySubmit([held] { held->Reply(pb::ReadResp()); })) {
      held->ReplyError(Status::Unavailable("busy"));
    }
  });
  ASSERT_TRUE(server_->Start().ok());
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  constexpr int kCalls = 2000;
  std::atomic<int> done{0};
  std::atomic<int> unexpected{0};
  for (int i = 0; i < kCalls; ++i) {
    ch->CallAsync(MsgType::kRead, pb::ReadReq(), {}, {}, [&](Result<Reply> r) {
      if (!r.ok() && r.status().code() != StatusCode::kUnavailable)
        ++unexpected;
      ++done;
    });
    if (i == kCalls / 2)
      server_->Stop();
  }
  ASSERT_TRUE(WaitFor([&] { return done.load() == kCalls; }));
  EXPECT_EQ(unexpected.load(), 0);
  workers.Stop();
}

}  // namespace
}  // namespace ciuic::net
