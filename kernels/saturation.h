// The saturation pattern of a tensor (kernels/stats_order.h, "saturated"):
// TensorRef::saturation_magnitude turned into the magnitude bit pattern the
// kernels compare against. Host code, shared by the CPU path
// (kernels/cpu/cpu_stats.cc, per computation) and the CUDA path
// (kernels/cuda/table_builder.cc, per table).
//
// Integer operations only, so a caller's FTZ/DAZ mode cannot change the
// result (a subnormal magnitude is a valid threshold).
#pragma once

#include <cstdint>
#include <cstring>

#include "gnmr/tensor.h"

namespace gnmr::saturation {

// A binary format's mantissa bits, exponent bias and first NaN/Inf
// magnitude pattern (e4m3fn: 0x7f, its only non-finite magnitude).
struct FormatBits {
  int mant_bits;
  int bias;
  uint32_t nonfinite;
};

inline FormatBits BitsOf(DType d) {
  switch (d) {
    case DType::kBf16:
      return {7, 127, 0x7f80u};
    case DType::kFp16:
      return {10, 15, 0x7c00u};
    case DType::kFp8E4M3:
      return {3, 7, 0x7fu};
    case DType::kFp8E5M2:
      return {2, 15, 0x7cu};
    default:
      return {23, 127, 0x7f800000u};  // fp32
  }
}

// The bit pattern of the double equal to the finite magnitude pattern `a`
// of format f (exact: every such value is a normal double or zero). For
// positive doubles the bit-pattern order is the value order.
inline uint64_t AsDoubleBits(uint32_t a, const FormatBits& f) {
  if (a == 0) return 0;
  const uint32_t field = a >> f.mant_bits;
  uint64_t mant = a & ((1u << f.mant_bits) - 1u);
  int64_t exp = static_cast<int64_t>(field) - f.bias;
  int width = f.mant_bits;  // significant mantissa bits below the leading 1
  if (field == 0) {         // subnormal: mant * 2^(1 - bias - mant_bits)
    int top = 31 - __builtin_clz(static_cast<uint32_t>(mant));
    exp = 1 - f.bias - f.mant_bits + top;
    mant &= (1ull << top) - 1u;
    width = top;
  }
  return (static_cast<uint64_t>(exp + 1023) << 52) | (mant << (52 - width));
}

// The saturation pattern of a tensor of `dtype` with this
// saturation_magnitude: 0 = not counted (magnitude +0/-0, negative or
// NaN; validation is the callers'), the format's largest finite pattern
// for +Inf (kSaturationAtFormatMax), else the least finite magnitude
// pattern whose value is >= the magnitude, or the format's first NaN/Inf
// pattern (counts nothing) when the magnitude is above every finite value.
inline uint32_t Threshold(DType dtype, float magnitude) {
  uint32_t m;
  std::memcpy(&m, &magnitude, sizeof m);
  const FormatBits f = BitsOf(dtype);
  if ((m >> 31) != 0 || m == 0 || m > 0x7f800000u) return 0;
  if (m == 0x7f800000u) return f.nonfinite - 1;
  const uint64_t want = AsDoubleBits(m, BitsOf(DType::kFp32));
  uint32_t lo = 1, hi = f.nonfinite;  // the answer is in [lo, hi]
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (AsDoubleBits(mid, f) >= want) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// Whether a saturation_magnitude is acceptable (not negative, not NaN).
inline bool ValidMagnitude(float magnitude) {
  uint32_t m;
  std::memcpy(&m, &magnitude, sizeof m);
  return m <= 0x7f800000u || m == 0x80000000u;
}

}  // namespace gnmr::saturation
