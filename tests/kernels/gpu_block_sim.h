// The block-scaled kernels (block_stats_kernels.cu) simulated on the CPU:
// the plan the host builds (block_plan.h), the item math of every thread of
// a simulated warp (block_item_math.h, __host__ __device__), the lane tree
// as gpu_item_sim.h shuffles it, the flags ORed per block, the block
// figures, and steps 5-6 with stats_order.h's ItemTree (the segment
// decomposition is checked by StatsOrder.GpuSegmentDecompositionMatches).
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cuda/block_plan.h"
#include "kernels/stats_order.h"
#include "tests/kernels/gpu_item_sim.h"

namespace gnmr::testing {

namespace blk = cuda::blk;

struct SimItemOut {
  blk::Sums sums{};
  blk::Counts counts;
};

// One item of tensor d on the simulated warp; ORs its block flags into
// flags[first_block + block].
template <BlockFormat F, bool kSource>
SimItemOut SimBlockItem(const blk::BlockDesc& d, uint64_t k, std::vector<uint8_t>* flags) {
  double sq[32][8] = {}, err[32][8] = {}, src[32][8] = {};
  SimItemOut o;
  for (uint32_t t = 0; t < 32; ++t) {
    blk::Lanes<kSource> lanes;
    blk::Counts c;
    const uint64_t first = k * blk::kItemElems;
    blk::ThreadItem<F, kSource>(
        d, k, t,
        [&](uint32_t row) {  // the kernel's LoadRow: 8 codes, nothing past the end
          const uint64_t e = first + row * 256 + t * 8;
          const uint64_t left = std::min<uint64_t>(8, d.numel - e);
          const bool e2m1 = blk::Code<F>::kE2M1;
          uint64_t w = 0;
          std::memcpy(&w, d.data + (e2m1 ? e / 2 : e), e2m1 ? left / 2 : left);
          return w;
        },
        [&](uint64_t index) {
          uint32_t b = 0;
          std::memcpy(&b, d.scales + index * blk::ScaleBytes(F), blk::ScaleBytes(F));
          return b;
        },
        [&](uint64_t e) {
          uint32_t b = 0;
          const size_t es = d.source_dtype == static_cast<uint32_t>(DType::kFp32) ? 4 : 2;
          std::memcpy(&b, d.source + e * es, es);
          return b;
        },
        [&](uint64_t block, uint32_t f) { (*flags)[d.first_block + block] |= f; }, &lanes, &c);
    std::memcpy(sq[t], lanes.sq, sizeof lanes.sq);
    if constexpr (kSource) {
      std::memcpy(err[t], lanes.err, sizeof lanes.err);
      std::memcpy(src[t], lanes.src, sizeof lanes.src);
    }
    o.counts.nonfinite += c.nonfinite;
    o.counts.nans += c.nans;
    o.counts.zero_codes += c.zero_codes;
    o.counts.saturated += c.saturated;
    o.counts.underflow += c.underflow;
    o.counts.amax_bits = std::max(o.counts.amax_bits, c.amax_bits);
  }
  o.sums.sq = SimTree<8>(sq);
  o.sums.err = kSource ? SimTree<8>(err) : 0.0;
  o.sums.src = kSource ? SimTree<8>(src) : 0.0;
  return o;
}

template <BlockFormat F>
SimItemOut SimItemOf(const blk::BlockDesc& d, uint64_t k, std::vector<uint8_t>* flags) {
  return d.source != nullptr ? SimBlockItem<F, true>(d, k, flags)
                             : SimBlockItem<F, false>(d, k, flags);
}

template <BlockFormat F>
blk::BlockCounts SimFigures(const blk::BlockDesc& d, uint32_t f, uint64_t b) {
  const uint64_t bi = b / d.grid_cols, bj = b % d.grid_cols;
  uint32_t bits = 0;
  std::memcpy(&bits, d.scales + blk::ScaleIndex(d, bi, bj) * blk::ScaleBytes(F),
              blk::ScaleBytes(F));
  return blk::BlockFigures<F>(f, bits, d.source != nullptr);
}

// The whole request, as the kernels compute it.
inline BlockStats SimBlockStats(const BlockTensorRef* tensors, size_t count) {
  blk::Plan plan;
  const Status s = blk::BuildPlan(
      tensors, count, kHostDevice,
      [](const void* p, size_t, size_t, const void** dev) {
        *dev = p;
        return Status::Ok();
      },
      &plan);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::vector<uint8_t> flags(plan.blocks);
  BlockStats out;
  uint64_t nans = 0;
  bool any_log2 = false;
  for (const blk::BlockDesc& d : plan.descs) {
    if (d.numel == 0) continue;  // FinalKernel skips empty tensors
    stats_order::ItemTree sq, err, src;
    uint64_t amax_bits = 0;
    for (uint64_t k = 0; k < d.n_items; ++k) {
      SimItemOut o;
      switch (static_cast<BlockFormat>(d.format)) {
        case BlockFormat::kMxfp8E4M3:
          o = SimItemOf<BlockFormat::kMxfp8E4M3>(d, k, &flags);
          break;
        case BlockFormat::kMxfp8E5M2:
          o = SimItemOf<BlockFormat::kMxfp8E5M2>(d, k, &flags);
          break;
        case BlockFormat::kMxfp4:
          o = SimItemOf<BlockFormat::kMxfp4>(d, k, &flags);
          break;
        case BlockFormat::kNvfp4:
          o = SimItemOf<BlockFormat::kNvfp4>(d, k, &flags);
          break;
        default:
          o = SimItemOf<BlockFormat::kFp8Block>(d, k, &flags);
          break;
      }
      sq.Push(o.sums.sq);
      err.Push(o.sums.err);
      src.Push(o.sums.src);
      out.nonfinite += o.counts.nonfinite;
      nans += o.counts.nans;
      out.zero_codes += o.counts.zero_codes;
      out.saturated += o.counts.saturated;
      if (d.source != nullptr) out.underflow += o.counts.underflow;
      amax_bits = std::max(amax_bits, o.counts.amax_bits);
    }
    const double g = std::fabs(d.global_scale);
    out.sumsq = out.sumsq + sq.Finish() * (g * g);
    out.amax = std::max(out.amax, blk::DoubleFromBits(amax_bits) * g);
    if (d.source != nullptr) {
      out.has_source = true;
      out.error_sumsq = out.error_sumsq + err.Finish();
      out.source_sumsq = out.source_sumsq + src.Finish();
    }
    out.numel += d.numel;
    for (uint64_t b = 0; b < d.n_blocks; ++b) {
      const uint32_t f = flags[d.first_block + b];
      blk::BlockCounts k;
      if (d.format == static_cast<uint32_t>(BlockFormat::kNvfp4)) {
        k = SimFigures<BlockFormat::kNvfp4>(d, f, b);
      } else if (d.format == static_cast<uint32_t>(BlockFormat::kFp8Block)) {
        k = SimFigures<BlockFormat::kFp8Block>(d, f, b);
      } else {
        k = SimFigures<BlockFormat::kMxfp4>(d, f, b);
      }
      ++out.blocks;
      out.saturated_blocks += k.saturated_blocks;
      out.dead_blocks += k.dead_blocks;
      out.scale_clamps += k.scale_clamps;
      if (k.scaled_blocks) {
        out.scale_log2_min = any_log2 ? std::min(out.scale_log2_min, k.log2) : k.log2;
        out.scale_log2_max = any_log2 ? std::max(out.scale_log2_max, k.log2) : k.log2;
        out.scale_log2_sum += k.log2;
        ++out.scaled_blocks;
        any_log2 = true;
      }
    }
  }
  if (nans > 0) {
    out.sumsq = blk::DoubleFromBits(stats_order::kCanonicalNanBits);
  } else if (out.nonfinite > 0) {
    out.sumsq = blk::DoubleFromBits(0x7ff0000000000000ull);
  }
  return out;
}

}  // namespace gnmr::testing
