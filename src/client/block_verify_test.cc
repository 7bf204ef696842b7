#include "client/block_verify.h"

#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/crc32c.h"

namespace ciuic::client {
namespace {

struct Reply {
  std::vector<uint8_t> data;
  std::vector<uint32_t> crcs;
};

Reply MakeReply(size_t blocks, uint32_t seed) {
  Reply r;
  r.data.resize(blocks * kCrcBlockSize);
  std::mt19937 rng(seed);
  for (auto& b : r.data)
    b = static_cast<uint8_t>(rng());
  for (size_t i = 0; i < blocks; ++i) {
    // The OSS keeps an old CRC beside the new one: put the real CRC in either slot.
    uint32_t crc = Crc32c(r.data.data() + i * kCrcBlockSize, kCrcBlockSize);
    if (i % 2 == 0) {
      r.crcs.push_back(crc);
      r.crcs.push_back(0xdeadbeef);
    } else {
      r.crcs.push_back(0x12345678);
      r.crcs.push_back(crc);
    }
  }
  return r;
}

BlockSource Src() {
  BlockSource s;
  s.ost = 3;
  s.obj = ObjectId{Fid{0x42, 0, 0}, 1, 2};
  return s;
}

TEST(BlockVerifyTest, AcceptsEitherSlot) {
  Reply r = MakeReply(4, 1);
  EXPECT_TRUE(VerifyReadBlocks(r.data.data(), r.data.size(), 8192, 1 << 20, true, r.crcs.data(),
                               r.crcs.size(), Src())
                  .ok());
}

TEST(BlockVerifyTest, FlippedByteIsCorruptionNamingOstObjectAndOffset) {
  Reply r = MakeReply(4, 2);
  r.data[2 * kCrcBlockSize + 17] ^= 0x01;
  Status st = VerifyReadBlocks(r.data.data(), r.data.size(), 8192, 1 << 20, true, r.crcs.data(),
                               r.crcs.size(), Src());
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("OST 3"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find(Src().obj.FileName()), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("offset 16384"), std::string::npos) << st.ToString();
}

TEST(BlockVerifyTest, HoleBlockVerifiesAsZeros) {
  std::vector<uint8_t> data(kCrcBlockSize, 0);
  std::vector<uint32_t> crcs = {ZeroBlockCrc(), 0};
  EXPECT_TRUE(
      VerifyReadBlocks(data.data(), data.size(), 0, 1 << 20, true, crcs.data(), crcs.size(), Src())
          .ok());
}

TEST(BlockVerifyTest, BlocksPastObjectEndReadZeros) {
  Reply r = MakeReply(3, 3);
  r.crcs[4] = r.crcs[5] = 0;  // the third block lies past the object's end: not checked
  std::memset(r.data.data() + 2 * kCrcBlockSize, 0xAB, kCrcBlockSize);
  ASSERT_TRUE(VerifyReadBlocks(r.data.data(), r.data.size(), 0, 2 * kCrcBlockSize, true,
                               r.crcs.data(), r.crcs.size(), Src())
                  .ok());
  for (size_t i = 2 * kCrcBlockSize; i < r.data.size(); ++i)
    ASSERT_EQ(r.data[i], 0);
}

TEST(BlockVerifyTest, MissingObjectReadsZeros) {
  std::vector<uint8_t> data(2 * kCrcBlockSize, 0x77);
  ASSERT_TRUE(VerifyReadBlocks(data.data(), data.size(), 0, 0, false, nullptr, 0, Src()).ok());
  for (uint8_t b : data)
    ASSERT_EQ(b, 0);
}

TEST(BlockVerifyTest, MalformedRepliesAreCorruption) {
  Reply r = MakeReply(2, 4);
  EXPECT_EQ(
      VerifyReadBlocks(r.data.data(), r.data.size(), 0, 1 << 20, true, r.crcs.data(), 3, Src())
          .code(),
      StatusCode::kCorruption);
  EXPECT_EQ(VerifyReadBlocks(r.data.data(), 100, 0, 1 << 20, true, r.crcs.data(), 2, Src()).code(),
            StatusCode::kCorruption);
  EXPECT_EQ(VerifyReadBlocks(r.data.data(), r.data.size(), 100, 1 << 20, true, r.crcs.data(),
                             r.crcs.size(), Src())
                .code(),
            StatusCode::kCorruption);
}

}  // namespace
}  // namespace ciuic::client
