#include "client/io_plan.h"

#include <cstring>
#include <map>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/buffer.h"
#include "common/crc32c.h"

namespace ciuic::client {
namespace {

FileLayout TwoComponentLayout() {
  FileLayout l;
  LayoutComponent a;
  a.id = 1;
  a.start = 0;
  a.end = 4 << 20;
  a.stripe_size = 64 << 10;
  a.stripe_count = 1;
  a.osts = {0};
  LayoutComponent b;
  b.id = 2;
  b.start = 4 << 20;
  b.end = kLayoutEof;
  b.stripe_size = 1 << 20;
  b.stripe_count = 3;
  b.osts = {1, 2, 0};
  l.components = {a, b};
  return l;
}

// An in-memory set of objects to run plans against.
struct Objects {
  std::map<std::pair<uint32_t, uint32_t>, std::vector<uint8_t>> objs;  // (comp id, stripe)

  void Apply(const WritePiece& p) {
    auto& o = objs[{p.comp_id, p.stripe}];
    if (o.size() < p.obj_offset + p.len)
      o.resize(p.obj_offset + p.len);
    std::memcpy(o.data() + p.obj_offset, p.src, p.len);
  }
  // Serves a ReadPiece like the OSS: whole blocks, zeros past the object's end.
  void Serve(const ReadPiece& p) {
    if (p.hole) {
      std::memset(p.dest, 0, p.copy_len);
      return;
    }
    ASSERT_EQ(p.obj_offset % kCrcBlockSize, 0u);
    ASSERT_EQ(p.len % kCrcBlockSize, 0u);
    std::vector<uint8_t> blocks(p.len, 0);
    auto it = objs.find({p.comp_id, p.stripe});
    if (it != objs.end() && it->second.size() > p.obj_offset) {
      size_t n = std::min<size_t>(p.len, it->second.size() - p.obj_offset);
      std::memcpy(blocks.data(), it->second.data() + p.obj_offset, n);
    }
    if (p.direct) {
      std::memcpy(p.dest, blocks.data(), p.len);
    } else {
      ASSERT_LE(p.skip + p.copy_len, p.len);
      std::memcpy(p.dest, blocks.data() + p.skip, p.copy_len);
    }
  }
};

TEST(IoPlanTest, RandomWritesReadBackThroughPlans) {
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937_64 rng(seed);
  FileLayout layout = TwoComponentLayout();
  ASSERT_TRUE(layout.Validate().ok());
  const uint64_t file_max = 12 << 20;
  std::vector<uint8_t> ref(file_max, 0);
  Objects store;
  for (int i = 0; i < 200; ++i) {
    uint64_t off = rng() % file_max;
    uint64_t len = 1 + rng() % std::min<uint64_t>(file_max - off, 1 << 20);
    std::vector<uint8_t> data(len);
    const uint8_t base = static_cast<uint8_t>(rng());
    for (size_t k = 0; k < len; ++k)
      data[k] = static_cast<uint8_t>(base + k * 131 + (k >> 12));
    std::memcpy(ref.data() + off, data.data(), len);
    for (const WritePiece& p : PlanWrite(layout, off, len, data.data(), 512 << 10)) {
      ASSERT_LE(p.len, 512u << 10);
      store.Apply(p);
    }
  }
  for (int i = 0; i < 300; ++i) {
    uint64_t off = rng() % file_max;
    uint64_t len = 1 + rng() % std::min<uint64_t>(file_max - off, 5 << 20);
    if (i % 3 == 0) {  // aligned reads must be all direct
      off = AlignDown(off, kCrcBlockSize);
      len = AlignUp(len, kCrcBlockSize);
      if (off + len > file_max)
        len = file_max - off;
    }
    std::vector<uint8_t> out(len, 0xEE);
    auto pieces = PlanRead(layout, off, len, out.data(), 1 << 20);
    uint64_t covered = 0;
    for (const ReadPiece& p : pieces) {
      covered += p.direct ? p.len : p.copy_len;
      if (i % 3 == 0) {
        EXPECT_TRUE(p.direct) << "aligned read went through scratch";
      }
      ASSERT_LE(p.len, 1u << 20);
      store.Serve(p);
    }
    ASSERT_EQ(covered, len);
    ASSERT_EQ(0, std::memcmp(out.data(), ref.data() + off, len)) << "off " << off << " len " << len;
  }
}

TEST(IoPlanTest, UnalignedLargeExtentSplitsSoTheMiddleIsDirect) {
  FileLayout layout = TwoComponentLayout();
  std::vector<uint8_t> buf(1 << 20);
  // Inside component 1's first stripe unit, unaligned both ends.
  auto pieces = PlanRead(layout, (4 << 20) + 100, (1 << 20) - 200, buf.data());
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_FALSE(pieces[0].direct);
  EXPECT_TRUE(pieces[1].direct);
  EXPECT_FALSE(pieces[2].direct);
  EXPECT_EQ(pieces[1].dest, buf.data() + (4096 - 100));
  // A small unaligned read is one scratch piece.
  pieces = PlanRead(layout, 10, 100, buf.data());
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_FALSE(pieces[0].direct);
  EXPECT_EQ(pieces[0].obj_offset, 0u);
  EXPECT_EQ(pieces[0].len, 4096u);
  EXPECT_EQ(pieces[0].skip, 10u);
}

TEST(IoPlanTest, UninstantiatedComponentsAreHolesAndUnroutableWrites) {
  FileLayout layout = TwoComponentLayout();
  layout.components[1].osts.clear();
  std::vector<uint8_t> buf(2 << 20);
  auto reads = PlanRead(layout, (4 << 20) - 4096, 8192, buf.data());
  ASSERT_EQ(reads.size(), 2u);
  EXPECT_FALSE(reads[0].hole);
  EXPECT_TRUE(reads[1].hole);
  auto writes = PlanWrite(layout, (4 << 20) - 4096, 8192, buf.data());
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(writes[1].ost, UINT32_MAX);
}

TEST(IoPlanTest, OffsetsBeyond4GiB) {
  FileLayout layout = TwoComponentLayout();
  std::vector<uint8_t> buf(8192);
  const uint64_t off = (5ull << 30) + 4096;
  auto pieces = PlanRead(layout, off, 8192, buf.data());
  ASSERT_EQ(pieces.size(), 1u);
  // Row of 3 MiB units: (off - 4 MiB) / 1 MiB = unit index.
  const uint64_t rel = off - (4 << 20);
  EXPECT_EQ(pieces[0].stripe, (rel >> 20) % 3);
  EXPECT_EQ(pieces[0].obj_offset, ((rel >> 20) / 3) * (1 << 20) + (rel & ((1 << 20) - 1)));
}

}  // namespace
}  // namespace ciuic::client
