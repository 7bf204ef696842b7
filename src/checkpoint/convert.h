// fp32 <-> fp16 / bf16 conversion for mixed-precision checkpoint IO.
//
// Narrowing rounds to nearest even and is bit-identical to torch 1.13's `tensor.to(float16)` /
// `tensor.to(bfloat16)`: an fp16 NaN becomes 0x7E00 with the input's sign, every bf16 NaN becomes
// 0xFFFF, bf16 keeps subnormals, overflow gives infinity. Widening is exact; an fp16 NaN widens
// to a quiet NaN keeping its payload (as F16C and torch do), a bf16 value is shifted left by 16.
// The scalar reference functions define the results; the vector kernels (F16C/AVX2, AVX-512)
// are picked at run time with __builtin_cpu_supports and fixed up to match it.
// Thread-safety: pure functions. The bulk functions use OpenMP threads when `threads` != 1.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ciuic/checkpoint.h"

namespace ciuic::checkpoint {

// Instruction set of a bulk kernel. kBest is the best one this CPU supports.
enum class Isa : uint8_t { kBest, kScalar, kAvx2, kAvx512 };

// Scalar reference conversions of one value (bit patterns in, bit patterns out).
uint16_t Fp32ToFp16Bits(uint32_t f);
uint16_t Fp32ToBf16Bits(uint32_t f);
uint32_t Fp16ToFp32Bits(uint16_t h);
uint32_t Bf16ToFp32Bits(uint16_t h);

// True when this CPU can run kernels of `isa` (kBest and kScalar: always).
bool IsaSupported(Isa isa);
// The ISA that kBest resolves to on this CPU.
Isa BestIsa();
const char* IsaName(Isa isa);

// NarrowFloat32/WidenToFloat32 (ciuic/checkpoint.h) with a chosen kernel: an unsupported `isa`
// falls back to the best supported one.
void NarrowFloat32With(
    Isa isa, const float* src, uint16_t* dst, size_t n, HalfKind kind, int threads);
void WidenToFloat32With(
    Isa isa, const uint16_t* src, float* dst, size_t n, HalfKind kind, int threads);

}  // namespace ciuic::checkpoint
