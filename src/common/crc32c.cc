#include "common/crc32c.h"

#include <isa-l.h>

namespace ciuic {

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t len) {
  // crc32_iscsi neither pre- nor post-inverts; the standard CRC32C does both.
  uint32_t c = ~crc;
  const auto* p = static_cast<const unsigned char*>(data);
  while (len > 0) {
    int chunk = len > (1u << 30) ? (1 << 30) : static_cast<int>(len);
    c = crc32_iscsi(const_cast<unsigned char*>(p), chunk, c);
    p += chunk;
    len -= static_cast<size_t>(chunk);
  }
  return ~c;
}

uint32_t ZeroBlockCrc() {
  static const uint32_t kCrc = [] {
    static const unsigned char kZeros[kCrcBlockSize] = {};
    return Crc32c(kZeros, sizeof(kZeros));
  }();
  return kCrc;
}

}  // namespace ciuic
