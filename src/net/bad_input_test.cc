// Hostile and broken peers: each bad connection is closed, counted and logged, and the server
// keeps serving everyone else. Also broken servers seen from a client.
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "ciuic.pb.h"
#include "net/raw_peer.h"
#include "net/rpc.h"
#include "net/test_util.h"

namespace ciuic::net {
namespace {

using testing::ClientOptions;
using testing::EchoReq;
using testing::EncodeFrame;
using testing::FixCrc;
using testing::RawFrame;
using testing::RawSocket;
using testing::RegisterEcho;
using testing::ServerOptions;
using testing::WaitFor;

constexpr uint32_t kMaxBody = 1 << 20;
constexpr uint32_t kMaxData = 4 << 20;

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto o = ServerOptions();
    o.limits.max_body = kMaxBody;
    o.limits.max_data = kMaxData;
    o.handshake_timeout_ms = 10000;
    o.stall_timeout_ms = 10000;
    server_ = std::make_unique<RpcServer>(o);
    RegisterEcho(server_.get());
    ASSERT_TRUE(server_->Start().ok());
    auto ch = RpcChannel::Connect(&loop_, HostPort{"127.0.0.1", server_->port()}, ClientOptions());
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    good_ = *ch;
  }

  // The connection opened before the bad input still works, and so does a new one.
  void ExpectServerStillServes() {
    pb::GetXattrResp resp;
    ASSERT_TRUE(good_->CallMsg(MsgType::kGetXattr, EchoReq("old"), &resp).ok());
    EXPECT_EQ(resp.value(), "old");
    auto ch = RpcChannel::Connect(&loop_, HostPort{"127.0.0.1", server_->port()}, ClientOptions());
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    ASSERT_TRUE((*ch)->CallMsg(MsgType::kGetXattr, EchoReq("new"), &resp).ok());
    EXPECT_EQ(resp.value(), "new");
  }

  // Opens a raw connection that has completed the handshake.
  RawSocket Authenticated() {
    RawSocket s = RawSocket::Connect(server_->port());
    RawFrame welcome;
    EXPECT_TRUE(s.ClientHandshake(testing::kSecret, testing::kSecret, &welcome));
    EXPECT_EQ(welcome.h.type, static_cast<uint16_t>(MsgType::kWelcome));
    return s;
  }

  // Sends `bytes` on a fresh connection (after the handshake if `authenticated`) and expects the
  // server to close it and count one rejected frame.
  void ExpectRejected(const std::string& bytes, bool authenticated) {
    uint64_t before = server_->frames_rejected();
    RawSocket s = authenticated ? Authenticated() : RawSocket::Connect(server_->port());
    ASSERT_TRUE(s.valid());
    s.Send(bytes);  // may fail half-way once the server has closed
    EXPECT_TRUE(s.WaitClosed());
    EXPECT_TRUE(WaitFor([&] { return server_->frames_rejected() == before + 1; }));
    ExpectServerStillServes();
  }

  static std::string GoodRequest(const std::string& name = "x", const std::string& data = {}) {
    return EncodeFrame(MsgType::kGetXattr, 0, 1, EchoReq(name).SerializeAsString(), data);
  }

  EventLoop loop_{1};
  std::unique_ptr<RpcServer> server_;
  std::shared_ptr<RpcChannel> good_;
};

TEST_F(BadInputTest, RawAuthenticatedPeerIsServed) {
  RawSocket s = Authenticated();
  ASSERT_TRUE(s.Send(GoodRequest("raw", "some data")));
  RawFrame f;
  ASSERT_TRUE(s.ReadFrame(&f));
  EXPECT_EQ(f.h.flags, kFlagResponse);
  EXPECT_EQ(f.h.request_id, 1u);
  EXPECT_EQ(f.data, "some data");
}

TEST_F(BadInputTest, RandomBytes) {
  uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 5; ++i) {
    std::string junk(64 + rng() % 4096, '\0');
    for (auto& c : junk)
      c = static_cast<char>(rng());
    ExpectRejected(junk, i % 2 == 1);
  }
}

TEST_F(BadInputTest, BadMagic) {
  std::string f = GoodRequest();
  f[0] ^= 0x5A;
  ExpectRejected(f, true);
}

TEST_F(BadInputTest, BadCrc) {
  std::string f = GoodRequest("payload");
  f.back() ^= 1;  // a body byte
  ExpectRejected(f, true);
}

TEST_F(BadInputTest, UnsupportedFrameVersion) {
  std::string f = GoodRequest();
  f[4] = 9;
  FixCrc(&f, f.size() - 32);
  ExpectRejected(f, true);
}

TEST_F(BadInputTest, UnknownFlagsAndReservedField) {
  std::string f = GoodRequest();
  f[8] = 0x04;  // the reserved MAC flag: not negotiated
  FixCrc(&f, f.size() - 32);
  ExpectRejected(f, true);
  f = GoodRequest();
  f[11] = 1;
  FixCrc(&f, f.size() - 32);
  ExpectRejected(f, true);
}

TEST_F(BadInputTest, OversizedBodyLen) {
  std::string f = GoodRequest();
  uint32_t len = kMaxBody + 1;
  std::memcpy(f.data() + 20, &len, 4);
  ExpectRejected(f, true);
  ExpectRejected(f, false);
}

TEST_F(BadInputTest, OversizedDataLen) {
  std::string f = GoodRequest();
  uint32_t len = 0xFFFFFFFFu;
  std::memcpy(f.data() + 24, &len, 4);
  FixCrc(&f, f.size() - 32);
  ExpectRejected(f, true);
}

TEST_F(BadInputTest, RequestBeforeHandshake) {
  ExpectRejected(GoodRequest(), false);
}

TEST_F(BadInputTest, ResponseFrameSentToServer) {
  ExpectRejected(EncodeFrame(MsgType::kGetXattr, kFlagResponse, 1, ""), true);
}

TEST_F(BadInputTest, MalformedHello) {
  ExpectRejected(EncodeFrame(MsgType::kHello, 0, 0, "\xff\xff\xff"), false);
}

TEST_F(BadInputTest, WrongProofIsDeniedAndClosed) {
  RawSocket s = RawSocket::Connect(server_->port());
  RawFrame last;
  ASSERT_TRUE(s.ClientHandshake(testing::kSecret, "wrong secret", &last));
  EXPECT_EQ(last.h.flags, kFlagResponse | kFlagError);
  pb::ErrorInfo e;
  ASSERT_TRUE(e.ParseFromString(last.body));
  EXPECT_EQ(e.code(), static_cast<uint32_t>(StatusCode::kPermissionDenied));
  EXPECT_NE(e.message().find("wrong cluster secret"), std::string::npos);
  EXPECT_TRUE(s.WaitClosed());
  ExpectServerStillServes();
}

TEST_F(BadInputTest, TruncatedFrameThenCloseMidDataSegment) {
  RawSocket s = Authenticated();
  std::string f = GoodRequest("x", std::string(1 << 20, 'd'));
  ASSERT_TRUE(s.Send(f.substr(0, f.size() / 2)));
  s = RawSocket();  // closes mid-data-segment
  ExpectServerStillServes();
}

TEST(BadInputTimeoutTest, StalledHandshakeAndStalledFrameAreClosed) {
  auto o = ServerOptions();
  o.handshake_timeout_ms = 200;
  o.stall_timeout_ms = 200;
  RpcServer server(o);
  RegisterEcho(&server);
  ASSERT_TRUE(server.Start().ok());
  // Connects and says nothing.
  RawSocket silent = RawSocket::Connect(server.port());
  // Sends part of a Hello and stalls.
  RawSocket partial = RawSocket::Connect(server.port());
  ASSERT_TRUE(partial.Send(EncodeFrame(MsgType::kHello, 0, 0, std::string(40, 'h')).substr(0, 20)));
  // Authenticates, then stalls in the middle of a data segment.
  RawSocket stalled = RawSocket::Connect(server.port());
  RawFrame welcome;
  ASSERT_TRUE(stalled.ClientHandshake(testing::kSecret, testing::kSecret, &welcome));
  std::string f = EncodeFrame(MsgType::kGetXattr, 0, 1, EchoReq("x").SerializeAsString(),
                              std::string(100000, 'd'));
  ASSERT_TRUE(stalled.Send(f.substr(0, 50000)));
  EXPECT_TRUE(silent.WaitClosed());
  EXPECT_TRUE(partial.WaitClosed());
  EXPECT_TRUE(stalled.WaitClosed());
  // A well-behaved client is unaffected.
  EventLoop loop;
  auto ch = RpcChannel::Connect(&loop, HostPort{"127.0.0.1", server.port()}, ClientOptions());
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  pb::GetXattrResp resp;
  EXPECT_TRUE((*ch)->CallMsg(MsgType::kGetXattr, EchoReq("ok"), &resp).ok());
}

// A raw server in a thread: handshakes, reads one request, then runs `misbehave`.
class RawServer {
 public:
  explicit RawServer(std::function<void(RawSocket&, const RawFrame&)> misbehave)
      : listener_(RawSocket::Listen(&port_)) {
    thread_ = std::thread([this, misbehave] {
      conn_ = listener_.Accept();
      if (!conn_.ServerHandshake(testing::kSecret))
        return;
      RawFrame req;
      if (!conn_.ReadFrame(&req))
        return;
      misbehave(conn_, req);
    });
  }
  ~RawServer() { thread_.join(); }
  uint16_t port() const { return port_; }

 private:
  uint16_t port_ = 0;
  RawSocket listener_;
  RawSocket conn_;
  std::thread thread_;
};

TEST(BrokenServerTest, ServerClosingMidDataSegmentFailsTheCall) {
  RawServer server([](RawSocket& s, const RawFrame& req) {
    std::string reply =
        EncodeFrame(MsgType::kRead, kFlagResponse, req.h.request_id, "", std::string(1 << 20, 'r'));
    s.Send(reply.substr(0, 300000));
    s = RawSocket();
  });
  EventLoop loop;
  auto ch = RpcChannel::Connect(&loop, HostPort{"127.0.0.1", server.port()}, ClientOptions());
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  std::vector<uint8_t> dest(1 << 20);
  auto r = (*ch)->Call(MsgType::kRead, pb::ReadReq(), {}, std::span<uint8_t>(dest));
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_FALSE((*ch)->connected());
}

TEST(BrokenServerTest, GarbageFromServerFailsTheCall) {
  RawServer server([](RawSocket& s, const RawFrame&) {
    s.Send(std::string(64, '\x7f'));
    s.WaitClosed();
  });
  EventLoop loop;
  auto ch = RpcChannel::Connect(&loop, HostPort{"127.0.0.1", server.port()}, ClientOptions());
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  auto r = (*ch)->Call(MsgType::kRead, pb::ReadReq());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
}

TEST(BrokenServerTest, SilentServerTimesOutTheConnect) {
  uint16_t port = 0;
  RawSocket listener = RawSocket::Listen(&port);  // accepts (in the kernel), never answers
  EventLoop loop;
  auto o = ClientOptions();
  o.connect_timeout_ms = 200;
  auto ch = RpcChannel::Connect(&loop, HostPort{"127.0.0.1", port}, o);
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kUnavailable) << ch.status().ToString();
}

TEST(BrokenServerTest, ErrorReplyWithUnknownCodeBecomesInternal) {
  RawServer server([](RawSocket& s, const RawFrame& req) {
    pb::ErrorInfo e;
    e.set_code(9999);
    e.set_message("from the future");
    s.Send(EncodeFrame(MsgType::kRead, kFlagResponse | kFlagError, req.h.request_id,
                       e.SerializeAsString()));
    s.WaitClosed();
  });
  EventLoop loop;
  auto ch = RpcChannel::Connect(&loop, HostPort{"127.0.0.1", server.port()}, ClientOptions());
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  auto r = (*ch)->Call(MsgType::kRead, pb::ReadReq());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal) << r.status().ToString();
  (*ch)->Close();
}

}  // namespace
}  // namespace ciuic::net
