// One block of a block-scaled tensor, walked by one thread of the block
// kernel (block_stats_kernels.cu) in storage order, row by row inside the
// block (docs/statistics.md, "Canonical order", steps 1-3): the block's
// sumsq partial P = Q * (s * s), Q the fp64 sum of decode(code)^2 over its
// finite codes in that order (+0.0 for a scale that is not finite), and
// the code figures judged on x_hat = decode(code) * s: counts, amax, flags.
// __host__ __device__, so the CPU tests (gpu_block_sim.h) run this code.
//
// Why per block and one thread: Q is exact in any order for e4m3 and E2M1
// codes but not for e5m2, whose order is the storage order inside the
// block; one thread adding in that order is the same code for all.
#pragma once

#include <cstdint>

#include "kernels/cuda/block_item_math.h"

namespace gnmr::cuda::blk {

struct BlockWalk {
  double partial = 0.0;
  uint32_t zeros = 0, saturated = 0, nonfinite = 0, nans = 0;  // a block <= 2^14 elements
  uint64_t amax_bits = 0;                                      // |x_hat| over finite x_hat
  uint32_t flags = 0;                                          // kFlagSaturated | kFlagNonzero
};

// Block b (row-major over the block grid) of tensor d, whose scale value
// is `scale`; load_code(i) returns the code of element i (storage order),
// load8(i) the codes of elements i .. i + 7 packed Code<F>::kBits apart
// (i a multiple of 8).
//
// Fast path: with a finite scale, 8 codes starting at a multiple of 8
// (row-wise and square blocks when cols % 8 == 0) are taken from one
// packed word: counts, flags and the largest magnitude by integer tricks
// (block_codes.h; max |x_hat| = max |v| * |s|, exact), and when none is a
// NaN / Inf code only Q's squares per element, in the same order.
template <BlockFormat F, class LoadCode, class Load8>
GNMR_HD BlockWalk WalkBlock(const BlockDesc& d, uint64_t b, double scale, const LoadCode& load_code,
                            const Load8& load8) {
  const uint64_t bi = b / d.grid_cols, bj = b % d.grid_cols;
  const uint64_t r0 = bi << d.log2_block_rows, c0 = bj << d.log2_block_cols;
  const uint64_t r_end = r0 + (uint64_t{1} << d.log2_block_rows);
  const uint64_t c_end = c0 + (uint64_t{1} << d.log2_block_cols);
  const uint64_t r1 = r_end < d.rows ? r_end : d.rows, c1 = c_end < d.cols ? c_end : d.cols;
  BlockWalk w;
  double q = 0.0;
  const bool finite_scale = IsFinite(scale);
  GNMR_NO_UNROLL
  for (uint64_t r = r0; r < r1; ++r) {
    uint64_t c = c0;
    while (finite_scale && c + kSlots <= c1 && (r * d.cols + c) % kSlots == 0) {
      const uint64_t w8 = load8(r * d.cols + c);
      const Packed pk = PackedCodes<F>(w8);
      if (pk.nonfinite) break;  // this row goes on code by code
      GNMR_UNROLL
      for (uint32_t i = 0; i < kSlots; ++i) {
        const double v = DecodeCode<F>(CodeOf<F>(w8, i));
        q = Add(q, Mul(v, v));
      }
      const uint64_t a = DoubleBits(Mul(DecodeCode<F>(pk.max_mag), scale)) & 0x7fffffffffffffffull;
      w.amax_bits = a > w.amax_bits ? a : w.amax_bits;
      w.zeros += pk.zeros;
      w.saturated += pk.saturated;
      w.flags |=
          (pk.saturated != 0u ? kFlagSaturated : 0u) | (pk.zeros < kSlots ? kFlagNonzero : 0u);
      c += kSlots;
    }
    for (; c < c1; ++c) {
      const uint32_t code = load_code(r * d.cols + c);
      const uint32_t mag = code & Code<F>::kMask;
      const double v = DecodeCode<F>(code);
      if (IsFinite(v)) q = Add(q, Mul(v, v));
      const double xh = Mul(v, scale);
      if (IsFinite(xh)) {
        const uint64_t a = DoubleBits(xh) & 0x7fffffffffffffffull;
        w.amax_bits = a > w.amax_bits ? a : w.amax_bits;
      } else {
        ++w.nonfinite;
        w.nans += IsNan(xh) ? 1u : 0u;
      }
      const bool sat = mag == Code<F>::kSaturated;
      w.zeros += mag == 0u ? 1u : 0u;
      w.saturated += sat ? 1u : 0u;
      w.flags |= (sat ? kFlagSaturated : 0u) | (mag != 0u ? kFlagNonzero : 0u);
    }
  }
  const double s = scale < 0.0 ? -scale : scale;
  w.partial = IsFinite(s) ? Mul(q, Mul(s, s)) : 0.0;
  return w;
}

}  // namespace gnmr::cuda::blk
