// Block-scaled statistics kernels (docs/statistics.md, "Block-scaled
// formats"), bit-identical to gnmr::cpu::ComputeBlockStats. Launches on
// the caller's stream, each a grid of (x: persistent, y: tensor):
// 1. ItemKernel<F>, per format, over the tensors with a source: one warp
//    per 4096-element item in storage order (block_item_math.h has the
//    layout), the error and source sums of the item (canonical order step
//    6), underflow, and the blocks' non-zero-source flags (atomicOr).
// 2. BlockKernel<F>, per format: one thread per block walks it in storage
//    order (block_walk.h): its sumsq partial P = Q * s^2 (steps 2-3), code
//    counts, amax, and the block figures (saturated, dead, clamped, log2).
//    Integers go to the tensor's Counters with atomics (order-free).
// 3. SegKernel<kBlocks>: aligned 4096-entry subtrees of each tensor's
//    item tree (stats_order.h step 5), over the block partials (sumsq) and
//    over the item sums (source sums).
// 4. FinalKernel: one thread folds segments per tensor (ItemTree), applies
//    NVFP4's global scale (step 5) and adds the tensors in order.
//
// Loads. Block kernel: a thread reads its block's codes in storage order,
// 8 at a time in one 8- or 4-byte load (Load8) where they start at a
// multiple of 8 and the address allows (row-wise and square blocks when
// cols % 8 == 0), else a byte a load; for 32x1 columnwise blocks the
// threads of a warp read 32 consecutive columns (coalesced), for 1xB
// row-wise blocks a warp's first load spans 32 blocks of B bytes and the
// next ones hit L1. Item kernel (sources): a warp reads one item row of
// codes, 256 (fp8) or 128 (E2M1) consecutive bytes, one 8- or 4-byte load
// per thread where aligned (byte loads otherwise), sources one element per
// load, the warp's loads covering 256 consecutive elements. Scales:
// read-only cache. No logging, no library headers besides CUDA's.
#include <cuda_runtime.h>

#include "kernels/cuda/block_stats_kernels.h"
#include "kernels/cuda/block_walk.h"
#include "kernels/cuda/tree_reduce.h"

namespace gnmr::cuda::blk {
namespace {

constexpr uint32_t kFull = 0xffffffffu;
constexpr uint32_t kThreads = 256, kWarpsPerBlock = kThreads / kWarp;

// The thread's 8 codes of item row `row`, packed (block_item_math.h).
template <BlockFormat F>
__device__ __forceinline__ uint64_t LoadRow(const BlockDesc& d, uint64_t first, uint32_t row,
                                            uint32_t t) {
  constexpr uint32_t kBytes = Code<F>::kBits;  // 8 codes: 8 bytes, or 4 for E2M1
  const uint64_t e = first + row * kLanes + t * kSlots;
  const unsigned char* p = d.data + (Code<F>::kE2M1 ? e / 2 : e);
  const uint64_t left = d.numel - e;
  if (left >= kSlots && reinterpret_cast<uintptr_t>(p) % kBytes == 0) {
    if constexpr (kBytes == 8) {
      const uint2 u = __ldcs(reinterpret_cast<const uint2*>(p));
      return static_cast<uint64_t>(u.x) | static_cast<uint64_t>(u.y) << 32;
    } else {
      return __ldcs(reinterpret_cast<const unsigned int*>(p));
    }
  }
  const uint64_t valid = Code<F>::kE2M1 ? left / 2 : left;  // E2M1: numel is even
  uint64_t w = 0;
#pragma unroll
  for (uint32_t b = 0; b < kBytes; ++b) {
    if (b < valid) w |= static_cast<uint64_t>(__ldcs(p + b)) << (8 * b);
  }
  return w;
}

template <BlockFormat F>
__device__ __forceinline__ uint32_t LoadScale(const BlockDesc& d, uint64_t index) {
  if constexpr (ScaleBytes(F) == 4) {
    return __ldg(reinterpret_cast<const unsigned int*>(d.scales) + index);
  } else {
    return __ldg(d.scales + index);
  }
}

// Codes i .. i + 7 (i a multiple of 8), packed: one 8-byte (fp8) or
// 4-byte (E2M1) load through the read-only cache where the tensor's
// address allows, byte loads otherwise.
template <BlockFormat F>
__device__ __forceinline__ uint64_t Load8(const BlockDesc& d, uint64_t i) {
  constexpr uint32_t kBytes = Code<F>::kBits;  // 8 codes: 8 bytes, or 4 for E2M1
  const unsigned char* p = d.data + (Code<F>::kE2M1 ? i / 2 : i);
  if (reinterpret_cast<uintptr_t>(p) % kBytes == 0) {
    if constexpr (kBytes == 8) {
      const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
      return static_cast<uint64_t>(u.x) | static_cast<uint64_t>(u.y) << 32;
    } else {
      return __ldg(reinterpret_cast<const unsigned int*>(p));
    }
  }
  uint64_t w = 0;
#pragma unroll
  for (uint32_t k = 0; k < kBytes; ++k) w |= static_cast<uint64_t>(__ldg(p + k)) << (8 * k);
  return w;
}

__device__ __forceinline__ uint32_t LoadSource(const BlockDesc& d, uint64_t e) {
  if (d.source_dtype == static_cast<uint32_t>(DType::kFp32)) {
    return __ldcs(reinterpret_cast<const unsigned int*>(d.source) + e);
  }
  return __ldcs(reinterpret_cast<const unsigned short*>(d.source) + e);
}

__device__ __forceinline__ void OrFlags(uint32_t* flags, uint64_t slot, uint32_t f) {
  atomicOr(flags + slot / 8, f << (4 * (slot % 8)));
}

__device__ __forceinline__ void AddCount(unsigned long long* c, uint32_t v) {
  if (v != 0u) atomicAdd(c, static_cast<unsigned long long>(v));
}

// Resident blocks per SM the item kernel (tensors with a source: two sums
// of 8 lanes) is held to; docs/perf.md, "GPU", has ptxas's figures.
constexpr int kMinItemBlocks = 3;

// The source sums of every item of one tensor per grid row y.
template <BlockFormat F>
__global__ void __launch_bounds__(kThreads, kMinItemBlocks)
    ItemKernel(Launch l, uint32_t group_first) {
  const uint32_t tensor = l.order[group_first + blockIdx.y];
  const BlockDesc d = l.descs[tensor];
  const uint32_t t = threadIdx.x % kWarp;
  const uint64_t warp = (static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x) / kWarp;
  const uint64_t n_warps = static_cast<uint64_t>(gridDim.x) * kWarpsPerBlock;
  for (uint64_t k = warp; k < d.n_items; k += n_warps) {
    const uint64_t first = k * kItemElems;
    Lanes lanes;
    uint32_t underflow = 0;
    ThreadItem<F>(
        d, k, t, [&](uint32_t row) { return LoadRow<F>(d, first, row, t); },
        [&](uint64_t index) { return LoadScale<F>(d, index); },
        [&](uint64_t e) { return LoadSource(d, e); },
        [&](uint64_t block, uint32_t f) { OrFlags(l.flags, d.first_block + block, f); }, &lanes,
        &underflow);
    const Sums s{WarpLaneTree<kSlots>(lanes.err), WarpLaneTree<kSlots>(lanes.src)};
    underflow = __reduce_add_sync(kFull, underflow);
    if (t == 0) {
      l.item_sums[d.first_item + k] = s;
      AddCount(&l.counters[tensor].underflow, underflow);
    }
  }
}

// Steps 2-3 and the block figures: one thread per block of tensor
// order[group_first + y], blocks in grid order.
template <BlockFormat F>
__global__ void __launch_bounds__(kThreads) BlockKernel(Launch l, uint32_t group_first) {
  const uint32_t tensor = l.order[group_first + blockIdx.y];
  const BlockDesc d = l.descs[tensor];
  const bool has_source = d.source != nullptr;
  unsigned long long zeros = 0, sat = 0, nonfinite = 0, nans = 0, amax = 0;
  unsigned long long sat_blocks = 0, dead = 0, clamps = 0, scaled = 0;
  uint32_t max_enc = 0, min_enc = 0;
  long long log2_sum = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t b = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; b < d.n_blocks;
       b += stride) {
    const uint64_t bi = b / d.grid_cols, bj = b % d.grid_cols;
    const uint32_t bits = LoadScale<F>(d, ScaleIndex(d, bi, bj));
    const BlockWalk w = WalkBlock<F>(
        d, b, DecodeScale<F>(bits),
        [&](uint64_t i) -> uint32_t {
          if constexpr (Code<F>::kE2M1) {
            return (static_cast<uint32_t>(__ldg(d.data + i / 2)) >> (4 * (i % 2))) & 0xfu;
          }
          return __ldg(d.data + i);
        },
        [&](uint64_t i) { return Load8<F>(d, i); });
    l.block_partials[d.first_block + b] = w.partial;
    const uint64_t slot = d.first_block + b;
    const uint32_t source_flag = has_source ? (l.flags[slot / 8] >> (4 * (slot % 8))) & 0xfu : 0u;
    const BlockCounts k = BlockFigures<F>(w.flags | source_flag, bits, has_source);
    zeros += w.zeros;
    sat += w.saturated;
    nonfinite += w.nonfinite;
    nans += w.nans;
    amax = w.amax_bits > amax ? w.amax_bits : amax;
    sat_blocks += k.saturated_blocks;
    dead += k.dead_blocks;
    clamps += k.scale_clamps;
    if (k.scaled_blocks != 0u) {
      ++scaled;
      log2_sum += k.log2;
      max_enc = max(max_enc, static_cast<uint32_t>(k.log2 + kLog2Bias));
      min_enc = max(min_enc, static_cast<uint32_t>(kLog2Bias - k.log2));
    }
  }
  // One atomic per thread and figure, only where non-zero (64-bit per
  // thread: a tensor may have 2^44 blocks).
  Counters* o = l.counters + tensor;
  const unsigned long long* mine[] = {&zeros,      &sat,  &nonfinite, &nans,
                                      &sat_blocks, &dead, &clamps,    &scaled};
  unsigned long long* theirs[] = {&o->zero_codes,   &o->saturated,        &o->nonfinite,
                                  &o->nans,         &o->saturated_blocks, &o->dead_blocks,
                                  &o->scale_clamps, &o->scaled_blocks};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (*mine[i] != 0) atomicAdd(theirs[i], *mine[i]);
  }
  if (amax != 0) atomicMax(&o->amax_bits, amax);
  if (log2_sum != 0) atomicAdd(&o->log2_sum, static_cast<unsigned long long>(log2_sum));
  if (max_enc != 0u) atomicMax(&o->log2_max_enc, max_enc);
  if (min_enc != 0u) atomicMax(&o->log2_min_enc, min_enc);
}

// 16 consecutive values as an exact pairwise subtree ((v0 + v1) + (v2 +
// v3)) + ...; missing entries are the +0.0 padding.
__device__ __forceinline__ double Pairwise16(double (&v)[16]) {
#pragma unroll
  for (uint32_t s = 1; s < 16; s <<= 1) {
#pragma unroll
    for (uint32_t i = 0; i < 16; i += 2 * s) v[i] = __dadd_rn(v[i], v[i + s]);
  }
  return v[0];
}

// Step 5 per segment of 4096 entries: thread j folds entries [16j, 16j +
// 16), PairTree the rest. kBlocks: the block partials of every tensor
// (sumsq); else the item sums of the tensors with a source.
template <bool kBlocks>
__global__ void __launch_bounds__(kPairTreeThreads) SegKernel(Launch l) {
  __shared__ double sh[kPairTreeThreads];
  constexpr uint32_t kPer = kSegItems / kPairTreeThreads;
  const BlockDesc d = l.descs[blockIdx.y];
  const uint64_t n = kBlocks ? d.n_blocks : (d.source != nullptr ? d.n_items : 0);
  const uint64_t n_segs = kBlocks ? d.n_bsegs : (d.source != nullptr ? d.n_segs : 0);
  for (uint64_t s = blockIdx.x; s < n_segs; s += gridDim.x) {
    double a[kPer], b[kPer];
#pragma unroll
    for (uint32_t i = 0; i < kPer; ++i) {
      const uint64_t e = s * kSegItems + threadIdx.x * kPer + i;
      a[i] = b[i] = 0.0;
      if (e < n && kBlocks) a[i] = l.block_partials[d.first_block + e];
      if (e < n && !kBlocks) {
        const Sums v = l.item_sums[d.first_item + e];
        a[i] = v.err;
        b[i] = v.src;
      }
    }
    const double x = PairTree(sh, Pairwise16(a));
    const double y = kBlocks ? 0.0 : PairTree(sh, Pairwise16(b));
    if (threadIdx.x == 0) {
      if (kBlocks) {
        l.bseg_sums[d.first_bseg + s] = x;
      } else {
        l.seg_sums[d.first_seg + s] = Sums{x, y};
      }
    }
  }
}

// Steps 4-5 over segments and tensors, one thread.
__global__ void FinalKernel(Launch l) {
  BlockStats out{};
  uint64_t nans = 0;
  bool any_log2 = false;
  for (uint32_t k = 0; k < l.n_tensors; ++k) {
    const BlockDesc d = l.descs[k];
    out.has_source = out.has_source || d.source != nullptr;  // empty tensors too, as on the CPU
    if (d.numel == 0) continue;                              // adds +0.0 and no blocks
    const Counters c = l.counters[k];
    Tree sq, err, src;
    for (uint64_t s = 0; s < d.n_bsegs; ++s) sq.Push(l.bseg_sums[d.first_bseg + s]);
    const double g = fabs(d.global_scale);
    out.sumsq = __dadd_rn(out.sumsq, __dmul_rn(sq.Finish(), __dmul_rn(g, g)));
    const double amax = __dmul_rn(__longlong_as_double(static_cast<long long>(c.amax_bits)), g);
    out.amax = amax > out.amax ? amax : out.amax;
    if (d.source != nullptr) {
      for (uint64_t s = 0; s < d.n_segs; ++s) {
        const Sums v = l.seg_sums[d.first_seg + s];
        err.Push(v.err);
        src.Push(v.src);
      }
      out.error_sumsq = __dadd_rn(out.error_sumsq, err.Finish());
      out.source_sumsq = __dadd_rn(out.source_sumsq, src.Finish());
      out.underflow += c.underflow;
    }
    out.numel += d.numel;
    out.nonfinite += c.nonfinite;
    nans += c.nans;
    out.zero_codes += c.zero_codes;
    out.saturated += c.saturated;
    out.blocks += d.n_blocks;
    out.saturated_blocks += c.saturated_blocks;
    out.dead_blocks += c.dead_blocks;
    out.scale_clamps += c.scale_clamps;
    out.scaled_blocks += c.scaled_blocks;
    out.scale_log2_sum += static_cast<int64_t>(c.log2_sum);
    if (c.scaled_blocks != 0) {
      const int32_t hi = static_cast<int32_t>(c.log2_max_enc) - kLog2Bias;
      const int32_t lo = kLog2Bias - static_cast<int32_t>(c.log2_min_enc);
      out.scale_log2_max = any_log2 && out.scale_log2_max > hi ? out.scale_log2_max : hi;
      out.scale_log2_min = any_log2 && out.scale_log2_min < lo ? out.scale_log2_min : lo;
      any_log2 = true;
    }
  }
  if (nans > 0) {
    out.sumsq = __longlong_as_double(0x7ff8000000000000ll);
  } else if (out.nonfinite > 0) {
    out.sumsq = __longlong_as_double(0x7ff0000000000000ll);
  }
  *l.out = out;
}

uint32_t Grid(uint64_t wanted, uint32_t cap) {
  if (wanted == 0) wanted = 1;
  return static_cast<uint32_t>(wanted < cap ? wanted : cap);
}

// One group: the item kernel (source) or the block kernel of format F.
template <BlockFormat F>
cudaError_t LaunchFormat(const Launch& l, const Group& g, cudaStream_t st) {
  Launch copy = l;
  uint32_t first = g.first;
  void* args[] = {&copy, &first};
  if (g.source) {
    const dim3 grid(Grid((g.max_items + kWarpsPerBlock - 1) / kWarpsPerBlock, l.max_grid), g.count);
    return cudaLaunchKernel(reinterpret_cast<const void*>(&ItemKernel<F>), grid, dim3(kThreads),
                            args, 0, st);
  }
  const dim3 grid(Grid((g.max_blocks + kThreads - 1) / kThreads, l.max_grid), g.count);
  return cudaLaunchKernel(reinterpret_cast<const void*>(&BlockKernel<F>), grid, dim3(kThreads),
                          args, 0, st);
}

cudaError_t LaunchGroup(const Launch& l, const Group& g, cudaStream_t st) {
  switch (g.format) {
    case BlockFormat::kMxfp8E4M3:
      return LaunchFormat<BlockFormat::kMxfp8E4M3>(l, g, st);
    case BlockFormat::kMxfp8E5M2:
      return LaunchFormat<BlockFormat::kMxfp8E5M2>(l, g, st);
    case BlockFormat::kMxfp4:
      return LaunchFormat<BlockFormat::kMxfp4>(l, g, st);
    case BlockFormat::kNvfp4:
      return LaunchFormat<BlockFormat::kNvfp4>(l, g, st);
    default:
      return LaunchFormat<BlockFormat::kFp8Block>(l, g, st);
  }
}

}  // namespace

int CheckBlockKernelImage() {
  cudaFuncAttributes a{};
  return static_cast<int>(cudaFuncGetAttributes(&a, reinterpret_cast<const void*>(&FinalKernel)));
}

int LaunchBlockStats(const Launch& l, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  Launch copy = l;
  void* args[] = {&copy};
  cudaError_t e = cudaSuccess;
  // Item kernels first: the block kernels read their source flags.
  for (int pass = 1; pass >= 0; --pass) {
    for (uint32_t i = 0; i < l.n_groups && e == cudaSuccess; ++i) {
      if (l.groups[i].source == (pass == 1)) e = LaunchGroup(l, l.groups[i], st);
    }
  }
  if (e == cudaSuccess && l.n_tensors > 0) {
    e = cudaLaunchKernel(reinterpret_cast<const void*>(&SegKernel<true>),
                         dim3(Grid(l.max_bsegs, l.max_grid), l.n_tensors), dim3(kPairTreeThreads),
                         args, 0, st);
  }
  if (e == cudaSuccess && l.n_tensors > 0 && l.max_segs > 0) {
    e = cudaLaunchKernel(reinterpret_cast<const void*>(&SegKernel<false>),
                         dim3(Grid(l.max_segs, l.max_grid), l.n_tensors), dim3(kPairTreeThreads),
                         args, 0, st);
  }
  if (e == cudaSuccess) {
    e = cudaLaunchKernel(reinterpret_cast<const void*>(&FinalKernel), dim3(1), dim3(1), args, 0,
                         st);
  }
  return static_cast<int>(e);
}

}  // namespace gnmr::cuda::blk
