// CRC32C (Castagnoli), the checksum of every 4 KiB data block and of every frame.
// Backed by ISA-L's crc32_iscsi (PCLMUL/SSE4.2). Thread-safe, pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ciuic {

// Returns the CRC32C of `data` continuing from `crc` (the CRC of the preceding bytes; 0 to start).
// Crc32c("123456789") == 0xE3069283.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t len);
inline uint32_t Crc32c(const void* data, size_t len) {
  return Crc32cExtend(0, data, len);
}

// The block size covered by one stored checksum.
inline constexpr size_t kCrcBlockSize = 4096;

// CRC32C of a 4 KiB block of zeros. Stored block checksums are XORed with this value so that a
// never-written (hole) block, whose stored checksum reads as 0, verifies as zeros.
uint32_t ZeroBlockCrc();

}  // namespace ciuic
