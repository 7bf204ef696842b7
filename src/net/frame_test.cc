// Unit tests of the frame header codec and the handshake cryptography.
#include "net/frame.h"

#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "ciuic.pb.h"
#include "common/config.h"
#include "net/buffer_pool.h"
#include "net/handshake.h"
#include "net/rpc.h"

namespace ciuic::net {
namespace {

std::string Encode(const FrameHeader& h, const std::string& body) {
  std::string out(kFrameHeaderSize, '\0');
  EncodeFrameHeader(h, body, reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

const uint8_t* Bytes(const std::string& s) {
  return reinterpret_cast<const uint8_t*>(s.data());
}

TEST(FrameTest, RoundTrip) {
  FrameHeader h;
  h.type = static_cast<uint16_t>(MsgType::kWrite);
  h.flags = kFlagResponse | kFlagError;
  h.request_id = 0x0102030405060708ull;
  h.data_len = 12345;
  std::string body = "protobuf bytes";
  std::string hdr = Encode(h, body);
  // Little-endian layout at the documented offsets.
  EXPECT_EQ(std::memcmp(hdr.data(), "CIUC", 4), 0);
  EXPECT_EQ(static_cast<uint8_t>(hdr[12]), 0x08);
  EXPECT_EQ(static_cast<uint8_t>(hdr[19]), 0x01);
  FrameHeader d;
  ASSERT_TRUE(DecodeFrameHeader(Bytes(hdr), FrameLimits(), &d).ok());
  EXPECT_EQ(d.version, kFrameVersion);
  EXPECT_EQ(d.type, h.type);
  EXPECT_EQ(d.flags, h.flags);
  EXPECT_EQ(d.request_id, h.request_id);
  EXPECT_EQ(d.body_len, body.size());
  EXPECT_EQ(d.data_len, 12345u);
  EXPECT_TRUE(VerifyFrameCrc(Bytes(hdr), d, body).ok());
}

TEST(FrameTest, CrcCoversHeaderAndBodyButNotData) {
  FrameHeader h;
  h.type = 5;
  h.data_len = 10;
  std::string body = "abc";
  std::string hdr = Encode(h, body);
  FrameHeader d;
  ASSERT_TRUE(DecodeFrameHeader(Bytes(hdr), FrameLimits(), &d).ok());
  EXPECT_EQ(VerifyFrameCrc(Bytes(hdr), d, "abd").code(), StatusCode::kCorruption);
  std::string flipped = hdr;
  flipped[13] ^= 1;  // request id
  ASSERT_TRUE(DecodeFrameHeader(Bytes(flipped), FrameLimits(), &d).ok());
  EXPECT_EQ(VerifyFrameCrc(Bytes(flipped), d, body).code(), StatusCode::kCorruption);
}

TEST(FrameTest, RejectsEachViolation) {
  FrameLimits limits;
  limits.max_body = 100;
  limits.max_data = 1000;
  FrameHeader h;
  h.type = 1;
  std::string good = Encode(h, "");
  FrameHeader d;
  ASSERT_TRUE(DecodeFrameHeader(Bytes(good), limits, &d).ok());

  auto expect_bad = [&](size_t off, uint8_t value, const char* what) {
    std::string bad = good;
    bad[off] = static_cast<char>(value);
    Status s = DecodeFrameHeader(Bytes(bad), limits, &d);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << what;
    EXPECT_FALSE(s.message().empty());
  };
  expect_bad(0, 0, "magic");
  expect_bad(4, 2, "version");
  expect_bad(8, kFlagMac, "mac flag");
  expect_bad(9, 0x80, "unknown flag");
  expect_bad(8, kFlagError, "error flag without response");
  expect_bad(10, 1, "reserved");
  expect_bad(21, 1, "body_len 256 > 100");
  expect_bad(25, 4, "data_len 1024 > 1000");
}

TEST(FrameTest, SerializeAndParse) {
  pb::Hello hello;
  hello.set_role(2);
  hello.set_nonce("n");
  pb::Hello back;
  ASSERT_TRUE(Parse(Serialize(hello), &back, "Hello").ok());
  EXPECT_EQ(back.role(), 2u);
  Status s = Parse("\xff\xff\xff", &back, "Hello");
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "malformed Hello");
}

TEST(HandshakeTest, MacsDependOnKeyTranscriptAndSide) {
  std::string t = HandshakeTranscript("hello", 1, std::string(32, 'n'), 1, 1);
  EXPECT_EQ(ServerMac("k", t).size(), kMacSize);
  EXPECT_TRUE(MacEqual(ServerMac("k", t), ServerMac("k", t)));
  EXPECT_FALSE(MacEqual(ServerMac("k", t), ServerMac("K", t)));
  EXPECT_FALSE(MacEqual(ServerMac("k", t), ClientMac("k", t)));
  EXPECT_FALSE(MacEqual(SessionKey("k", t), ServerMac("k", t)));
  // Every transcript field matters.
  EXPECT_NE(t, HandshakeTranscript("hellp", 1, std::string(32, 'n'), 1, 1));
  EXPECT_NE(t, HandshakeTranscript("hello", 2, std::string(32, 'n'), 1, 1));
  EXPECT_NE(t, HandshakeTranscript("hello", 1, std::string(32, 'm'), 1, 1));
  EXPECT_NE(t, HandshakeTranscript("hello", 1, std::string(32, 'n'), 2, 1));
  EXPECT_NE(t, HandshakeTranscript("hello", 1, std::string(32, 'n'), 1, 2));
  EXPECT_FALSE(MacEqual("", ""));
  EXPECT_FALSE(MacEqual("abc", "abcd"));
  // The empty key still works (and differs from others).
  EXPECT_FALSE(MacEqual(ServerMac("", t), ServerMac("k", t)));
}

TEST(HandshakeTest, HmacSha256KnownAnswer) {
  // RFC 4231 test case 2.
  EXPECT_EQ(HexEncode(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  std::string t = "transcript";
  EXPECT_EQ(ServerMac("Jefe", t), HmacSha256("Jefe", t + "server"));
  EXPECT_EQ(ClientMac("Jefe", t), HmacSha256("Jefe", t + "client"));
  EXPECT_EQ(SessionKey("Jefe", t), HmacSha256("Jefe", "session" + t));
}

TEST(HandshakeTest, PickVersion) {
  EXPECT_EQ(PickVersion(1, 1, 1, 1), 1u);
  EXPECT_EQ(PickVersion(1, 3, 2, 5), 3u);
  EXPECT_EQ(PickVersion(2, 5, 1, 3), 3u);
  EXPECT_EQ(PickVersion(1, 1, 2, 2), 0u);
  EXPECT_EQ(PickVersion(3, 1, 1, 3), 0u);
}

}  // namespace
}  // namespace ciuic::net

namespace ciuic::net::detail {
namespace {

TEST(BufferPoolTest, RecyclesAlignedBuffersWithinItsCap) {
  BufferPool pool(4 << 20);
  AlignedBuffer a = pool.Get(1 << 20);
  EXPECT_EQ(a.size(), 1u << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % kDirectIoAlign, 0u);
  const uint8_t* p = a.data();
  pool.Put(std::move(a));
  EXPECT_EQ(pool.idle_bytes(), 1u << 20);
  AlignedBuffer b = pool.Get((1 << 20) - 4096);  // same class
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), (1u << 20) - 4096);
  EXPECT_EQ(pool.idle_bytes(), 0u);
  // Small buffers are not pooled; the cap holds.
  pool.Put(AlignedBuffer(4096));
  EXPECT_EQ(pool.idle_bytes(), 0u);
  for (int i = 0; i < 8; ++i)
    pool.Put(pool.Get(1 << 20));
  std::vector<AlignedBuffer> held;
  for (int i = 0; i < 8; ++i)
    held.push_back(pool.Get(1 << 20));
  for (auto& h : held)
    pool.Put(std::move(h));
  EXPECT_EQ(pool.idle_bytes(), 4u << 20);
}

}  // namespace
}  // namespace ciuic::net::detail
