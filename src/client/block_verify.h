// Verification of the 4 KiB blocks of a read reply against their stored checksums
// (ARCHITECTURE Decision 3). Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/fid.h"
#include "common/status.h"

namespace ciuic::client {

// Where the blocks came from, for error messages.
struct BlockSource {
  uint32_t ost = 0;
  const std::string* oss_addr = nullptr;  // may be null
  ObjectId obj;
};

// Checks the reply of one ReadReq: `data` holds `data_len` bytes (whole 4 KiB blocks) starting
// at object offset `aligned_offset`; `crcs` holds two checksum slots per block (the OSS keeps the
// new CRC beside the old one while a write is in flight; either may match). Blocks at or past
// `object_length` are set to zeros (the object ends there). When `exists` is false the object was
// never written and the whole range is set to zeros. Returns kCorruption naming the OST, the
// object and the offset of the first bad block (and when the reply's shape is wrong).
Status VerifyReadBlocks(uint8_t* data,
                        size_t data_len,
                        uint64_t aligned_offset,
                        uint64_t object_length,
                        bool exists,
                        const uint32_t* crcs,
                        size_t crc_count,
                        const BlockSource& src);

// True when the CRC32C `crc` of a block is acceptable given its two stored slots.
bool BlockCrcMatches(uint32_t crc, uint32_t slot0, uint32_t slot1);

}  // namespace ciuic::client
