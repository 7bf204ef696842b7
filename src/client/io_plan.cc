#include "client/io_plan.h"

#include <algorithm>

#include "common/buffer.h"
#include "common/crc32c.h"

namespace ciuic::client {
namespace {

void AddDirect(const StripeExtent& e,
               uint64_t obj_off,
               uint64_t len,
               uint8_t* dest,
               uint64_t max_piece,
               std::vector<ReadPiece>* out) {
  while (len > 0) {
    uint64_t n = std::min(len, max_piece);
    ReadPiece p;
    p.comp_index = e.comp_index;
    p.comp_id = e.comp_id;
    p.stripe = e.stripe;
    p.ost = e.ost;
    p.obj_offset = obj_off;
    p.len = n;
    p.direct = true;
    p.dest = dest;
    p.copy_len = n;
    out->push_back(p);
    obj_off += n;
    dest += n;
    len -= n;
  }
}

void AddScratch(const StripeExtent& e,
                uint64_t want_off,
                uint64_t want_len,
                uint8_t* dest,
                std::vector<ReadPiece>* out) {
  ReadPiece p;
  p.comp_index = e.comp_index;
  p.comp_id = e.comp_id;
  p.stripe = e.stripe;
  p.ost = e.ost;
  p.obj_offset = AlignDown(want_off, kCrcBlockSize);
  p.len = AlignUp(want_off + want_len, kCrcBlockSize) - p.obj_offset;
  p.direct = false;
  p.dest = dest;
  p.skip = want_off - p.obj_offset;
  p.copy_len = want_len;
  out->push_back(p);
}

}  // namespace

std::vector<ReadPiece> PlanRead(
    const FileLayout& layout, uint64_t offset, uint64_t len, uint8_t* buf, uint64_t max_piece) {
  std::vector<ReadPiece> out;
  max_piece = std::max<uint64_t>(AlignDown(max_piece, kCrcBlockSize), kCrcBlockSize);
  for (const StripeExtent& e : MapRange(layout, offset, len)) {
    uint8_t* dest = buf + (e.file_offset - offset);
    if (e.ost == UINT32_MAX) {
      ReadPiece p;
      p.comp_index = e.comp_index;
      p.comp_id = e.comp_id;
      p.stripe = e.stripe;
      p.ost = e.ost;
      p.hole = true;
      p.obj_offset = e.obj_offset;
      p.len = e.len;
      p.dest = dest;
      p.copy_len = e.len;
      out.push_back(p);
      continue;
    }
    const uint64_t begin = e.obj_offset;
    const uint64_t end = e.obj_offset + e.len;
    const uint64_t mid_begin = AlignUp(begin, kCrcBlockSize);
    const uint64_t mid_end = AlignDown(end, kCrcBlockSize);
    if (mid_begin == begin && mid_end == end) {
      AddDirect(e, begin, e.len, dest, max_piece, &out);
    } else if (mid_end > mid_begin && mid_end - mid_begin >= kSplitUnalignedMin) {
      if (begin != mid_begin)
        AddScratch(e, begin, mid_begin - begin, dest, &out);
      AddDirect(e, mid_begin, mid_end - mid_begin, dest + (mid_begin - begin), max_piece, &out);
      if (end != mid_end)
        AddScratch(e, mid_end, end - mid_end, dest + (mid_end - begin), &out);
    } else {
      // Small or short: one scratch read of the covering blocks (split when huge is impossible:
      // the middle would have been big enough to split).
      AddScratch(e, begin, e.len, dest, &out);
    }
  }
  return out;
}

std::vector<WritePiece> PlanWrite(const FileLayout& layout,
                                  uint64_t offset,
                                  uint64_t len,
                                  const uint8_t* src,
                                  uint64_t max_piece) {
  std::vector<WritePiece> out;
  max_piece = std::max<uint64_t>(max_piece, 1);
  for (const StripeExtent& e : MapRange(layout, offset, len)) {
    uint64_t done = 0;
    while (done < e.len) {
      uint64_t n = std::min(e.len - done, max_piece);
      WritePiece p;
      p.comp_index = e.comp_index;
      p.comp_id = e.comp_id;
      p.stripe = e.stripe;
      p.ost = e.ost;
      p.file_offset = e.file_offset + done;
      p.obj_offset = e.obj_offset + done;
      p.src = src + (e.file_offset - offset) + done;
      p.len = n;
      out.push_back(p);
      done += n;
    }
  }
  return out;
}

}  // namespace ciuic::client
