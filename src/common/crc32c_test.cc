#include "common/crc32c.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ciuic {
namespace {

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  std::vector<char> zeros(32, 0);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  std::vector<unsigned char> ones(32, 0xff);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  std::string s(10000, 'x');
  for (size_t i = 0; i < s.size(); ++i)
    s[i] = static_cast<char>(i * 7);
  uint32_t whole = Crc32c(s.data(), s.size());
  for (size_t cut : {0ul, 1ul, 4096ul, 9999ul}) {
    EXPECT_EQ(Crc32cExtend(Crc32c(s.data(), cut), s.data() + cut, s.size() - cut), whole);
  }
}

TEST(Crc32cTest, ZeroBlockCrcMatchesZeros) {
  std::vector<char> zeros(kCrcBlockSize, 0);
  EXPECT_EQ(ZeroBlockCrc(), Crc32c(zeros.data(), zeros.size()));
}

}  // namespace
}  // namespace ciuic
