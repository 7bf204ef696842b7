#include "client/block_verify.h"

#include <cstring>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "common/layout.h"

namespace ciuic::client {

bool BlockCrcMatches(uint32_t crc, uint32_t slot0, uint32_t slot1) {
  return crc == slot0 || crc == slot1;
}

Status VerifyReadBlocks(uint8_t* data,
                        size_t data_len,
                        uint64_t aligned_offset,
                        uint64_t object_length,
                        bool exists,
                        const uint32_t* crcs,
                        size_t crc_count,
                        const BlockSource& src) {
  auto where = [&]() {
    return fmt::format("{} {}{} object {}", IsChain(src.ost) ? "a copy in chain" : "OST",
                       IsChain(src.ost) ? src.ost - kChainBase : src.ost,
                       src.oss_addr ? fmt::format(" ({})", *src.oss_addr) : std::string(),
                       src.obj.FileName());
  };
  if (!exists) {
    if (data_len > 0)
      std::memset(data, 0, data_len);
    return Status::OK();
  }
  if (aligned_offset % kCrcBlockSize != 0 || data_len % kCrcBlockSize != 0) {
    return Status::Corruption(fmt::format("{}: read reply not block-aligned (offset {}, {} bytes)",
                                          where(), aligned_offset, data_len));
  }
  const size_t blocks = data_len / kCrcBlockSize;
  if (crc_count != 2 * blocks) {
    return Status::Corruption(
        fmt::format("{}: read reply has {} checksums for {} blocks", where(), crc_count, blocks));
  }
  for (size_t i = 0; i < blocks; ++i) {
    uint8_t* block = data + i * kCrcBlockSize;
    const uint64_t off = aligned_offset + i * kCrcBlockSize;
    if (off >= object_length) {
      // Past the end of the object: the file reads zeros here whatever the reply carries.
      std::memset(block, 0, data_len - i * kCrcBlockSize);
      break;
    }
    const uint32_t crc = Crc32c(block, kCrcBlockSize);
    if (!BlockCrcMatches(crc, crcs[2 * i], crcs[2 * i + 1])) {
      return Status::Corruption(fmt::format(
          "{} offset {}: block checksum mismatch (computed {:#010x}, stored {:#010x}/{:#010x})",
          where(), off, crc, crcs[2 * i], crcs[2 * i + 1]));
    }
  }
  return Status::OK();
}

}  // namespace ciuic::client
