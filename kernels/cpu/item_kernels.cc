// One ISA build of the CPU statistics kernel (see item_kernels.h).
//
// The lane loop has fixed trip counts and no branches: selections use bit
// masks, not ?:, because GCC does not if-convert a select that feeds a
// memcpy bit cast, and an unvectorized loop is 2-4x slower. |x| is decoded
// with integer operations and an int -> double conversion only, so no
// floating-point instruction sees a denormal and FTZ/DAZ modes set by the
// training framework cannot change the result.
#include <cstdint>
#include <cstring>

#include "kernels/cpu/item_kernels.h"
#include "kernels/stats_order.h"

#ifndef GNMR_CPU_ISA
#define GNMR_CPU_ISA isa_baseline
#endif

namespace gnmr::cpu::GNMR_CPU_ISA {
namespace {

// A binary format with an all-ones exponent for Inf/NaN.
template <typename BitsT, uint32_t kAbs, uint32_t kExp, int kMant, int kBiasV>
struct Format {
  using Bits = BitsT;
  static constexpr uint32_t kAbsMask = kAbs;  // clears the sign bit
  static constexpr uint32_t kExpMask = kExp;  // exponent all ones
  static constexpr int kMantBits = kMant;
  static constexpr int kBias = kBiasV;
};
using Fp32 = Format<uint32_t, 0x7fffffffu, 0x7f800000u, 23, 127>;
using Bf16 = Format<uint16_t, 0x7fffu, 0x7f80u, 7, 127>;
using Fp16 = Format<uint16_t, 0x7fffu, 0x7c00u, 10, 15>;

constexpr double Pow2(int e) {
  double r = 1.0;
  for (; e > 0; --e) r *= 2.0;
  for (; e < 0; ++e) r *= 0.5;
  return r;
}

// |x| for a finite magnitude bit pattern `a` (sign cleared); exact.
template <typename F>
inline double Decode(uint32_t a) {
  // Normal: re-bias the exponent and widen the mantissa in the bit pattern.
  const uint64_t normal_bits = (static_cast<uint64_t>(a) << (52 - F::kMantBits)) +
                               (static_cast<uint64_t>(1023 - F::kBias) << 52);
  // Subnormal (exponent field 0): mantissa * 2^(1 - bias - mant_bits).
  constexpr double kSubScale = Pow2(1 - F::kBias - F::kMantBits);
  const double sub = static_cast<double>(static_cast<int32_t>(a)) * kSubScale;
  uint64_t sub_bits;
  std::memcpy(&sub_bits, &sub, sizeof sub);
  const uint64_t normal = 0ull - static_cast<uint64_t>(a >= (1u << F::kMantBits));
  const uint64_t bits = (normal_bits & normal) | (sub_bits & ~normal);
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

// Steps 1-4 of stats_order.h for the work item of `n` <= 4096 elements at
// `p`. Missing elements of a partial item would add +0.0 to a non-negative
// lane, which changes nothing, so they are simply not visited.
template <typename F>
double ItemPartial(const unsigned char* p, uint32_t n, uint32_t* amax_bits,
                   ItemCounters* c) {
  using Bits = typename F::Bits;
  constexpr uint32_t kLanes = stats_order::kLanes;
  alignas(64) double lane[kLanes];
  for (uint32_t j = 0; j < kLanes; ++j) lane[j] = 0.0;
  uint32_t amax = 0, zeros = 0, nonfinite = 0, nans = 0;
  const uint32_t rows = (n + kLanes - 1) / kLanes;
  for (uint32_t r = 0; r < rows; ++r) {
    const unsigned char* row = p + static_cast<uint64_t>(r) * kLanes * sizeof(Bits);
    const uint32_t width = r + 1 < rows ? kLanes : n - r * kLanes;
    // Fixed trip count for full rows, so the vectorizer sees 256.
    const uint32_t end = width == kLanes ? kLanes : width;
    for (uint32_t j = 0; j < end; ++j) {
      Bits b;
      std::memcpy(&b, row + j * sizeof(Bits), sizeof b);
      const uint32_t a = b & F::kAbsMask;
      // Non-finite elements become +0 here: they add +0.0, never win amax.
      const uint32_t fa = a & (0u - static_cast<uint32_t>(a < F::kExpMask));
      const double m = Decode<F>(fa);
      lane[j] += m * m;
      amax = amax > fa ? amax : fa;
      zeros += a == 0;
      nonfinite += a >= F::kExpMask;
      nans += a > F::kExpMask;
    }
  }
  for (uint32_t s = kLanes / 2; s >= 1; s /= 2) {
    for (uint32_t j = 0; j < s; ++j) lane[j] += lane[j + s];
  }
  *amax_bits = *amax_bits > amax ? *amax_bits : amax;
  c->zeros += zeros;
  c->nonfinite += nonfinite;
  c->nans += nans;
  return lane[0];
}

template <typename F>
uint64_t ItemsOf(const unsigned char* data, uint64_t numel, double* partials,
                 ItemCounters* c) {
  constexpr uint64_t kItem = stats_order::kItemElems;
  uint32_t amax_bits = 0;
  uint64_t k = 0;
  for (uint64_t first = 0; first < numel; first += kItem, ++k) {
    const uint32_t n = static_cast<uint32_t>(numel - first < kItem ? numel - first : kItem);
    partials[k] = ItemPartial<F>(data + first * sizeof(typename F::Bits), n, &amax_bits, c);
  }
  const double amax = Decode<F>(amax_bits);
  c->amax = c->amax > amax ? c->amax : amax;
  return k;
}

}  // namespace

uint64_t Items(DType dtype, const unsigned char* data, uint64_t numel,
               double* partials, ItemCounters* c) {
  switch (dtype) {
    case DType::kFp32: return ItemsOf<Fp32>(data, numel, partials, c);
    case DType::kBf16: return ItemsOf<Bf16>(data, numel, partials, c);
    case DType::kFp16: return ItemsOf<Fp16>(data, numel, partials, c);
    default: return 0;  // checked by the caller
  }
}

}  // namespace gnmr::cpu::GNMR_CPU_ISA
