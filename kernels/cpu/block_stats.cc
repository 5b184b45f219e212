// Statistics of block-scaled tensors on the CPU (gnmr/block_stats.h).
//
// Two passes per tensor:
// - the element pass walks the codes in storage order, item by item
//   (kernels/stats_order.h): each element's dequantized square goes to
//   lane i % 256 of its item, the item's lanes fold by the lane tree and
//   the partial enters the streaming item tree. Inside an item it works
//   on runs of elements that share a scale (a row's piece of one block),
//   so the scale is decoded once per run;
// - the block pass walks the block grid for the per-block figures
//   (saturated, dead, scale clamps and exponents), which are integers and
//   need no order.
// Nothing here allocates: lanes live on the stack, the item tree is a
// binary counter.
#include "gnmr/block_stats.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/block_format.h"
#include "kernels/stats_order.h"

namespace gnmr::cpu {
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

// The sums and counts of one tensor's element pass.
struct ElementResult {
  double sum = 0.0;  // finite squares, canonical order, before global_scale
  double error = 0.0;
  double source = 0.0;
  double amax = 0.0;
  uint64_t nans = 0;
  uint64_t nonfinite = 0;
  uint64_t zero_codes = 0;
  uint64_t saturated = 0;
  uint64_t underflow = 0;
};

// Lane tree of stats_order.h step 4; returns lane[0].
inline double LaneTree(double* lane) {
  for (uint32_t s = kLanes / 2; s >= 1; s /= 2) {
    for (uint32_t j = 0; j < s; ++j) lane[j] = lane[j] + lane[j + s];
  }
  return lane[0];
}

template <Codes C, Scales S, bool kSource>
class ElementPass {
 public:
  ElementPass(const BlockTensorRef& t, const Geometry& g) : t_(t), g_(g) {}

  ElementResult Run() {
    const uint64_t n = g_.rows * g_.cols;
    stats_order::ItemTree tree, error_tree, source_tree;
    for (uint64_t item = 0; item < n; item += kItemElems) {
      const uint64_t end = n - item < kItemElems ? n : item + kItemElems;
      double lane[kLanes] = {}, error_lane[kLanes] = {}, source_lane[kLanes] = {};
      uint64_t r = item / g_.cols, c = item % g_.cols;
      for (uint64_t i = item; i < end;) {
        // A run: the rest of row r's block column, within the item.
        const uint64_t block_end = (c / g_.block_cols + 1) * g_.block_cols;
        uint64_t run_end_col = block_end < g_.cols ? block_end : g_.cols;
        if (run_end_col - c > end - i) run_end_col = c + (end - i);
        const uint64_t to_wrap = kLanes - i % kLanes;  // runs stay inside one lane row
        if (run_end_col - c > to_wrap) run_end_col = c + to_wrap;
        const uint64_t len = run_end_col - c;
        const uint64_t idx = g_.ScaleIndex(r / g_.block_rows, c / g_.block_cols);
        Run(i, len, block::ScaleValue<S>(block::ScaleBits<S>(t_.scales, idx)), lane, error_lane,
            source_lane);
        i += len;
        c += len;
        if (c == g_.cols) {
          c = 0;
          ++r;
        }
      }
      tree.Push(LaneTree(lane));
      if constexpr (kSource) {
        error_tree.Push(LaneTree(error_lane));
        source_tree.Push(LaneTree(source_lane));
      }
    }
    res_.sum = tree.Finish();
    res_.error = error_tree.Finish();
    res_.source = source_tree.Finish();
    return res_;
  }

 private:
  static constexpr std::array<double, 256> kCodes = block::MakeCodeTable<C>();

  // Elements [i, i + len) of one row, all scaled by `s`, in lanes that do
  // not wrap (i % 256 + len <= 256). The integer scan comes first: a run
  // without NaN/Inf codes and with a finite scale (the usual case) then
  // takes a loop with no test per element, which the compiler vectorizes.
  void Run(uint64_t i, uint64_t len, double s, double* lane, double* error_lane,
           double* source_lane) {
    const unsigned char* data = static_cast<const unsigned char*>(t_.data);
    uint32_t max_mag = 0;
    uint64_t zeros = 0, saturated = 0;
    for (uint64_t k = i; k < i + len; ++k) {
      const uint32_t mag = block::CodeAt<C>(data, k) & block::kMagMask<C>;
      zeros += mag == 0;
      saturated += mag == block::kMaxCode<C>;
      max_mag = mag > max_mag ? mag : max_mag;
    }
    res_.zero_codes += zeros;
    res_.saturated += saturated;
    double* const run_lane = lane + i % kLanes;
    if (!kSource && max_mag <= block::kMaxCode<C> && std::isfinite(s)) {
      for (uint64_t k = 0; k < len; ++k) {
        const double v = kCodes[block::CodeAt<C>(data, i + k)] * s;
        run_lane[k] = run_lane[k] + v * v;
      }
      const double a = kCodes[max_mag] * std::fabs(s);
      res_.amax = a > res_.amax ? a : res_.amax;
      return;
    }
    const double g = static_cast<double>(t_.global_scale);
    double amax = res_.amax;
    for (uint64_t k = 0; k < len; ++k) {
      const double v = kCodes[block::CodeAt<C>(data, i + k)] * s;
      if (std::isfinite(v)) {
        run_lane[k] = run_lane[k] + v * v;
        const double a = std::fabs(v);
        amax = a > amax ? a : amax;
      } else {
        ++res_.nonfinite;
        res_.nans += std::isnan(v);
      }
      if constexpr (kSource) {
        const double x = SourceValue(t_.source, t_.source_dtype, i + k);
        const double y = v * g;
        if (std::isfinite(x) && std::isfinite(y)) {
          const double d = x - y;
          error_lane[i % kLanes + k] = error_lane[i % kLanes + k] + d * d;
          source_lane[i % kLanes + k] = source_lane[i % kLanes + k] + x * x;
          res_.underflow += x != 0.0 && y == 0.0;
        }
      }
    }
    res_.amax = amax;
  }

  const BlockTensorRef& t_;
  const Geometry& g_;
  ElementResult res_;
};

struct BlockResult {
  uint64_t blocks = 0, saturated = 0, dead = 0, clamps = 0, scaled = 0;
  int32_t log2_min = std::numeric_limits<int32_t>::max();
  int32_t log2_max = std::numeric_limits<int32_t>::min();
  int64_t log2_sum = 0;
};

template <Codes C, Scales S>
BlockResult BlockPass(const BlockTensorRef& t, const Geometry& g) {
  const unsigned char* data = static_cast<const unsigned char*>(t.data);
  BlockResult b;
  for (uint64_t bi = 0; bi < g.grid_rows; ++bi) {
    const uint64_t r0 = bi * g.block_rows;
    const uint64_t r1 = r0 + g.block_rows < g.rows ? r0 + g.block_rows : g.rows;
    for (uint64_t bj = 0; bj < g.grid_cols; ++bj) {
      const uint64_t c0 = bj * g.block_cols;
      const uint64_t c1 = c0 + g.block_cols < g.cols ? c0 + g.block_cols : g.cols;
      bool any_saturated = false, any_code = false, any_source = false;
      for (uint64_t r = r0; r < r1; ++r) {
        for (uint64_t i = r * g.cols + c0; i < r * g.cols + c1; ++i) {
          const uint32_t mag = block::CodeAt<C>(data, i) & block::kMagMask<C>;
          any_saturated |= mag == block::kMaxCode<C>;
          any_code |= mag != 0;
          if (t.source != nullptr) {
            const double x = SourceValue(t.source, t.source_dtype, i);
            any_source |= x != 0.0 && !std::isnan(x);
          }
        }
      }
      ++b.blocks;
      b.saturated += any_saturated;
      b.dead += !any_code && (t.source == nullptr || any_source);
      const block::ScaleClass k =
          block::ClassifyScale<S>(block::ScaleBits<S>(t.scales, g.ScaleIndex(bi, bj)));
      b.clamps += k.clamp;
      if (k.has_log2) {
        ++b.scaled;
        b.log2_sum += k.log2;
        b.log2_min = k.log2 < b.log2_min ? k.log2 : b.log2_min;
        b.log2_max = k.log2 > b.log2_max ? k.log2 : b.log2_max;
      }
    }
  }
  return b;
}

template <Codes C, Scales S>
void TensorStats(const BlockTensorRef& t, ElementResult* e, BlockResult* b) {
  const Geometry g = block::GeometryOf(t);
  *e = t.source != nullptr ? ElementPass<C, S, true>(t, g).Run()
                           : ElementPass<C, S, false>(t, g).Run();
  *b = BlockPass<C, S>(t, g);
}

void Dispatch(const BlockTensorRef& t, ElementResult* e, BlockResult* b) {
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

}  // namespace

Status ComputeBlockStats(const BlockTensorRef* tensors, size_t count, BlockStats* out) {
  if (count > 0 && tensors == nullptr) return InvalidArgument("block tensor list is null");
  for (size_t i = 0; i < count; ++i) {
    Status s = CheckBlockTensor(tensors[i]);
    if (!s.ok()) return Status(s.code(), "tensor " + std::to_string(i) + ": " + s.message());
  }
  BlockStats u;
  uint64_t nans = 0;
  for (size_t i = 0; i < count; ++i) {
    const BlockTensorRef& t = tensors[i];
    if (t.rows * t.cols == 0) continue;  // adds +0.0 and no blocks
    ElementResult e;
    BlockResult b;
    Dispatch(t, &e, &b);
    const double g = std::fabs(static_cast<double>(t.global_scale));
    u.numel += t.rows * t.cols;
    u.sumsq = u.sumsq + e.sum * (g * g);  // stats_order.h step 5a, then step 6
    u.amax = e.amax * g > u.amax ? e.amax * g : u.amax;
    u.nonfinite += e.nonfinite;
    nans += e.nans;
    u.zero_codes += e.zero_codes;
    u.saturated += e.saturated;
    if (t.source != nullptr) {
      u.has_source = true;
      u.underflow += e.underflow;
      u.error_sumsq = u.error_sumsq + e.error;
      u.source_sumsq = u.source_sumsq + e.source;
    }
    u.blocks += b.blocks;
    u.saturated_blocks += b.saturated;
    u.dead_blocks += b.dead;
    u.scale_clamps += b.clamps;
    if (b.scaled > 0) {
      u.scale_log2_min =
          u.scaled_blocks == 0 || b.log2_min < u.scale_log2_min ? b.log2_min : u.scale_log2_min;
      u.scale_log2_max =
          u.scaled_blocks == 0 || b.log2_max > u.scale_log2_max ? b.log2_max : u.scale_log2_max;
      u.scale_log2_sum += b.log2_sum;
      u.scaled_blocks += b.scaled;
    }
  }
  if (nans > 0) {
    std::memcpy(&u.sumsq, &stats_order::kCanonicalNanBits, sizeof u.sumsq);
  } else if (u.nonfinite > 0) {
    u.sumsq = std::numeric_limits<double>::infinity();
  }
  *out = u;
  return Status::Ok();
}

}  // namespace gnmr::cpu
