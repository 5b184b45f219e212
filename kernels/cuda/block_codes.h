// Element codes of the block-scaled formats (e4m3fn, e5m2, E2M1) for the
// block kernels (block_item_math.h, block_walk.h), __host__ __device__:
// their constants, their values, and the figures of 8 consecutive codes
// computed on their packed word (a few integer operations for all 8
// instead of compares per element: the block walk's fast path).
//
// Packed tricks, per field of w bits (8 for fp8 bytes, 4 for E2M1 nibbles)
// holding a magnitude a < 2^(w-1): a + (2^(w-1) - 1) has bit w-1 set iff
// a != 0, and a + (2^(w-1) - t) iff a >= t, never carrying into the next
// field; an equality a == m is a zero of a ^ m.
#pragma once

#include <cstdint>

#include "gnmr/block_tensor.h"
#include "kernels/cuda/item_math.h"

namespace gnmr::cuda::blk {

// Per element format: code width, magnitude mask, the largest finite
// magnitude (the saturated code).
template <BlockFormat F>
struct Code {
  static constexpr bool kE2M1 = F == BlockFormat::kMxfp4 || F == BlockFormat::kNvfp4;
  static constexpr uint32_t kBits = kE2M1 ? 4 : 8;
  static constexpr uint32_t kMask = kE2M1 ? 0x7u : 0x7fu;
  static constexpr uint32_t kSaturated =
      kE2M1 ? 0x7u : (F == BlockFormat::kMxfp8E5M2 ? 0x7bu : 0x7eu);
};

// The value of a code, exactly (NaN / Inf codes give NaN / Inf).
template <BlockFormat F>
GNMR_HD double DecodeCode(uint32_t code) {
  if constexpr (Code<F>::kE2M1) {
    // 0, 0.5, 1, 1.5, 2, 3, 4, 6: m * 0.5 below 2, else (2 + m) * 2^(e - 2).
    const uint32_t a = code & 7u;
    const double mag = a < 2 ? a * 0.5 : static_cast<double>((2u + (a & 1u)) << (a >> 1)) * 0.25;
    return (code & 8u) != 0 ? -mag : mag;
  } else if constexpr (F == BlockFormat::kMxfp8E5M2) {
    return item::Decode<DType::kFp8E5M2>(code);
  } else {
    return item::Decode<DType::kFp8E4M3>(code);
  }
}

GNMR_HD uint32_t Popc(uint32_t x) {
#ifdef __CUDA_ARCH__
  return static_cast<uint32_t>(__popc(x));
#else
  return static_cast<uint32_t>(__builtin_popcount(x));
#endif
}

// The figures of 8 codes packed Code<F>::kBits apart (the low 32 bits for
// E2M1, all 64 for fp8): zero and saturated codes, the largest magnitude,
// and whether any code is a NaN / Inf pattern.
struct Packed {
  uint32_t zeros, saturated, max_mag;
  bool nonfinite;
};
template <BlockFormat F>
GNMR_HD Packed PackedCodes(uint64_t w) {
  Packed p{0, 0, 0, false};
  if constexpr (Code<F>::kE2M1) {
    const uint32_t a = static_cast<uint32_t>(w) & 0x77777777u, ones = 0x11111111u;
    p.zeros = 8u - Popc(((a + 0x77777777u) >> 3) & ones);
    const uint32_t x = a ^ (Code<F>::kSaturated * ones);  // 0 where saturated
    p.saturated = 8u - Popc(((x + 0x77777777u) >> 3) & ones);
    for (uint32_t k = 0; k < 32; k += 4) {
      const uint32_t m = (a >> k) & 7u;
      p.max_mag = m > p.max_mag ? m : p.max_mag;
    }
  } else {
    constexpr uint32_t kOnes = 0x01010101u;
    constexpr uint32_t kNonfinite = F == BlockFormat::kMxfp8E5M2 ? 0x7cu : 0x7fu;
    for (uint32_t half = 0; half < 2; ++half) {
      const uint32_t a = static_cast<uint32_t>(w >> (32 * half)) & 0x7f7f7f7fu;
      p.zeros += 4u - Popc(((a + 0x7f7f7f7fu) >> 7) & kOnes);
      const uint32_t x = a ^ (Code<F>::kSaturated * kOnes);
      p.saturated += 4u - Popc(((x + 0x7f7f7f7fu) >> 7) & kOnes);
      p.nonfinite = p.nonfinite || (((a + (0x80u - kNonfinite) * kOnes) & 0x80808080u) != 0u);
      const uint32_t m2 = item::MaxU16x2(a & 0x00ff00ffu, (a >> 8) & 0x00ff00ffu);
      const uint32_t m = (m2 & 0xffffu) > (m2 >> 16) ? (m2 & 0xffffu) : (m2 >> 16);
      p.max_mag = m > p.max_mag ? m : p.max_mag;
    }
  }
  return p;
}

}  // namespace gnmr::cuda::blk
