#include "net/handshake.h"

#include <gtest/gtest.h>

#include "ciuic.pb.h"

namespace ciuic::net {
namespace {

std::string HelloBody(uint32_t role, uint32_t key_id, size_t nonce_size = kNonceSize) {
  pb::Hello h;
  h.set_min_version(kMinProtocolVersion);
  h.set_max_version(kProtocolVersion);
  h.set_role(role);
  h.set_key_id(key_id);
  h.set_nonce(std::string(nonce_size, 'c'));
  return h.SerializeAsString();
}

std::string ProofBody(const std::string& mac) {
  pb::Proof p;
  p.set_mac(mac);
  return p.SerializeAsString();
}

TEST(ServerHandshakeTest, TheRightProofIsWelcomedAndAWrongOneRefused) {
  ServerHandshake::Config config;
  config.secret = "key";
  config.cluster_uuid = "u";
  ServerHandshake ok(&config);
  ASSERT_TRUE(ok.OnHello(HelloBody(1, 1), std::string(kNonceSize, 'n')).ok());
  auto welcome = ok.OnProof(ProofBody(ok.TEST_ExpectedClientMac()));
  ASSERT_TRUE(welcome.ok()) << welcome.status().ToString();
  pb::Welcome w;
  ASSERT_TRUE(w.ParseFromString(*welcome));
  EXPECT_EQ(w.cluster_uuid(), "u");
  EXPECT_TRUE(ok.done());
  EXPECT_EQ(ok.OnProof(ProofBody(ok.TEST_ExpectedClientMac())).status().code(),
            StatusCode::kCorruption);  // a second Proof

  ServerHandshake wrong(&config);
  ASSERT_TRUE(wrong.OnHello(HelloBody(1, 1), std::string(kNonceSize, 'n')).ok());
  EXPECT_EQ(wrong.OnProof(ProofBody(std::string(kMacSize, 'x'))).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_FALSE(wrong.done());
}

TEST(ServerHandshakeTest, MalformedOrRefusedHellos) {
  ServerHandshake::Config config;
  config.secret = "key";
  auto hello = [&](const std::string& body) {
    ServerHandshake hs(&config);
    return hs.OnHello(body, std::string(kNonceSize, 'n')).status().code();
  };
  EXPECT_EQ(hello("\xff\xff"), StatusCode::kCorruption);
  EXPECT_EQ(hello(HelloBody(1, 1, 31)), StatusCode::kCorruption);    // short nonce
  EXPECT_EQ(hello(HelloBody(4, 1)), StatusCode::kCorruption);        // no such role
  EXPECT_EQ(hello(HelloBody(1, 2)), StatusCode::kPermissionDenied);  // unknown key
  pb::Hello future;
  future.ParseFromString(HelloBody(1, 1));
  future.set_min_version(kProtocolVersion + 1);
  future.set_max_version(kProtocolVersion + 5);
  EXPECT_EQ(hello(future.SerializeAsString()), StatusCode::kNotSupported);
  ServerHandshake early(&config);
  EXPECT_EQ(early.OnProof(ProofBody("x")).status().code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace ciuic::net
