#include "checkpoint/convert.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace ciuic::checkpoint {
namespace {

// Values measured with Debian's torch 1.13 (tensor.to(torch.float16 / torch.bfloat16)).
struct Known {
  uint32_t f32;
  uint16_t f16;
  uint16_t bf16;
};
constexpr Known kTorch[] = {
    {0x7FC00001u, 0x7E00u, 0xFFFFu},  // quiet NaN with payload
    {0xFFC00001u, 0xFE00u, 0xFFFFu},  // negative NaN
    {0x7F800001u, 0x7E00u, 0xFFFFu},  // signaling NaN
    {0xFF800001u, 0xFE00u, 0xFFFFu}, {0x7FFFFFFFu, 0x7E00u, 0xFFFFu},
    {0x7FC00000u, 0x7E00u, 0xFFFFu}, {0x00000001u, 0x0000u, 0x0000u},  // smallest fp32 subnormal
    {0x00400000u, 0x0000u, 0x0040u},                                   // bf16 keeps subnormals
    {0x80000001u, 0x8000u, 0x8000u}, {0x7F7FFFFFu, 0x7C00u, 0x7F80u},  // max finite: overflows both
    {0x477FF000u, 0x7C00u, 0x4780u},  // fp16 tie at 65520 rounds up to infinity
    {0x477FEFFFu, 0x7BFFu, 0x4780u}, {0x33000000u, 0x0000u, 0x3300u},  // 2^-25: tie to even 0
    {0x33000001u, 0x0001u, 0x3300u}, {0x387FC000u, 0x03FFu, 0x3880u},
    {0x7F800000u, 0x7C00u, 0x7F80u},                                   // infinities
    {0xFF800000u, 0xFC00u, 0xFF80u}, {0x3F800000u, 0x3C00u, 0x3F80u},  // 1.0
    {0x00000000u, 0x0000u, 0x0000u}, {0x80000000u, 0x8000u, 0x8000u},
};

TEST(ConvertTest, ScalarMatchesTorchOnSpecialValues) {
  for (const Known& k : kTorch) {
    EXPECT_EQ(Fp32ToFp16Bits(k.f32), k.f16) << std::hex << k.f32;
    EXPECT_EQ(Fp32ToBf16Bits(k.f32), k.bf16) << std::hex << k.f32;
  }
  // Widening, also measured with torch: fp16 NaN is quieted keeping its payload; bf16 shifts.
  EXPECT_EQ(Fp16ToFp32Bits(0x7C01u), 0x7FC02000u);
  EXPECT_EQ(Fp16ToFp32Bits(0xFC01u), 0xFFC02000u);
  EXPECT_EQ(Fp16ToFp32Bits(0x0001u), 0x33800000u);
  EXPECT_EQ(Bf16ToFp32Bits(0x7F81u), 0x7F810000u);
  EXPECT_EQ(Bf16ToFp32Bits(0x0001u), 0x00010000u);
}

TEST(ConvertTest, WideningRoundTripsEveryHalfValue) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const auto v = static_cast<uint16_t>(h);
    const uint32_t f = Fp16ToFp32Bits(v);
    if ((v & 0x7FFFu) > 0x7C00u) {
      EXPECT_EQ(Fp32ToFp16Bits(f), (v & 0x8000u) | 0x7E00u);
    } else {
      ASSERT_EQ(Fp32ToFp16Bits(f), v) << std::hex << h;
    }
    if ((v & 0x7FFFu) <= 0x7F80u) {
      ASSERT_EQ(Fp32ToBf16Bits(Bf16ToFp32Bits(v)), v) << std::hex << h;
    }
  }
}

std::vector<Isa> VectorIsas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (IsaSupported(isa))
      out.push_back(isa);
  }
  return out;
}

// Checks every vector kernel's narrowing of `in` against the scalar reference (compared with
// memcmp first: the sweep stays fast; a mismatch is then located and named).
void CheckBlock(const std::vector<uint32_t>& in,
                std::vector<uint16_t>& want,
                std::vector<uint16_t>& got,
                const std::vector<Isa>& isas) {
  const size_t n = in.size();
  const auto* src = reinterpret_cast<const float*>(in.data());
  for (HalfKind kind : {HalfKind::kFloat16, HalfKind::kBFloat16}) {
    NarrowFloat32With(Isa::kScalar, src, want.data(), n, kind, 1);
    for (Isa isa : isas) {
      NarrowFloat32With(isa, src, got.data(), n, kind, 1);
      if (std::memcmp(want.data(), got.data(), n * sizeof(uint16_t)) == 0)
        continue;
      for (size_t i = 0; i < n; ++i) {
        if (got[i] != want[i]) {
          FAIL() << IsaName(isa) << (kind == HalfKind::kFloat16 ? " fp16" : " bf16") << " of 0x"
                 << std::hex << in[i] << ": got 0x" << got[i] << " want 0x" << want[i];
        }
      }
    }
  }
}

TEST(ConvertTest, VectorWideningMatchesScalarOnEveryHalfPattern) {
  std::vector<uint16_t> halves(0x10000 + 7);
  for (size_t i = 0; i < halves.size(); ++i)
    halves[i] = static_cast<uint16_t>(i);
  std::vector<uint32_t> got(halves.size());
  for (HalfKind kind : {HalfKind::kFloat16, HalfKind::kBFloat16}) {
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (!IsaSupported(isa))
        continue;
      WidenToFloat32With(isa, halves.data(), reinterpret_cast<float*>(got.data()), halves.size(),
                         kind, 1);
      for (size_t i = 0; i < halves.size(); ++i) {
        const uint32_t want =
            kind == HalfKind::kFloat16 ? Fp16ToFp32Bits(halves[i]) : Bf16ToFp32Bits(halves[i]);
        ASSERT_EQ(got[i], want) << IsaName(isa) << " widen of 0x" << std::hex << halves[i];
      }
    }
  }
}

TEST(ConvertTest, VectorKernelsMatchScalarOnEveryFp32Pattern) {
  const std::vector<Isa> isas = VectorIsas();
  if (isas.empty())
    GTEST_SKIP() << "no vector ISA on this CPU";
  constexpr size_t kChunk = size_t{1} << 22;
  std::vector<uint32_t> in(kChunk + 13);  // odd length: exercises the scalar tails
  std::vector<uint16_t> want(in.size());
  std::vector<uint16_t> got(in.size());
#ifdef CIUIC_CHECKPOINT_SAMPLED_SWEEP
  // Sanitizer build: 4 chunks of random patterns plus every pattern near the special values.
  const uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int c = 0; c < 4; ++c) {
    for (auto& v : in)
      v = static_cast<uint32_t>(rng());
    CheckBlock(in, want, got, isas);
    if (HasFatalFailure())
      return;
  }
  std::vector<uint32_t> special;
  for (uint32_t base : {0x00000000u, 0x7F800000u, 0x7FC00000u, 0x477FF000u, 0x38800000u,
                        0x33000000u, 0x00800000u, 0x7F7F0000u}) {
    for (uint32_t d = 0; d < 4096; ++d) {
      for (uint32_t s : {0u, 0x80000000u}) {
        special.push_back((base + d) | s);
        special.push_back((base - d) | s);
      }
    }
  }
  std::vector<uint16_t> swant(special.size());
  std::vector<uint16_t> sgot(special.size());
  CheckBlock(special, swant, sgot, isas);
#else
  // Release build: all 2^32 patterns, chunk by chunk (each chunk starts at an arbitrary value).
  const uint64_t total = uint64_t{1} << 32;
  for (uint64_t start = 0; start < total; start += kChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(in.size(), total - start));
    in.resize(n);
    for (size_t i = 0; i < n; ++i)
      in[i] = static_cast<uint32_t>(start + i);
    CheckBlock(in, want, got, isas);
    if (HasFatalFailure())
      return;
    in.resize(kChunk + 13);
  }
#endif
}

TEST(ConvertTest, ThreadedConversionEqualsSingleThreaded) {
  std::mt19937 rng(7);
  std::vector<uint32_t> in((size_t{1} << 20) + 5);
  for (auto& v : in)
    v = rng();
  const auto* src = reinterpret_cast<const float*>(in.data());
  for (HalfKind kind : {HalfKind::kFloat16, HalfKind::kBFloat16}) {
    std::vector<uint16_t> one(in.size()), many(in.size());
    NarrowFloat32(src, one.data(), in.size(), kind, 1);
    NarrowFloat32(src, many.data(), in.size(), kind, 2);
    EXPECT_EQ(one, many);
    std::vector<float> w1(in.size()), w2(in.size());
    WidenToFloat32(one.data(), w1.data(), in.size(), kind, 1);
    WidenToFloat32(one.data(), w2.data(), in.size(), kind, 0);
    EXPECT_EQ(0, std::memcmp(w1.data(), w2.data(), w1.size() * sizeof(float)));
  }
}

}  // namespace
}  // namespace ciuic::checkpoint
