// On-disk formats of an OST directory (docs/formats/ost-disk.md): the stamp file, the header
// and slot layout of per-object checksum files, and file naming. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/fid.h"
#include "common/status.h"

namespace ciuic::oss {

inline constexpr uint32_t kOstFormatVersion = 1;
inline constexpr size_t kBlockSize = 4096;
// Checksum file: a 4 KiB header page, then slot pages of 512 blocks (two u32 slots each).
inline constexpr size_t kCrcHeaderSize = 4096;
inline constexpr size_t kCrcPageSize = 4096;
inline constexpr size_t kBlocksPerCrcPage = kCrcPageSize / 8;
// Objects are capped at 16 TiB (offsets beyond are kInvalidArgument).
inline constexpr uint64_t kMaxObjectSize = uint64_t{1} << 44;
// Data files are grown ahead of writes in steps of this much (sparse), so O_DIRECT writes land
// inside the file size and run in parallel; a clean stop cuts them back to the exact length.
inline constexpr uint64_t kExtendAheadSize = uint64_t{64} << 20;
// Dirty tracking granularity: a durable mark covers 256 MiB of one object.
inline constexpr uint64_t kDirtyRegionSize = uint64_t{256} << 20;

// File names inside an OST directory.
inline constexpr std::string_view kStampName = "ost.stamp";
inline constexpr std::string_view kDirtyLogName = "dirty.log";
inline constexpr std::string_view kCleanMarkerName = "clean-shutdown";
inline constexpr std::string_view kObjectsDirName = "objects";
inline constexpr std::string_view kCrcSuffix = ".crc";
inline constexpr std::string_view kTombstoneSuffix = ".dead";

struct OstStamp {
  uint32_t format_version = kOstFormatVersion;
  std::string cluster_uuid;
  uint32_t ost_index = 0;
  // Random, drawn at format (0 in stamps written before it existed): tells the MDS that an OST
  // came back as a new, empty directory.
  uint64_t incarnation = 0;

  // "key = value" text, see docs/formats/ost-disk.md.
  std::string Encode() const;
  // kCorruption when malformed.
  static Result<OstStamp> Parse(std::string_view text);
};

// The header page of a checksum file.
struct CrcHeader {
  uint64_t length = 0;  // exact object length in bytes
  // Replication chain the object was created under (0: none). Lets a chain's head list the
  // objects it must compare with a syncing member (docs/formats/ost-disk.md).
  uint32_t chain = 0;

  // Writes the first kCrcHeaderSize bytes of a checksum file into `page`.
  void Encode(uint8_t* page) const;
  // kCorruption on a bad magic, version or header CRC.
  static Result<CrcHeader> Decode(const uint8_t* page, size_t len);
};

// Offset in the checksum file of slot page `page`.
inline uint64_t CrcPageOffset(uint64_t page) {
  return kCrcHeaderSize + page * kCrcPageSize;
}

// The ObjectId of an object file name (ObjectId::FileName()); false for any other name.
bool ParseObjectFileName(std::string_view name, ObjectId* out);

}  // namespace ciuic::oss
