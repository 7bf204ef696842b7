// Handshake cryptography (ARCHITECTURE Decision 10, docs/formats/wire.md): the transcript, the
// HMAC-SHA256 proofs of both sides and the derived session key. Internal to ciuic_net; pure
// functions, thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "net/msg_types.h"

namespace ciuic::net {

inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kMacSize = 32;

// Returns transcript = hello_bytes || u32le(version) || server_nonce || u32le(role) ||
// u32le(key_id), where hello_bytes is the serialized Hello exactly as sent on the wire.
std::string HandshakeTranscript(std::string_view hello_bytes,
                                uint32_t version,
                                std::string_view server_nonce,
                                uint32_t role,
                                uint32_t key_id);

// Returns HMAC-SHA256(key, data), 32 bytes.
std::string HmacSha256(std::string_view key, std::string_view data);

// Returns HMAC-SHA256(key, transcript || "server").
std::string ServerMac(std::string_view key, std::string_view transcript);
// Returns HMAC-SHA256(key, transcript || "client").
std::string ClientMac(std::string_view key, std::string_view transcript);
// Returns HMAC-SHA256(key, "session" || transcript), kept for a future per-frame MAC.
std::string SessionKey(std::string_view key, std::string_view transcript);

// Compares two MACs in constant time; false when the sizes differ.
bool MacEqual(std::string_view a, std::string_view b);

// Picks the highest version in both [client_min, client_max] and [server_min, server_max];
// returns 0 when the ranges do not overlap.
uint32_t PickVersion(uint32_t client_min,
                     uint32_t client_max,
                     uint32_t server_min,
                     uint32_t server_max);

// The server side of the handshake as a state machine over message bodies, without a socket
// (RpcServer's connections run it; the handshake fuzz target feeds it arbitrary bytes). The
// frame checks (type, flags, no data segment) stay with the caller.
// Thread-safety: one object per connection, used by one thread.
class ServerHandshake {
 public:
  struct Config {
    uint32_t min_version = kMinProtocolVersion;
    uint32_t max_version = kProtocolVersion;
    std::string secret;  // the key of `key_id` when there is no key_lookup
    uint32_t key_id = 1;
    std::string cluster_uuid;
    // As RpcServer::Options::key_lookup.
    std::function<Result<std::string>(uint32_t key_id, Role role)> key_lookup;
  };
  explicit ServerHandshake(const Config* config) : config_(config) {}

  // Takes the Hello body (exactly as received) and the server's random nonce; returns the
  // Challenge body to send. kCorruption for a malformed Hello (close without an answer);
  // kNotSupported (no common version) or kPermissionDenied (unknown or refused key) to answer
  // as an error frame.
  Result<std::string> OnHello(std::string_view hello_body, std::string server_nonce);
  // Takes the Proof body; returns the Welcome body. kCorruption for a malformed Proof or a call
  // out of order, kPermissionDenied for a wrong MAC (answered as an error frame).
  Result<std::string> OnProof(std::string_view proof_body);

  bool done() const { return done_; }
  uint32_t version() const { return version_; }
  Role role() const { return role_; }
  uint32_t key_id() const { return key_id_; }
  const std::string& session_key() const { return session_key_; }
  // The job id the client named in its Hello (empty: none; docs/formats/wire.md).
  const std::string& job_id() const { return job_id_; }
  // The MAC the client must prove (tests and fuzzing; empty before OnHello succeeded).
  std::string TEST_ExpectedClientMac() const;

 private:
  const Config* config_;
  bool hello_done_ = false;
  bool done_ = false;
  uint32_t version_ = 0;
  Role role_ = Role::kClient;
  uint32_t key_id_ = 0;
  std::string key_;
  std::string transcript_;
  std::string session_key_;
  std::string job_id_;
};

}  // namespace ciuic::net
