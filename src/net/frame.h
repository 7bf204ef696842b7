// Frame header codec (docs/formats/wire.md). Internal to ciuic_net; pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/status.h"
#include "net/rpc.h"

namespace ciuic::net {

inline constexpr uint32_t kFrameMagic = 0x43554943;  // "CIUC" read as little-endian bytes
inline constexpr uint16_t kFrameVersion = 1;
inline constexpr size_t kFrameHeaderSize = 32;

// Header flag bits.
inline constexpr uint16_t kFlagResponse = 1u << 0;
inline constexpr uint16_t kFlagError = 1u << 1;  // body is pb::ErrorInfo
inline constexpr uint16_t kFlagMac = 1u << 2;    // reserved: per-frame MAC (not yet sent)
inline constexpr uint16_t kKnownFlags = kFlagResponse | kFlagError;

struct FrameHeader {
  uint16_t version = kFrameVersion;
  uint16_t type = 0;
  uint16_t flags = 0;
  uint64_t request_id = 0;
  uint32_t body_len = 0;
  uint32_t data_len = 0;
  uint32_t crc = 0;  // filled by EncodeFrameHeader, read by DecodeFrameHeader
};

// Writes the 32-byte header for `h` into `out`, with body_len = body.size() and the CRC32C over
// header bytes [0, 28) followed by `body`.
void EncodeFrameHeader(const FrameHeader& h, std::string_view body, uint8_t* out);

// Parses and validates the 32 header bytes at `in`: magic, version, flags, reserved, and the
// lengths against `limits`. Does not check the CRC (the body is not read yet). kCorruption with
// the reason on any violation.
Status DecodeFrameHeader(const uint8_t* in, const FrameLimits& limits, FrameHeader* out);

// Checks the CRC of a decoded header against the header bytes and the body. kCorruption on
// mismatch.
Status VerifyFrameCrc(const uint8_t* header_bytes, const FrameHeader& h, std::string_view body);

// Returns a short name for `type` ("Hello", "Write", ...) or its number.
std::string MsgTypeName(uint16_t type);

}  // namespace ciuic::net
