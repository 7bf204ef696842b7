// Conversion kernels. Vector kernels handle whole blocks; tails go through the scalar reference.
// fp16 narrowing uses the hardware conversion (VCVTPS2PH, round to nearest even, exact for
// subnormals) and then rewrites NaN lanes to 0x7E00|sign, because the hardware keeps payload
// bits torch drops. bf16 narrowing uses integer round-to-nearest-even (x + 0x7FFF + lsb) >> 16,
// which keeps subnormals (AVX-512 BF16's VCVTNEPS2BF16 flushes them), then forces NaN to 0xFFFF.
#include "checkpoint/convert.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_epi32() (`__Y = __Y`), which
// -Wmaybe-uninitialized flags once inlined; the value is never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace ciuic::checkpoint {

uint16_t Fp32ToFp16Bits(uint32_t f) {
  const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  const uint32_t a = f & 0x7FFFFFFFu;
  if (a > 0x7F800000u)  // NaN
    return sign | 0x7E00u;
  if (a >= 0x477FF000u)  // rounds to or beyond 65536 (or is infinity)
    return sign | 0x7C00u;
  if (a < 0x38800000u) {  // below 2^-14: fp16 subnormal or zero
    const uint32_t e = a >> 23;
    if (e < 102)  // below 2^-25 (a tie at exactly 2^-25 rounds to the even 0)
      return sign;
    const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;  // value in units of 2^-24 is mant >> shift
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u)))
      ++r;
    return static_cast<uint16_t>(sign | r);
  }
  const uint32_t rebased = a - (112u << 23);  // exponent bias 127 -> 15
  const uint32_t r = (rebased + 0xFFFu + ((rebased >> 13) & 1u)) >> 13;
  return static_cast<uint16_t>(sign | r);
}

uint16_t Fp32ToBf16Bits(uint32_t f) {
  if ((f & 0x7FFFFFFFu) > 0x7F800000u)
    return 0xFFFFu;
  return static_cast<uint16_t>((f + 0x7FFFu + ((f >> 16) & 1u)) >> 16);
}

uint32_t Fp16ToFp32Bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  uint32_t m = h & 0x3FFu;
  if (e == 0x1F)
    return sign | 0x7F800000u | (m != 0 ? (0x400000u | (m << 13)) : 0u);
  if (e == 0) {
    if (m == 0)
      return sign;
    int exp = 113;  // normalize the subnormal
    while ((m & 0x400u) == 0) {
      m <<= 1;
      --exp;
    }
    return sign | (static_cast<uint32_t>(exp) << 23) | ((m & 0x3FFu) << 13);
  }
  return sign | ((e + 112u) << 23) | (m << 13);
}

uint32_t Bf16ToFp32Bits(uint16_t h) {
  return static_cast<uint32_t>(h) << 16;
}

namespace {

void NarrowScalar(const float* src, uint16_t* dst, size_t n, HalfKind kind) {
  const auto* s = reinterpret_cast<const uint32_t*>(src);
  if (kind == HalfKind::kFloat16) {
    for (size_t i = 0; i < n; ++i)
      dst[i] = Fp32ToFp16Bits(s[i]);
  } else {
    for (size_t i = 0; i < n; ++i)
      dst[i] = Fp32ToBf16Bits(s[i]);
  }
}

void WidenScalar(const uint16_t* src, float* dst, size_t n, HalfKind kind) {
  auto* d = reinterpret_cast<uint32_t*>(dst);
  if (kind == HalfKind::kFloat16) {
    for (size_t i = 0; i < n; ++i)
      d[i] = Fp16ToFp32Bits(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i)
      d[i] = Bf16ToFp32Bits(src[i]);
  }
}

#define CIUIC_AVX2 __attribute__((target("avx2,f16c")))
#define CIUIC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))

// NaN lanes of 8 fp16 results (|h| > 0x7C00) become 0x7E00 with their sign.
CIUIC_AVX2 inline __m128i FixFp16Nan128(__m128i h) {
  const __m128i abs = _mm_and_si128(h, _mm_set1_epi16(0x7FFF));
  const __m128i nan = _mm_cmpgt_epi16(abs, _mm_set1_epi16(0x7C00));
  const __m128i canon = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16(static_cast<short>(0x8000))),
                                     _mm_set1_epi16(0x7E00));
  return _mm_blendv_epi8(h, canon, nan);
}

CIUIC_AVX2 inline __m256i FixFp16Nan256(__m256i h) {
  const __m256i abs = _mm256_and_si256(h, _mm256_set1_epi16(0x7FFF));
  const __m256i nan = _mm256_cmpgt_epi16(abs, _mm256_set1_epi16(0x7C00));
  const __m256i canon =
      _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0x8000))),
                      _mm256_set1_epi16(0x7E00));
  return _mm256_blendv_epi8(h, canon, nan);
}

// bf16 of 8 fp32 lanes as 32-bit lanes (high half zero).
CIUIC_AVX2 inline __m256i Bf16Lanes256(__m256i x) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000));
  return _mm256_or_si256(r, _mm256_and_si256(nan, _mm256_set1_epi32(0xFFFF)));
}

CIUIC_AVX2 void NarrowAvx2(const float* src, uint16_t* dst, size_t n, HalfKind kind) {
  size_t i = 0;
  if (kind == HalfKind::kFloat16) {
    for (; i + 16 <= n; i += 16) {
      __m128i a = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
      __m128i b = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + 8), _MM_FROUND_TO_NEAREST_INT);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), FixFp16Nan128(a));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 8), FixFp16Nan128(b));
    }
  } else {
    for (; i + 16 <= n; i += 16) {
      __m256i a = Bf16Lanes256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
      __m256i b = Bf16Lanes256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
      // packus works per 128-bit lane: a0-3 b0-3 a4-7 b4-7; reorder the 64-bit quarters.
      __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
    }
  }
  NarrowScalar(src + i, dst + i, n - i, kind);
}

CIUIC_AVX2 void WidenAvx2(const uint16_t* src, float* dst, size_t n, HalfKind kind) {
  size_t i = 0;
  if (kind == HalfKind::kFloat16) {
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
  } else {
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), w);
    }
  }
  WidenScalar(src + i, dst + i, n - i, kind);
}

CIUIC_AVX512 void NarrowAvx512(const float* src, uint16_t* dst, size_t n, HalfKind kind) {
  size_t i = 0;
  if (kind == HalfKind::kFloat16) {
    for (; i + 16 <= n; i += 16) {
      __m256i h =
          _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), FixFp16Nan256(h));
    }
  } else {
    const __m512i bias = _mm512_set1_epi32(0x7FFF);
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
    const __m512i inf = _mm512_set1_epi32(0x7F800000);
    const __m512i all = _mm512_set1_epi32(0xFFFF);
    for (; i + 16 <= n; i += 16) {
      __m512i x = _mm512_loadu_si512(src + i);
      __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), one);
      __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, bias), lsb), 16);
      __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, abs_mask), inf);
      r = _mm512_mask_mov_epi32(r, nan, all);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(r));
    }
  }
  NarrowScalar(src + i, dst + i, n - i, kind);
}

CIUIC_AVX512 void WidenAvx512(const uint16_t* src, float* dst, size_t n, HalfKind kind) {
  size_t i = 0;
  if (kind == HalfKind::kFloat16) {
    for (; i + 16 <= n; i += 16) {
      __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
      _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
    }
  } else {
    for (; i + 16 <= n; i += 16) {
      __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
      _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  }
  WidenScalar(src + i, dst + i, n - i, kind);
}

Isa Resolve(Isa isa) {
  if (isa == Isa::kBest || !IsaSupported(isa))
    return BestIsa();
  return isa;
}

// Below this many values a single thread is faster than waking a team.
constexpr size_t kParallelMin = size_t{1} << 18;
constexpr size_t kBlock = size_t{1} << 16;  // values per OpenMP work item

template <typename In, typename Out, typename Fn>
void RunBlocks(const In* src, Out* dst, size_t n, int threads, Fn fn) {
  if (threads == 1 || n < kParallelMin) {
    fn(src, dst, n);
    return;
  }
  const int team = threads > 0 ? threads : omp_get_max_threads();
  const auto blocks = static_cast<int64_t>((n + kBlock - 1) / kBlock);
#pragma omp parallel for num_threads(team) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t start = static_cast<size_t>(b) * kBlock;
    fn(src + start, dst + start, std::min(kBlock, n - start));
  }
}

}  // namespace

bool IsaSupported(Isa isa) {
  switch (isa) {
    case Isa::kBest:
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c");
  }
  return false;
}

Isa BestIsa() {
  static const Isa best = IsaSupported(Isa::kAvx512) ? Isa::kAvx512
                          : IsaSupported(Isa::kAvx2) ? Isa::kAvx2
                                                     : Isa::kScalar;
  return best;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kBest:
      return IsaName(BestIsa());
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2+f16c";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

void NarrowFloat32With(
    Isa isa, const float* src, uint16_t* dst, size_t n, HalfKind kind, int threads) {
  const Isa use = Resolve(isa);
  RunBlocks(src, dst, n, threads, [use, kind](const float* s, uint16_t* d, size_t k) {
    switch (use) {
      case Isa::kAvx512:
        NarrowAvx512(s, d, k, kind);
        break;
      case Isa::kAvx2:
        NarrowAvx2(s, d, k, kind);
        break;
      default:
        NarrowScalar(s, d, k, kind);
        break;
    }
  });
}

void WidenToFloat32With(
    Isa isa, const uint16_t* src, float* dst, size_t n, HalfKind kind, int threads) {
  const Isa use = Resolve(isa);
  RunBlocks(src, dst, n, threads, [use, kind](const uint16_t* s, float* d, size_t k) {
    switch (use) {
      case Isa::kAvx512:
        WidenAvx512(s, d, k, kind);
        break;
      case Isa::kAvx2:
        WidenAvx2(s, d, k, kind);
        break;
      default:
        WidenScalar(s, d, k, kind);
        break;
    }
  });
}

void NarrowFloat32(const float* src, uint16_t* dst, size_t n, HalfKind kind, int threads) {
  NarrowFloat32With(Isa::kBest, src, dst, n, kind, threads);
}

void WidenToFloat32(const uint16_t* src, float* dst, size_t n, HalfKind kind, int threads) {
  WidenToFloat32With(Isa::kBest, src, dst, n, kind, threads);
}

}  // namespace ciuic::checkpoint
