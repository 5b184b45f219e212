// The block-scaled kernels (block_stats_kernels.cu) simulated on the CPU:
// the plan the host builds (block_plan.h); for tensors with a source the
// item math of every thread of a simulated warp (block_item_math.h,
// __host__ __device__) with the lane tree as gpu_item_sim.h shuffles it
// and the source flags ORed per block; every block walked as the block
// kernel walks it (block_walk.h); the item trees with stats_order.h's
// ItemTree (the segment decomposition is checked by
// StatsOrder.GpuSegmentDecompositionMatches).
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cuda/block_plan.h"
#include "kernels/cuda/block_walk.h"
#include "kernels/stats_order.h"
#include "tests/kernels/gpu_item_sim.h"

namespace gnmr::testing {

namespace blk = cuda::blk;

struct SimItemOut {
  blk::Sums sums{};
  uint32_t underflow = 0;
};

// The item kernel on one item of tensor d (with a source), on the
// simulated warp; ORs its block flags into flags[first_block + block].
template <BlockFormat F>
SimItemOut SimBlockItem(const blk::BlockDesc& d, uint64_t k, std::vector<uint8_t>* flags) {
  double err[32][8] = {}, src[32][8] = {};
  SimItemOut o;
  for (uint32_t t = 0; t < 32; ++t) {
    blk::Lanes lanes;
    const uint64_t first = k * blk::kItemElems;
    blk::ThreadItem<F>(
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
        [&](uint64_t block, uint32_t f) { (*flags)[d.first_block + block] |= f; }, &lanes,
        &o.underflow);
    std::memcpy(err[t], lanes.err, sizeof lanes.err);
    std::memcpy(src[t], lanes.src, sizeof lanes.src);
  }
  o.sums.err = SimTree<8>(err);
  o.sums.src = SimTree<8>(src);
  return o;
}

// Block b as the block kernel computes it: its walk and its figures.
template <BlockFormat F>
blk::BlockWalk SimBlock(const blk::BlockDesc& d, uint64_t b, uint32_t source_flags,
                        blk::BlockCounts* k) {
  const uint64_t bi = b / d.grid_cols, bj = b % d.grid_cols;
  uint32_t bits = 0;
  std::memcpy(&bits, d.scales + blk::ScaleIndex(d, bi, bj) * blk::ScaleBytes(F),
              blk::ScaleBytes(F));
  const blk::BlockWalk w = blk::WalkBlock<F>(
      d, b, blk::DecodeScale<F>(bits),
      [&](uint64_t i) -> uint32_t {
        if (blk::Code<F>::kE2M1) return (d.data[i / 2] >> (4 * (i % 2))) & 0xfu;
        return d.data[i];
      },
      [&](uint64_t i) {  // the kernel's Load8
        uint64_t w8 = 0;
        std::memcpy(&w8, d.data + (blk::Code<F>::kE2M1 ? i / 2 : i), blk::Code<F>::kBits);
        return w8;
      });
  *k = blk::BlockFigures<F>(w.flags | source_flags, bits, d.source != nullptr);
  return w;
}

inline blk::BlockWalk SimBlockOf(const blk::BlockDesc& d, uint64_t b, uint32_t source_flags,
                                 blk::BlockCounts* k) {
  switch (static_cast<BlockFormat>(d.format)) {
    case BlockFormat::kMxfp8E4M3:
      return SimBlock<BlockFormat::kMxfp8E4M3>(d, b, source_flags, k);
    case BlockFormat::kMxfp8E5M2:
      return SimBlock<BlockFormat::kMxfp8E5M2>(d, b, source_flags, k);
    case BlockFormat::kMxfp4:
      return SimBlock<BlockFormat::kMxfp4>(d, b, source_flags, k);
    case BlockFormat::kNvfp4:
      return SimBlock<BlockFormat::kNvfp4>(d, b, source_flags, k);
    default:
      return SimBlock<BlockFormat::kFp8Block>(d, b, source_flags, k);
  }
}

inline SimItemOut SimSourceItem(const blk::BlockDesc& d, uint64_t k, std::vector<uint8_t>* flags) {
  switch (static_cast<BlockFormat>(d.format)) {
    case BlockFormat::kMxfp8E4M3:
      return SimBlockItem<BlockFormat::kMxfp8E4M3>(d, k, flags);
    case BlockFormat::kMxfp8E5M2:
      return SimBlockItem<BlockFormat::kMxfp8E5M2>(d, k, flags);
    case BlockFormat::kMxfp4:
      return SimBlockItem<BlockFormat::kMxfp4>(d, k, flags);
    case BlockFormat::kNvfp4:
      return SimBlockItem<BlockFormat::kNvfp4>(d, k, flags);
    default:
      return SimBlockItem<BlockFormat::kFp8Block>(d, k, flags);
  }
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
    out.has_source = out.has_source || d.source != nullptr;  // empty tensors too
    if (d.numel == 0) continue;                              // FinalKernel skips them
    const bool src = d.source != nullptr;
    stats_order::ItemTree sq, err, so;
    if (src) {  // the item kernel: source sums and flags
      for (uint64_t k = 0; k < d.n_items; ++k) {
        const SimItemOut o = SimSourceItem(d, k, &flags);
        err.Push(o.sums.err);
        so.Push(o.sums.src);
        out.underflow += o.underflow;
      }
      out.error_sumsq = out.error_sumsq + err.Finish();
      out.source_sumsq = out.source_sumsq + so.Finish();
    }
    uint64_t amax_bits = 0;
    for (uint64_t b = 0; b < d.n_blocks; ++b) {  // the block kernel
      blk::BlockCounts k;
      const uint32_t source_flags = src ? flags[d.first_block + b] & blk::kFlagSourceNonzero : 0u;
      const blk::BlockWalk w = SimBlockOf(d, b, source_flags, &k);
      sq.Push(w.partial);
      out.zero_codes += w.zeros;
      out.saturated += w.saturated;
      out.nonfinite += w.nonfinite;
      nans += w.nans;
      amax_bits = std::max(amax_bits, w.amax_bits);
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
    const double g = std::fabs(d.global_scale);
    out.sumsq = out.sumsq + sq.Finish() * (g * g);
    out.amax = std::max(out.amax, blk::DoubleFromBits(amax_bits) * g);
    out.numel += d.numel;
  }
  if (nans > 0) {
    out.sumsq = blk::DoubleFromBits(stats_order::kCanonicalNanBits);
  } else if (out.nonfinite > 0) {
    out.sumsq = blk::DoubleFromBits(0x7ff0000000000000ull);
  }
  return out;
}

}  // namespace gnmr::testing
