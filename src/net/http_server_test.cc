#include "net/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace ciuic::net {
namespace {

std::unique_ptr<HttpServer> StartServer(HttpServer::Options o = {}) {
  auto s = std::make_unique<HttpServer>(o);
  s->Handle("/metrics", kPrometheusContentType, [] { return std::string("ciuic_up 1\n"); });
  EXPECT_TRUE(s->Start().ok());
  return s;
}

// Sends `bytes` raw and returns everything the server sends before it closes.
std::string RawExchange(uint16_t port, const std::string& bytes, bool half_close = false) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0)
      break;  // the server may close early (oversized head): keep what it answered
    sent += static_cast<size_t>(n);
  }
  if (half_close)
    ::shutdown(fd, SHUT_WR);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0)
      break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

TEST(HttpServerTest, GetMetricsAnswersTheBodyAndCloses) {
  auto s = StartServer();
  auto r = HttpGet({"127.0.0.1", s->port()}, "/metrics");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ciuic_up 1\n");
  std::string raw = RawExchange(s->port(), "GET /metrics?x=1 HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(raw.starts_with("HTTP/1.1 200 OK\r\n")) << raw;
  EXPECT_NE(raw.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(raw.find("Connection: close"), std::string::npos);
}

TEST(HttpServerTest, UnknownPathIs404AndOtherMethodsAre405) {
  auto s = StartServer();
  auto r = HttpGet({"127.0.0.1", s->port()}, "/nothing");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 404);
  for (const char* m : {"POST", "PUT", "DELETE", "HEAD"}) {
    std::string raw = RawExchange(
        s->port(), std::string(m) + " /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
    EXPECT_TRUE(raw.starts_with("HTTP/1.1 405 ")) << m << ": " << raw;
    EXPECT_NE(raw.find("Allow: GET"), std::string::npos);
  }
}

TEST(HttpServerTest, MalformedRequestsGetACleanError) {
  auto s = StartServer();
  for (const std::string& bad : {
           std::string("\r\n\r\n"),
           std::string("GET\r\n\r\n"),
           std::string("GET /metrics\r\n\r\n"),
           std::string("GET metrics HTTP/1.1\r\n\r\n"),
           std::string("GET /metrics HTTP/2.0\r\n\r\n"),
           std::string("GET /metrics HTTP/1.1 extra\r\n\r\n"),
           std::string("get /metrics HTTP/1.1\r\n\r\n"),
           std::string("\x00\x01\xff garbage\r\n\r\n", 16),
       }) {
    std::string raw = RawExchange(s->port(), bad);
    EXPECT_TRUE(raw.starts_with("HTTP/1.1 400 ")) << raw;
  }
  // A request head cut short by the client's close gets no answer, and the server goes on.
  EXPECT_EQ(RawExchange(s->port(), "GET /metr", true), "");
  auto r = HttpGet({"127.0.0.1", s->port()}, "/metrics");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200);
}

TEST(HttpServerTest, OversizedRequestHeadIs431) {
  auto s = StartServer({.max_request_bytes = 1024});
  std::string raw = RawExchange(
      s->port(), "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(100000, 'a') + "\r\n\r\n");
  EXPECT_TRUE(raw.starts_with("HTTP/1.1 431 ")) << raw.substr(0, 100);
}

TEST(HttpServerTest, AClientThatSendsNothingIsClosedAfterTheTimeout) {
  auto s = StartServer({.timeout_ms = 200});
  auto start = std::chrono::steady_clock::now();
  std::string raw = RawExchange(s->port(), "GET /metrics HTTP/1.1\r\n");  // head never ends
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(raw, "");
  EXPECT_LT(took, std::chrono::seconds(5));
  EXPECT_GE(took, std::chrono::milliseconds(150));
}

TEST(HttpServerTest, ConcurrentScrapesAllSucceed) {
  auto s = StartServer();
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        auto r = HttpGet({"127.0.0.1", s->port()}, "/metrics");
        if (r.ok() && r->status == 200 && r->body == "ciuic_up 1\n")
          ++ok;
      }
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(ok.load(), 200);
  EXPECT_GE(s->requests(), 200u);
}

TEST(HttpServerTest, HttpGetReportsAnUnreachableServer) {
  uint16_t port;
  {
    auto s = StartServer();
    port = s->port();
  }
  auto r = HttpGet({"127.0.0.1", port}, "/metrics", 1000);
  EXPECT_FALSE(r.ok());
}

TEST(HttpServerTest, StopIsIdempotentAndClosesThePort) {
  auto s = StartServer();
  s->Stop();
  s->Stop();
  EXPECT_FALSE(HttpGet({"127.0.0.1", s->port()}, "/metrics", 1000).ok());
}

}  // namespace
}  // namespace ciuic::net
