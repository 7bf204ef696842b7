// Client::Connect failures that need no cluster: missing or bad cluster files, a dead MDS.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "ciuic/client.h"
#include "common/config.h"

namespace ciuic {
namespace {

class ClientConnectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ciuic-client-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_;
};

// A port nothing listens on: bind an ephemeral one and close it again.
uint16_t DeadPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST_F(ClientConnectTest, MissingClusterFileIsNotFound) {
  ClientOptions o;
  o.cluster_file = dir_ + "/nope.conf";
  auto c = Client::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound) << c.status().ToString();
}

TEST_F(ClientConnectTest, MalformedClusterFileIsInvalidArgument) {
  std::ofstream(dir_ + "/bad.conf") << "this is not a cluster file\n";
  ClientOptions o;
  o.cluster_file = dir_ + "/bad.conf";
  auto c = Client::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().ToString();
}

TEST_F(ClientConnectTest, DeadMdsIsUnavailableNamingTheAddress) {
  ClusterFile cf;
  cf.cluster_uuid = NewUuid();
  cf.mds = HostPort{"127.0.0.1", DeadPort()};
  cf.secret_hex = HexEncode(RandomBytes(32));
  ASSERT_TRUE(cf.Save(dir_ + "/cluster.conf").ok());
  ClientOptions o;
  o.cluster_file = dir_ + "/cluster.conf";
  o.ost_retry_ms = 200;
  auto c = Client::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status().ToString();
  EXPECT_NE(c.status().message().find(cf.mds.ToString()), std::string::npos)
      << c.status().ToString();
}

}  // namespace
}  // namespace ciuic
