// Splitting a file byte range into per-object RPCs (pure layout arithmetic over MapRange).
// Reads: 4 KiB-aligned object ranges land straight in the caller's buffer; unaligned edges are
// read as whole blocks into a scratch buffer and the wanted bytes copied out. Writes: one piece
// per stripe unit, sent from the caller's memory. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/layout.h"

namespace ciuic::client {

// Largest data segment of one RPC (the frame limit is 64 MiB; stripes may be bigger).
inline constexpr uint64_t kMaxPieceBytes = 8ull << 20;
// Unaligned extents whose aligned middle is at least this long are split into head/middle/tail
// so the middle lands in the caller's buffer; smaller ones go through scratch whole.
inline constexpr uint64_t kSplitUnalignedMin = 256ull << 10;

struct ReadPiece {
  uint32_t comp_index = 0;
  uint32_t comp_id = 0;
  uint32_t stripe = 0;
  uint32_t ost = 0;
  bool hole = false;        // component not instantiated: no object, the range reads as zeros
  uint64_t obj_offset = 0;  // 4 KiB-aligned (unless hole)
  uint64_t len = 0;         // 4 KiB multiple (unless hole): bytes asked of the OST
  // direct: the reply's blocks land at `dest` (len bytes). Otherwise bytes [skip, skip+copy_len)
  // of the reply are copied to `dest`.
  bool direct = false;
  uint8_t* dest = nullptr;
  uint64_t skip = 0;
  uint64_t copy_len = 0;
};

// Plans reading file range [offset, offset+len) into `buf`.
std::vector<ReadPiece> PlanRead(const FileLayout& layout,
                                uint64_t offset,
                                uint64_t len,
                                uint8_t* buf,
                                uint64_t max_piece = kMaxPieceBytes);

struct WritePiece {
  uint32_t comp_index = 0;
  uint32_t comp_id = 0;
  uint32_t stripe = 0;
  uint32_t ost = 0;  // UINT32_MAX when the component is not instantiated
  uint64_t file_offset = 0;
  uint64_t obj_offset = 0;
  const uint8_t* src = nullptr;
  uint64_t len = 0;
};

// Plans writing `len` bytes from `src` at file `offset`.
std::vector<WritePiece> PlanWrite(const FileLayout& layout,
                                  uint64_t offset,
                                  uint64_t len,
                                  const uint8_t* src,
                                  uint64_t max_piece = kMaxPieceBytes);

}  // namespace ciuic::client
