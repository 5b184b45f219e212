// Element codes of the block-scaled formats (e4m3fn, e5m2, E2M1) for the
// block kernels (block_item_math.h, block_walk.h), __host__ __device__:
// their constants and their values.
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

}  // namespace gnmr::cuda::blk
