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

// Q's unit: e4m3 squares are integers of 2^-18, E2M1 squares of 2^-2;
// e5m2 squares are summed as doubles (from a table).
template <Codes C>
constexpr double kUnit = C == Codes::kE4M3   ? 0x1p-18
                         : C == Codes::kE2M1 ? 0x1p-2
                                             : 1.0;

template <Codes C>
struct SquareTables {
  double squares[128] = {};
};

template <Codes C>
constexpr SquareTables<C> MakeSquareTables() {
  SquareTables<C> t{};
  for (uint32_t a = 0; a <= block::kMaxCode<C>; ++a) {
    const double v = C == Codes::kE5M2 ? block::E5M2Value(a) : 0.0;
    t.squares[a] = v * v;
  }
  return t;
}

// Codes past the largest finite magnitude: e4m3 0x7f is NaN; e5m2 0x7c is
// Inf and 0x7d-0x7f are NaN; E2M1 has none.
template <Codes C>
constexpr bool IsNanMag(uint32_t mag) {
  return C == Codes::kE2M1 ? false : C == Codes::kE4M3 ? mag == 0x7fu : mag > 0x7cu;
}

// What one scan of a block's codes collects.
struct BlockScan {
  uint64_t units = 0;    // Q in units (e4m3, E2M1)
  double squares = 0.0;  // Q in storage order (e5m2)
  uint64_t zeros = 0, saturated = 0, nan_codes = 0, inf_codes = 0;
  uint32_t max_finite = 0;  // largest finite magnitude
  uint32_t any_code = 0;    // OR of the magnitudes
  bool any_source = false;  // a source element != 0 and not NaN
};

// The square of a finite magnitude in Q's unit, by arithmetic rather than
// a table, so that the loops below vectorize (no gathers): e4m3 is
// M * 2^(E - 1) units of 2^-9 (E4M3 subnormals: E = 1, M = mag & 7), E2M1
// twice its value is 0, 1, 2, 3, 4, 6, 8, 12 (a byte table in a constant).
template <Codes C>
constexpr uint64_t SquareUnits(uint32_t mag) {
  if constexpr (C == Codes::kE4M3) {
    const uint32_t field = mag >> 3;
    const uint32_t root = (field != 0 ? 8u + (mag & 7u) : (mag & 7u))
                          << (field != 0 ? field - 1 : 0);
    return mag == 0x7fu ? 0 : static_cast<uint64_t>(root) * root;  // 0x7f: NaN, counted apart
  } else {
    const uint64_t root = (0x0c08060403020100ull >> (8 * (mag & 7u))) & 0xffu;
    return root * root;
  }
}

// Folds one span's figures into the block's.
inline void Fold(BlockScan* s, uint64_t units, uint32_t zeros, uint32_t saturated,
                 uint32_t nan_codes, uint32_t inf_codes, uint32_t max_finite, uint32_t any_code) {
  s->units += units;
  s->zeros += zeros;
  s->saturated += saturated;
  s->nan_codes += nan_codes;
  s->inf_codes += inf_codes;
  s->max_finite = max_finite > s->max_finite ? max_finite : s->max_finite;
  s->any_code |= any_code;
}

// Codes [i0, i1) of one row of a block. Written as plain byte loops with no
// conditional inside (the largest finite magnitude is recomputed apart in
// the rare span that holds a NaN/Inf code), so that they vectorize.
struct UnitTable {
  uint64_t units[128] = {};
};
constexpr UnitTable MakeUnitTable() {
  UnitTable t{};
  for (uint32_t a = 0; a < 127; ++a) t.units[a] = SquareUnits<Codes::kE4M3>(a);  // 0x7f: NaN, 0
  return t;
}

// E2M1: the squares of both codes of a byte, in units.
struct PairTable {
  uint32_t units[256] = {};
};
constexpr PairTable MakePairTable() {
  PairTable t{};
  for (uint32_t b = 0; b < 256; ++b) {
    t.units[b] = static_cast<uint32_t>(SquareUnits<Codes::kE2M1>(b & 7u) +
                                       SquareUnits<Codes::kE2M1>((b >> 4) & 7u));
  }
  return t;
}

template <Codes C>
inline void ScanSpan(const unsigned char* data, uint64_t i0, uint64_t i1, BlockScan* s) {
  uint64_t units = 0;
  uint32_t zeros = 0, saturated = 0, nan_codes = 0, inf_codes = 0;
  uint8_t max_mag = 0, any_code = 0;
  if constexpr (C == Codes::kE2M1) {
    static constexpr PairTable kPairUnits = MakePairTable();
    if (i0 % 2 == 0 && i1 % 2 == 0) {  // whole bytes: two codes each
      for (uint64_t j = i0 / 2; j < i1 / 2; ++j) {
        const uint8_t lo = data[j] & 7u, hi = (data[j] >> 4) & 7u;
        zeros += (lo == 0) + (hi == 0);
        saturated += (lo == 7) + (hi == 7);
        any_code |= lo | hi;
        const uint8_t m = lo > hi ? lo : hi;
        max_mag = m > max_mag ? m : max_mag;
        units += kPairUnits.units[data[j]];
      }
    } else {
      for (uint64_t i = i0; i < i1; ++i) {
        const uint8_t mag = block::CodeAt<C>(data, i) & 7u;
        zeros += mag == 0;
        saturated += mag == 7;
        any_code |= mag;
        max_mag = mag > max_mag ? mag : max_mag;
        units += SquareUnits<C>(mag);
      }
    }
    return Fold(s, units, zeros, saturated, 0, 0, max_mag, any_code);
  } else {
    for (uint64_t i = i0; i < i1; ++i) {
      const uint8_t mag = data[i] & 0x7fu;
      zeros += mag == 0;
      saturated += mag == block::kMaxCode<C>;
      any_code |= mag;
      max_mag = mag > max_mag ? mag : max_mag;
      if constexpr (C == Codes::kE4M3) {
        nan_codes += mag == 0x7fu;
      } else {
        nan_codes += mag > 0x7cu;
        inf_codes += mag == 0x7cu;
      }
    }
    uint32_t max_finite = max_mag;
    if (max_mag > block::kMaxCode<C>) {  // a NaN/Inf code: the largest finite one apart
      max_finite = 0;
      for (uint64_t i = i0; i < i1; ++i) {
        const uint32_t mag = data[i] & 0x7fu;
        if (mag <= block::kMaxCode<C> && mag > max_finite) max_finite = mag;
      }
    }
    if constexpr (C == Codes::kE4M3) {
      // A table beats the arithmetic here: GCC widens bytes to 64-bit lanes
      // for the shifts and products, and blocks are short.
      static constexpr UnitTable kUnits = MakeUnitTable();
      for (uint64_t i = i0; i < i1; ++i) units += kUnits.units[data[i] & 0x7fu];
    } else {
      static constexpr SquareTables<C> kTables = MakeSquareTables<C>();
      double squares = s->squares;  // storage order: these sums round
      for (uint64_t i = i0; i < i1; ++i) {
        const uint32_t mag = data[i] & 0x7fu;
        squares = squares + (mag <= block::kMaxCode<C> ? kTables.squares[mag] : 0.0);
      }
      s->squares = squares;
    }
    return Fold(s, units, zeros, saturated, nan_codes, inf_codes, max_finite, any_code);
  }
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

// One whole block of B codes at p (E2M1: B / 2 bytes), for the rowwise
// path: a constant trip count and no table, so that GCC vectorizes the
// loop fully. e4m3 squares are base^2 << t (base <= 15, t = 2 (E - 1) <= 28)
// units, summed in two 32-bit halves (t < 16 and t >= 16) that cannot
// overflow for B <= 128.
template <Codes C, uint32_t B>
inline void ScanWholeBlock(const unsigned char* p, BlockScan* s) {
  uint32_t zeros = 0, saturated = 0, nan_codes = 0, lo = 0, hi = 0;
  uint8_t any_code = 0, max_mag = 0;
  if constexpr (C == Codes::kE2M1) {
    static constexpr PairTable kPairUnits = MakePairTable();
    for (uint32_t j = 0; j < B / 2; ++j) {
      const uint8_t lo_mag = p[j] & 7u, hi_mag = (p[j] >> 4) & 7u;
      zeros += (lo_mag == 0) + (hi_mag == 0);
      saturated += (lo_mag == 7) + (hi_mag == 7);
      any_code |= lo_mag | hi_mag;
      const uint8_t m = lo_mag > hi_mag ? lo_mag : hi_mag;
      max_mag = m > max_mag ? m : max_mag;
    }
    for (uint32_t j = 0; j < B / 2; ++j) lo += kPairUnits.units[p[j]];
  } else {
    for (uint32_t k = 0; k < B; ++k) {
      const uint8_t mag = p[k] & 0x7fu;
      zeros += mag == 0;
      saturated += mag == 0x7eu;
      nan_codes += mag == 0x7fu;
      any_code |= mag;
      max_mag = mag > max_mag ? mag : max_mag;
      const uint32_t field = mag >> 3;
      const uint32_t base = field != 0 ? 8u + (mag & 7u) : (mag & 7u);
      const uint32_t t = field != 0 ? 2 * (field - 1) : 0;
      const uint32_t sq = mag == 0x7fu ? 0 : base * base;
      lo += t < 16 ? sq << t : 0;
      hi += t >= 16 ? sq << (t - 16) : 0;
    }
  }
  s->units = lo + (static_cast<uint64_t>(hi) << 16);
  s->zeros = zeros;
  s->saturated = saturated;
  s->nan_codes = nan_codes;
  s->any_code = any_code;
  s->max_finite = max_mag;
  if (max_mag > block::kMaxCode<C>) {  // a NaN code: the largest finite one apart
    s->max_finite = 0;
    for (uint32_t k = 0; k < B; ++k) {
      const uint32_t mag = p[k] & 0x7fu;
      if (mag <= block::kMaxCode<C> && mag > s->max_finite) s->max_finite = mag;
    }
  }
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

template <Codes C, Scales S>
void BlockMajorPass(const BlockTensorRef& t, const Geometry& g, ElementResult* e, BlockResult* b) {
  constexpr uint32_t kBlock = C == Codes::kE2M1    ? (S == Scales::kE4M3 ? 16 : 32)
                              : S == Scales::kFp32 ? 128
                                                   : 32;
  if (C != Codes::kE5M2 && t.source == nullptr && t.layout == BlockLayout::kRowwise &&
      g.cols % kBlock == 0) {
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
