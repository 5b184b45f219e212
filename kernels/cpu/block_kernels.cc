// One ISA build of the block-scaled statistics passes (block_kernels.h).
//
// The block pass walks the block grid row-major (docs/statistics.md,
// "Canonical order"). Per block it scans the codes once: counts (zeros,
// saturated, NaN/Inf codes), the largest finite magnitude, whether any
// code is non-zero, and Q, the sum of the squared code values. For e4m3
// and E2M1 codes Q is an integer number of units (2^-18, 2^-2) far below
// 2^53, so it is summed as an integer in any order (the compiler
// vectorizes the loop over a contiguous block) and converted exactly; e5m2
// squares span 2^-32 .. 2^32, so Q is the fp64 sum in storage order. The
// block's partial Q * s^2 enters the streaming item tree, and the per-block
// figures (saturated, dead, scale clamps and exponents) are integers.
//
// With a source, a second pass in storage order (the work items, lanes and
// trees of kernels/stats_order.h) adds the error and source sums and the
// underflow count, and the block pass also notes whether each block's
// source is non-zero (dead blocks).
//
// No floating-point instruction sees a denormal (decoded codes, scales and
// sources are normal doubles, and so are their products, squares and
// differences: the smallest is about 2^-400), so FTZ/DAZ cannot change a
// result; -ffp-contract=off keeps every multiply and add separately
// rounded. Nothing here allocates: lanes live on the stack, the item tree
// is a binary counter.
#include "kernels/cpu/block_kernels.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/block_format.h"
#include "kernels/stats_order.h"

#ifndef GNMR_CPU_ISA
#define GNMR_CPU_ISA isa_baseline
#endif

#include "kernels/cpu/block_scan.h"  // needs GNMR_CPU_ISA

// Rowwise e4m3 blocks get a VBMI + VNNI path in the AVX-512 build
// (block_fp8_avx512.h).
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
#define GNMR_CPU_AVX512_BLOCKS 1
// GCC 12's false positive in its AVX-512 headers (item_kernels.cc).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/cpu/block_fp8_avx512.h"
#endif

namespace gnmr::cpu::GNMR_CPU_ISA {
namespace {

using block::Codes;
using block::Geometry;
using block::Scales;
using stats_order::kItemElems;
using stats_order::kLanes;

// Source element i as a double, exactly (fp32 via the DAZ-proof path).
inline double SourceValue(const void* src, DType d, uint64_t i) {
  const unsigned char* p = static_cast<const unsigned char*>(src);
  if (d == DType::kFp32) {
    uint32_t b;
    std::memcpy(&b, p + i * 4, sizeof b);
    return block::Fp32Exact(b);
  }
  uint16_t h;
  std::memcpy(&h, p + i * 2, sizeof h);
  if (d == DType::kBf16) return block::Fp32Exact(static_cast<uint32_t>(h) << 16);
  if ((h & 0x7c00u) == 0x7c00u) {
    return (h & 0x3ffu) != 0 ? block::kNan : ((h & 0x8000u) != 0 ? -block::kInf : block::kInf);
  }
  return block::SmallFloat(h, 5, 10, 15);
}

inline bool AnySource(const BlockTensorRef& t, uint64_t i0, uint64_t i1) {
  bool any = false;
  for (uint64_t i = i0; i < i1; ++i) {
    const double x = SourceValue(t.source, t.source_dtype, i);
    any |= x != 0.0 && !std::isnan(x);
  }
  return any;
}

// The end of one block: its counts, its scale's figures, its partial P
// into the tree and its amax (docs/statistics.md, "Canonical order").
template <Codes C, Scales S>
inline void FinishBlock(const BlockScan& scan, uint64_t elems, uint32_t bits,
                        stats_order::ItemTree* tree, ElementResult* e, BlockResult* b) {
  static constexpr std::array<double, 256> kCodes = block::MakeCodeTable<C>();
  e->zero_codes += scan.zeros;
  e->saturated += scan.saturated;
  b->saturated += scan.saturated > 0;
  b->dead += scan.any_code == 0 && scan.any_source;
  ++b->blocks;
  const block::ScaleClass k = block::ClassifyScale<S>(bits);
  b->clamps += k.clamp;
  if (k.has_log2) {
    ++b->scaled;
    b->log2_sum += k.log2;
    b->log2_min = k.log2 < b->log2_min ? k.log2 : b->log2_min;
    b->log2_max = k.log2 > b->log2_max ? k.log2 : b->log2_max;
  }
  const double s = std::fabs(block::ScaleValue<S>(bits));
  if (!std::isfinite(s)) {  // every x_hat is NaN, or +-Inf (fp32 Inf scale)
    e->nonfinite += elems;
    e->nans += (std::isnan(s) || scan.zeros > 0 || scan.nan_codes > 0) ? 1 : 0;
    tree->Push(0.0);
    return;
  }
  e->nonfinite += scan.nan_codes + scan.inf_codes;
  e->nans += scan.nan_codes + (s == 0.0 ? scan.inf_codes : 0);  // Inf * 0 is NaN
  const double q = C == Codes::kE5M2 ? scan.squares : static_cast<double>(scan.units) * kUnit<C>;
  tree->Push(q * (s * s));
  const double a = kCodes[scan.max_finite] * s;
  e->amax = a > e->amax ? a : e->amax;
}

// Rowwise blocks that all hold B codes (cols a multiple of B), no source,
// exact Q (e4m3, E2M1): the common case, one pass per row.
template <Codes C, Scales S, uint32_t B>
void RowwiseWholeBlocks(const BlockTensorRef& t, const Geometry& g, ElementResult* e,
                        BlockResult* b) {
  const unsigned char* data = static_cast<const unsigned char*>(t.data);
  constexpr uint32_t kBytes = C == Codes::kE2M1 ? B / 2 : B;
  stats_order::ItemTree tree;
  for (uint64_t r = 0; r < g.rows; ++r) {
    const unsigned char* row = data + r * g.grid_cols * kBytes;
    for (uint64_t bj = 0; bj < g.grid_cols; ++bj) {
      BlockScan scan;
      ScanWholeBlock<C, B>(row + bj * kBytes, &scan);
      scan.any_source = true;  // no source: an all-zero block is dead
      FinishBlock<C, S>(scan, B, block::ScaleBits<S>(t.scales, g.ScaleIndex(r, bj)), &tree, e, b);
    }
  }
  e->sum = tree.Finish();
}

#ifdef GNMR_CPU_AVX512_BLOCKS
// RowwiseWholeBlocks for e4m3 codes on a CPU with VBMI and VNNI: the
// blocks, contiguous in grid order, in aligned groups of 8
// (block_fp8_avx512.h); groups it refuses and the last blocks take the
// scalar path, block by block.
template <Scales S, uint32_t B>
__attribute__((target("avx512vbmi,avx512vnni"))) void RowwiseE4M3Groups(const BlockTensorRef& t,
                                                                        const Geometry& g,
                                                                        ElementResult* e,
                                                                        BlockResult* b) {
  const unsigned char* data = static_cast<const unsigned char*>(t.data);
  __m512i lo[4], hi[4];
  static constexpr avx512::ExponentBuckets kTables = avx512::MakeE4M3Buckets();
  for (int q = 0; q < 4; ++q) {
    lo[q] = _mm512_load_si512(kTables.bucket[q]);
    hi[q] = _mm512_load_si512(kTables.bucket[q] + 64);
  }
  // Compact scales of rows whose blocks come in whole groups lie in a row.
  const bool contiguous = g.scale_layout == ScaleLayout::kCompact && g.grid_cols % 8 == 0;
  const uint64_t n = g.rows * g.grid_cols;
  block_avx512::Totals totals;
  stats_order::ItemTree tree;
  uint64_t r = 0, bj = 0;  // block k's position in the grid
  auto next = [&g](uint64_t* rr, uint64_t* cc, uint64_t by) {
    *cc += by;
    while (*cc >= g.grid_cols) *cc -= g.grid_cols, ++*rr;
  };
  auto scalar_block = [&](uint64_t k, uint64_t rr, uint64_t cc, stats_order::ItemTree* to) {
    BlockScan scan;
    ScanWholeBlock<Codes::kE4M3, B>(data + k * B, &scan);
    scan.any_source = true;  // no source: an all-zero block is dead
    FinishBlock<Codes::kE4M3, S>(scan, B, block::ScaleBits<S>(t.scales, g.ScaleIndex(rr, cc)), to,
                                 e, b);
  };
  // Runs of 8 groups (64 blocks, a subtree of level 6, pushed once), then
  // single groups, then single blocks. A run's scans come first, then
  // their tails.
  uint64_t k = 0;
  while (k + 8 <= n) {
    const int groups = n - k >= 64 ? 8 : 1;
    block_avx512::GroupFigures f[8];
    bool fast[8];
    uint64_t rows[8], cols[8];
    for (int i = 0; i < groups; ++i) {
      rows[i] = r, cols[i] = bj;
      __m512i bits;
      if (contiguous) {
        bits = block_avx512::LoadScales<S>(t.scales, r * g.scale_cols + bj);
      } else {
        alignas(64) uint64_t gathered[8];
        uint64_t rr = r, cc = bj;
        for (int j = 0; j < 8; ++j, next(&rr, &cc, 1)) {
          gathered[j] = block::ScaleBits<S>(t.scales, g.ScaleIndex(rr, cc));
        }
        bits = _mm512_load_si512(gathered);
      }
      fast[i] = block_avx512::ScanGroup<S, B>(data + (k + 8 * i) * B, bits, lo, hi, &f[i], &totals);
      next(&r, &bj, 8);
    }
    double sub[8];
    for (int i = 0; i < groups; ++i) {
      if (fast[i]) {
        sub[i] = block_avx512::GroupTail(f[i], &totals);
        continue;
      }
      stats_order::ItemTree group;  // the scalar path, into a tree of its own: the same subtree
      uint64_t rr = rows[i], cc = cols[i];
      for (uint64_t j = 0; j < 8; ++j, next(&rr, &cc, 1)) {
        scalar_block(k + 8 * i + j, rr, cc, &group);
      }
      sub[i] = group.Finish();
    }
    k += 8 * static_cast<uint64_t>(groups);
    if (groups == 8) {
      tree.PushSubtree(
          ((sub[0] + sub[1]) + (sub[2] + sub[3])) + ((sub[4] + sub[5]) + (sub[6] + sub[7])), 6);
    } else {
      tree.PushSubtree(sub[0], 3);
    }
  }
  for (; k < n; ++k, next(&r, &bj, 1)) scalar_block(k, r, bj, &tree);
  totals.Fold(e, b);
  e->sum = tree.Finish();
}
#endif

template <Codes C, Scales S>
void BlockMajorPass(const BlockTensorRef& t, const Geometry& g, ElementResult* e, BlockResult* b) {
  constexpr uint32_t kBlock = C == Codes::kE2M1    ? (S == Scales::kE4M3 ? 16 : 32)
                              : S == Scales::kFp32 ? 128
                                                   : 32;
  if (C != Codes::kE5M2 && t.source == nullptr && t.layout == BlockLayout::kRowwise &&
      g.cols % kBlock == 0) {
#ifdef GNMR_CPU_AVX512_BLOCKS
    if constexpr (C == Codes::kE4M3) {
      if (avx512::HasVbmiVnni()) return RowwiseE4M3Groups<S, kBlock>(t, g, e, b);
    }
#endif
    return RowwiseWholeBlocks<C, S, kBlock>(t, g, e, b);
  }
  const unsigned char* data = static_cast<const unsigned char*>(t.data);
  stats_order::ItemTree tree;
  for (uint64_t bi = 0; bi < g.grid_rows; ++bi) {
    const uint64_t r0 = bi * g.block_rows;
    const uint64_t r1 = r0 + g.block_rows < g.rows ? r0 + g.block_rows : g.rows;
    for (uint64_t bj = 0; bj < g.grid_cols; ++bj) {
      const uint64_t c0 = bj * g.block_cols;
      const uint64_t c1 = c0 + g.block_cols < g.cols ? c0 + g.block_cols : g.cols;
      BlockScan scan;
      for (uint64_t r = r0; r < r1; ++r) {
        ScanSpan<C>(data, r * g.cols + c0, r * g.cols + c1, &scan);
        if (t.source != nullptr && !scan.any_source) {
          scan.any_source = AnySource(t, r * g.cols + c0, r * g.cols + c1);
        }
      }
      if (t.source == nullptr) scan.any_source = true;  // no source: all-zero blocks are dead
      FinishBlock<C, S>(scan, (r1 - r0) * (c1 - c0),
                        block::ScaleBits<S>(t.scales, g.ScaleIndex(bi, bj)), &tree, e, b);
    }
  }
  e->sum = tree.Finish();
}

// Lane tree of stats_order.h step 4; returns lane[0].
inline double LaneTree(double* lane) {
  for (uint32_t s = kLanes / 2; s >= 1; s /= 2) {
    for (uint32_t j = 0; j < s; ++j) lane[j] = lane[j] + lane[j + s];
  }
  return lane[0];
}

// With a source: the error and source sums in storage order (items,
// lanes, trees) and the underflow count.
template <Codes C, Scales S>
void SourcePass(const BlockTensorRef& t, const Geometry& g, ElementResult* e) {
  static constexpr std::array<double, 256> kCodes = block::MakeCodeTable<C>();
  const unsigned char* data = static_cast<const unsigned char*>(t.data);
  const double gs = static_cast<double>(t.global_scale);
  const uint64_t n = g.rows * g.cols;
  stats_order::ItemTree error_tree, source_tree;
  uint64_t underflow = 0;
  for (uint64_t item = 0; item < n; item += kItemElems) {
    const uint64_t end = n - item < kItemElems ? n : item + kItemElems;
    double error_lane[kLanes] = {}, source_lane[kLanes] = {};
    for (uint64_t i = item; i < end; ++i) {
      const uint64_t r = i / g.cols, c = i % g.cols;
      const uint32_t bits =
          block::ScaleBits<S>(t.scales, g.ScaleIndex(r / g.block_rows, c / g.block_cols));
      const double y = kCodes[block::CodeAt<C>(data, i)] * block::ScaleValue<S>(bits) * gs;
      const double x = SourceValue(t.source, t.source_dtype, i);
      if (std::isfinite(x) && std::isfinite(y)) {
        const double d = x - y;
        const uint32_t l = static_cast<uint32_t>(i % kLanes);
        error_lane[l] = error_lane[l] + d * d;
        source_lane[l] = source_lane[l] + x * x;
        underflow += x != 0.0 && y == 0.0;
      }
    }
    error_tree.Push(LaneTree(error_lane));
    source_tree.Push(LaneTree(source_lane));
  }
  e->error = error_tree.Finish();
  e->source = source_tree.Finish();
  e->underflow = underflow;
}

template <Codes C, Scales S>
void TensorStats(const BlockTensorRef& t, ElementResult* e, BlockResult* b) {
  const Geometry g = block::GeometryOf(t);
  BlockMajorPass<C, S>(t, g, e, b);
  if (t.source != nullptr) SourcePass<C, S>(t, g, e);
}

}  // namespace

void BlockPass(const BlockTensorRef& t, ElementResult* e, BlockResult* b) {
  switch (t.format) {
    case BlockFormat::kMxfp8E4M3:
      return TensorStats<Codes::kE4M3, Scales::kE8M0>(t, e, b);
    case BlockFormat::kMxfp8E5M2:
      return TensorStats<Codes::kE5M2, Scales::kE8M0>(t, e, b);
    case BlockFormat::kMxfp4:
      return TensorStats<Codes::kE2M1, Scales::kE8M0>(t, e, b);
    case BlockFormat::kNvfp4:
      return TensorStats<Codes::kE2M1, Scales::kE4M3>(t, e, b);
    case BlockFormat::kFp8Block:
      return TensorStats<Codes::kE4M3, Scales::kFp32>(t, e, b);
  }
}

}  // namespace gnmr::cpu::GNMR_CPU_ISA
