// The arithmetic of the block-scaled kernels shared by both passes
// (block_stats_kernels.cu): the descriptor, decoding, scale indexing and
// classes, and the item kernel of tensors with a source, where one warp
// computes the error and source sums of one 4096-element work item
// (docs/statistics.md, "Canonical order", step 6: the element order of
// kernels/stats_order.h steps 2-4). sumsq and the code figures are the
// block kernel's (block_walk.h). Everything here is __host__ __device__,
// so the CPU tests (tests/kernels/gpu_block_math_test.cc) run this very
// code on a simulated warp; the loads, shuffles and atomics are the
// kernel's.
//
// Layout. Each thread of the warp owns 8 of the item's 256 lanes: in item
// row r (0..15), slot i of thread t is element r * 256 + t * 8 + i, lane
// t * 8 + i (item_math.h's layout with P = 8). A thread's 8 codes of a row
// are consecutive bytes (fp8: 8 bytes; E2M1: 4), so a warp's row is one
// coalesced 256- or 128-byte span, read with one 8- or 4-byte load per
// thread where the address allows (byte loads otherwise), and every lane
// adds its 16 rows in order (step 3). The lane tree is item_math.h's.
//
// Scales. Elements are taken in storage order whatever the block layout,
// so a thread tracks its element's (row, column) incrementally (one
// division per item, then compares) and reloads the scale only when the
// block changes; the scale tensor is small and stays in cache. When the
// thread's 8 elements of a row lie in one block (row-wise and square
// blocks with cols % 8 == 0: always) the block is looked up once for the 8.
//
// Dead blocks need to know whether a block's source has a non-zero
// element, and a block (32x1, 128x128) spans many items: each thread ORs
// the block's flag into a flag word when it leaves the block (atomicOr,
// order-free), and the block kernel reads it afterwards (BlockFigures).
//
// Arithmetic: x_hat = decode(code) * decode(scale), one exact fp64
// multiply, y = x_hat * g exact; d * d and x * x are multiplied then added
// (never fused: the canonical acc + d * d).
#pragma once

#include <cstdint>
#include <cstring>

#include "gnmr/block_tensor.h"
#include "kernels/cuda/block_codes.h"
#include "kernels/cuda/item_math.h"

namespace gnmr::cuda::blk {

using item::kItemElems;
using item::kLanes;
using item::kRows;
using item::kSlots;
using item::kWarp;

// Block flags, 4 bits per block (8 blocks per 32-bit flag word).
constexpr uint32_t kFlagSaturated = 1, kFlagNonzero = 2, kFlagSourceNonzero = 4;

// One tensor as the kernels see it (built by the host from a
// BlockTensorRef, pointers already translated for the device).
struct BlockDesc {
  const unsigned char* data;
  const unsigned char* scales;
  const unsigned char* source;
  uint64_t rows, cols, numel;
  uint64_t grid_rows, grid_cols;   // the block grid
  uint64_t scale_cols;             // compact: row stride; swizzled: Cpad
  uint64_t n_items, first_item;    // item sums (source sums): [first_item, + n_items)
  uint64_t n_segs, first_seg;      // their segments (4096 items each)
  uint64_t n_blocks, first_block;  // flag slots and block partials (sumsq)
  uint64_t n_bsegs, first_bseg;    // segments of block partials (4096 each)
  double global_scale;             // 1 unless NVFP4
  uint32_t format, layout, scale_layout, source_dtype;
  uint32_t log2_block_rows, log2_block_cols;
  // From a thread's 8th element of one item row to its first of the next
  // (248 elements further): 248 = step_rows * cols + step_cols.
  uint32_t step_rows, step_cols;
};

GNMR_HD double Mul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
GNMR_HD double Add(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
GNMR_HD uint64_t DoubleBits(double x) {
  uint64_t b;
  std::memcpy(&b, &x, 8);
  return b;
}
GNMR_HD double DoubleFromBits(uint64_t b) {
  double x;
  std::memcpy(&x, &b, 8);
  return x;
}
// On the bit pattern: no floating-point test, whatever the FTZ mode.
GNMR_HD bool IsFinite(double x) {
  return (DoubleBits(x) & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
}
GNMR_HD bool IsNan(double x) {
  return (DoubleBits(x) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
}
// floor(log2 |x|) of a normal, finite, non-zero double.
GNMR_HD int32_t Log2Floor(double x) {
  return static_cast<int32_t>((DoubleBits(x) >> 52) & 0x7ff) - 1023;
}

// Scale bits (one byte, or the fp32 pattern) and their value.
template <BlockFormat F>
GNMR_HD double DecodeScale(uint32_t bits) {
  if constexpr (F == BlockFormat::kFp8Block) {
    return static_cast<double>(item::FloatFromBits(bits));
  } else if constexpr (F == BlockFormat::kNvfp4) {
    return item::Decode<DType::kFp8E4M3>(bits);
  } else {  // E8M0: 2^(e - 127), 0xFF = NaN
    return bits == 0xffu ? DoubleFromBits(0x7ff8000000000000ull)
                         : DoubleFromBits(static_cast<uint64_t>(bits - 127u + 1023u) << 52);
  }
}
GNMR_HD constexpr uint32_t ScaleBytes(BlockFormat f) {
  return f == BlockFormat::kFp8Block ? 4u : 1u;
}

// The per-block scale figures: at an end of its range (scale_clamps), and
// floor(log2 s) when s is finite and non-zero (has_log2).
struct ScaleClass {
  bool clamp = false;
  bool has_log2 = false;
  int32_t log2 = 0;
};
template <BlockFormat F>
GNMR_HD ScaleClass ClassifyScale(uint32_t bits) {
  ScaleClass k;
  if constexpr (F == BlockFormat::kFp8Block) {
    const uint32_t e = (bits >> 23) & 0xffu;
    k.clamp = e == 0u || e == 0xffu;  // zero, subnormal, Inf, NaN
    k.has_log2 = e != 0xffu && (bits & 0x7fffffffu) != 0u;
  } else if constexpr (F == BlockFormat::kNvfp4) {
    const uint32_t a = bits & 0x7fu;  // |s|: 0x08 = 2^-6, 0x7E = 448, 0x7F = NaN
    k.clamp = a <= 0x08u || a >= 0x7eu;
    k.has_log2 = a != 0u && a != 0x7fu;
  } else {
    k.clamp = bits == 0u || bits >= 0xfeu;
    k.has_log2 = bits != 0xffu;
  }
  if (k.has_log2) {
    const double s = DecodeScale<F>(bits);
    k.log2 = Log2Floor(s < 0 ? -s : s);
  }
  return k;
}

// The order-free integer figures of one block, from its flags and scale.
struct BlockCounts {
  uint32_t saturated_blocks = 0, dead_blocks = 0, scale_clamps = 0, scaled_blocks = 0;
  int32_t log2 = 0;  // valid when scaled_blocks
};
template <BlockFormat F>
GNMR_HD BlockCounts BlockFigures(uint32_t flags, uint32_t scale_bits, bool has_source) {
  BlockCounts b;
  const ScaleClass k = ClassifyScale<F>(scale_bits);
  b.saturated_blocks = (flags & kFlagSaturated) != 0u;
  const bool all_zero = (flags & kFlagNonzero) == 0u;
  b.dead_blocks = all_zero && (!has_source || (flags & kFlagSourceNonzero) != 0u);
  b.scale_clamps = k.clamp;
  b.scaled_blocks = k.has_log2;
  b.log2 = k.log2;
  return b;
}

// The scale entry of block (bi, bj) of the block grid (gnmr/block_tensor.h).
GNMR_HD uint64_t SwizzledIndex(uint64_t r, uint64_t c, uint64_t cpad) {
  return ((r / 128) * (cpad / 4) + c / 4) * 512 + (r % 32) * 16 + ((r / 32) % 4) * 4 + c % 4;
}
GNMR_HD uint64_t ScaleIndex(const BlockDesc& d, uint64_t bi, uint64_t bj) {
  if (d.scale_layout == static_cast<uint32_t>(ScaleLayout::kCompact)) return bi * d.scale_cols + bj;
  if (d.scale_layout == static_cast<uint32_t>(ScaleLayout::kCompactTransposed)) {
    return bj * d.scale_cols + bi;
  }
  // K-major grid: rowwise [rows, blocks across], columnwise [cols, blocks down].
  return d.layout == static_cast<uint32_t>(BlockLayout::kColumnwise)
             ? SwizzledIndex(bj, bi, d.scale_cols)
             : SwizzledIndex(bi, bj, d.scale_cols);
}

// A source element (fp32 / bf16 / fp16 bits) as a double, exactly.
GNMR_HD double DecodeSource(uint32_t dtype, uint32_t bits) {
  if (dtype == static_cast<uint32_t>(DType::kBf16)) return item::Decode<DType::kBf16>(bits);
  if (dtype == static_cast<uint32_t>(DType::kFp16)) return item::Decode<DType::kFp16>(bits);
  return item::Decode<DType::kFp32>(bits);
}

// One thread's source sums (its 8 lanes) over one item.
struct Lanes {
  double err[kSlots] = {};
  double src[kSlots] = {};
};

// One element with a source, in slot i: the error and source sums over
// finite pairs (x, y = x_hat * g), underflow; returns the block's
// non-zero-source flag.
GNMR_HD uint32_t SourceElement(double xh, double g, double x, uint32_t i, Lanes* l,
                               uint32_t* underflow) {
  const double y = Mul(xh, g);
  if (IsFinite(x) && IsFinite(y)) {
    const double d = x - y;
    l->err[i] = Add(l->err[i], Mul(d, d));
    l->src[i] = Add(l->src[i], Mul(x, x));
    *underflow += x != 0.0 && y == 0.0 ? 1u : 0u;  // finite x only
  }
  // Dead blocks: a source element that is non-zero and not NaN.
  return x != 0.0 && !IsNan(x) ? kFlagSourceNonzero : 0u;
}

// Code i of a thread's packed row word.
template <BlockFormat F>
GNMR_HD uint32_t CodeOf(uint64_t w, uint32_t i) {
  return static_cast<uint32_t>(w >> (Code<F>::kBits * i)) & ((1u << Code<F>::kBits) - 1u);
}

// Storage position (row, column) of an element, stepped along.
struct Pos {
  uint64_t r, c;
};
GNMR_HD void Next(Pos* p, uint64_t cols) {
  if (++p->c == cols) {
    p->c = 0;
    ++p->r;
  }
}

// The source sums of item k of tensor d for thread t:
// - load_row(row) returns the thread's 8 codes of that item row, packed
//   Code<F>::kBits apart from bit 0 (codes past the tensor's end: any);
// - load_scale(index) the scale bits of that entry;
// - load_source(element) the source bits of a tensor element;
// - flush(block, flags) is called once per run of elements in one block
//   with non-zero flags.
template <BlockFormat F, class LoadRow, class LoadScale, class LoadSource, class Flush>
GNMR_HD void ThreadItem(const BlockDesc& d, uint64_t k, uint32_t t, const LoadRow& load_row,
                        const LoadScale& load_scale, const LoadSource& load_source,
                        const Flush& flush, Lanes* l, uint32_t* underflow) {
  const uint64_t first = k * kItemElems;
  const uint64_t left = d.numel - first;
  const uint32_t n = left < kItemElems ? static_cast<uint32_t>(left) : kItemElems;
  const uint64_t g0 = first + t * kSlots;
  Pos p{g0 / d.cols, g0 % d.cols};
  uint64_t block = ~0ull;
  uint32_t flags = 0;
  double scale = 0.0;
  // Makes (bi, bj) the current block: flushes the previous one's flags and
  // loads the scale, only when the block changes.
  auto enter = [&](uint64_t bi, uint64_t bj) {
    const uint64_t b = bi * d.grid_cols + bj;
    if (b == block) return;
    if (flags != 0u) flush(block, flags);
    block = b;
    flags = 0;
    scale = DecodeScale<F>(load_scale(ScaleIndex(d, bi, bj)));
  };
  auto element = [&](uint64_t w, uint32_t i, uint32_t e) {
    const double xh = Mul(DecodeCode<F>(CodeOf<F>(w, i)), scale);
    const double x = DecodeSource(d.source_dtype, load_source(first + e));
    flags |= SourceElement(xh, d.global_scale, x, i, l, underflow);
  };
  GNMR_NO_UNROLL
  for (uint32_t row = 0; row < kRows; ++row) {
    const uint32_t e0 = row * kLanes + t * kSlots;
    if (e0 >= n) break;
    const uint64_t w = load_row(row);
    const uint64_t bj0 = p.c >> d.log2_block_cols;
    if (e0 + kSlots <= n && p.c + kSlots <= d.cols &&
        ((p.c + kSlots - 1) >> d.log2_block_cols) == bj0) {
      // The common case of row-wise and square blocks: the thread's 8
      // elements lie in one row and one block (always when cols % 8 == 0).
      enter(p.r >> d.log2_block_rows, bj0);
      GNMR_UNROLL
      for (uint32_t i = 0; i < kSlots; ++i) element(w, i, e0 + i);
      p.c += kSlots;
      if (p.c == d.cols) {
        p.c = 0;
        ++p.r;
      }
    } else {
      GNMR_UNROLL
      for (uint32_t i = 0; i < kSlots; ++i) {
        if (e0 + i >= n) break;
        enter(p.r >> d.log2_block_rows, p.c >> d.log2_block_cols);
        element(w, i, e0 + i);
        Next(&p, d.cols);
      }
    }
    p.c += d.step_cols;  // to the thread's first element of the next row
    p.r += d.step_rows;
    if (p.c >= d.cols) {
      p.c -= d.cols;
      ++p.r;
    }
  }
  if (flags != 0u) flush(block, flags);
}

}  // namespace gnmr::cuda::blk
