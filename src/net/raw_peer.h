// Test-only: a blocking raw TCP peer that speaks (or deliberately breaks) the wire format, to
// feed servers and clients bad input.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ciuic.pb.h"
#include "common/config.h"
#include "common/crc32c.h"
#include "net/frame.h"
#include "net/handshake.h"
#include "net/msg_types.h"

namespace ciuic::net::testing {

struct RawFrame {
  FrameHeader h;
  std::string body;
  std::string data;
};

// Encodes a complete frame with a correct CRC.
inline std::string EncodeFrame(MsgType type,
                               uint16_t flags,
                               uint64_t id,
                               const std::string& body,
                               const std::string& data = {}) {
  FrameHeader h;
  h.type = static_cast<uint16_t>(type);
  h.flags = flags;
  h.request_id = id;
  h.data_len = static_cast<uint32_t>(data.size());
  std::string out(kFrameHeaderSize, '\0');
  EncodeFrameHeader(h, body, reinterpret_cast<uint8_t*>(out.data()));
  return out + body + data;
}

// Recomputes the CRC of a frame whose header was edited (so that only the edit is wrong).
inline void FixCrc(std::string* frame, size_t body_len) {
  uint32_t crc = Crc32cExtend(Crc32c(frame->data(), 28), frame->data() + 32, body_len);
  for (int i = 0; i < 4; ++i)
    (*frame)[28 + i] = static_cast<char>(crc >> (8 * i));
}

class RawSocket {
 public:
  RawSocket() = default;
  explicit RawSocket(int fd) : fd_(fd) {}
  RawSocket(RawSocket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  RawSocket& operator=(RawSocket&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~RawSocket() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  int fd() const { return fd_; }

  static RawSocket Connect(uint16_t port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(fd);
      return RawSocket();
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return RawSocket(fd);
  }

  // Listens on an ephemeral loopback port; returns the socket and sets `port`.
  static RawSocket Listen(uint16_t* port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(fd, 16);
    socklen_t len = sizeof(a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    *port = ntohs(a.sin_port);
    return RawSocket(fd);
  }

  RawSocket Accept() { return RawSocket(::accept(fd_, nullptr, nullptr)); }

  bool valid() const { return fd_ >= 0; }

  bool Send(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0)
        return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  // Reads exactly `n` bytes, waiting at most `timeout` in total.
  bool RecvExact(size_t n,
                 std::string* out,
                 std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    out->resize(n);
    size_t done = 0;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (done < n) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
        return false;
      ssize_t r = ::recv(fd_, out->data() + done, n - done, 0);
      if (r <= 0)
        return false;
      done += static_cast<size_t>(r);
    }
    return true;
  }

  bool ReadFrame(RawFrame* f) {
    std::string hdr;
    if (!RecvExact(kFrameHeaderSize, &hdr))
      return false;
    FrameLimits limits;
    if (!DecodeFrameHeader(reinterpret_cast<const uint8_t*>(hdr.data()), limits, &f->h).ok()) {
      return false;
    }
    return RecvExact(f->h.body_len, &f->body) && RecvExact(f->h.data_len, &f->data);
  }

  // Waits until the peer closes the connection (EOF or reset); false on timeout. Discards what
  // arrives meanwhile.
  bool WaitClosed(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[4096];
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
        return false;
      ssize_t r = ::recv(fd_, buf, sizeof(buf), 0);
      if (r <= 0)
        return true;
    }
  }

  // Runs the client side of the handshake. With `proof_secret` different from `secret`, sends a
  // proof made with the wrong key (the server's challenge is not checked). Returns the server's
  // final frame (Welcome or an error).
  bool ClientHandshake(const std::string& secret, const std::string& proof_secret, RawFrame* last) {
    pb::Hello hello;
    hello.set_min_version(kMinProtocolVersion);
    hello.set_max_version(kProtocolVersion);
    hello.set_role(static_cast<uint32_t>(Role::kClient));
    hello.set_key_id(1);
    hello.set_nonce(RandomBytes(kNonceSize));
    std::string hello_bytes = hello.SerializeAsString();
    if (!Send(EncodeFrame(MsgType::kHello, 0, 0, hello_bytes)))
      return false;
    RawFrame f;
    if (!ReadFrame(&f))
      return false;
    pb::Challenge ch;
    if (!ch.ParseFromString(f.body))
      return false;
    std::string t = HandshakeTranscript(hello_bytes, ch.version(), ch.nonce(), 1, 1);
    if (!MacEqual(ch.mac(), ServerMac(secret, t)))
      return false;
    pb::Proof proof;
    proof.set_mac(ClientMac(proof_secret, t));
    if (!Send(EncodeFrame(MsgType::kProof, 0, 0, proof.SerializeAsString())))
      return false;
    return ReadFrame(last);
  }

  // Runs the server side of the handshake with `secret`; true once Welcome is sent.
  bool ServerHandshake(const std::string& secret) {
    RawFrame f;
    if (!ReadFrame(&f))
      return false;
    pb::Hello hello;
    if (!hello.ParseFromString(f.body))
      return false;
    std::string nonce = RandomBytes(kNonceSize);
    std::string t =
        HandshakeTranscript(f.body, kProtocolVersion, nonce, hello.role(), hello.key_id());
    pb::Challenge ch;
    ch.set_version(kProtocolVersion);
    ch.set_nonce(nonce);
    ch.set_mac(ServerMac(secret, t));
    if (!Send(EncodeFrame(MsgType::kChallenge, kFlagResponse, 0, ch.SerializeAsString()))) {
      return false;
    }
    if (!ReadFrame(&f))
      return false;
    pb::Welcome w;
    w.set_cluster_uuid("raw");
    return Send(EncodeFrame(MsgType::kWelcome, kFlagResponse, 0, w.SerializeAsString()));
  }

 private:
  int fd_ = -1;
};

}  // namespace ciuic::net::testing
