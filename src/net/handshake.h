// Handshake cryptography (ARCHITECTURE Decision 10, docs/formats/wire.md): the transcript, the
// HMAC-SHA256 proofs of both sides and the derived session key. Internal to ciuic_net; pure
// functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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

}  // namespace ciuic::net
