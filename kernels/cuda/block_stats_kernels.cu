// Block-scaled statistics kernels (docs/statistics.md, "Block-scaled
// formats"), bit-identical to gnmr::cpu::ComputeBlockStats. Four launches
// on the caller's stream, each a grid of (x: persistent, y: tensor):
// 1. ItemKernel<F, kSource>, once per (format, has source) group: one warp
//    per 4096-element item (block_item_math.h has the layout), writes the
//    item's three canonical sums, adds its counts to the tensor's Counters
//    (atomics: integers, order-free) and ORs block flags.
// 2. BlockKernel: one thread per block: flags + scale -> saturated / dead /
//    clamped blocks and the log2 figures (atomics, after a warp reduction).
// 3. SegKernel: aligned 4096-item subtrees of each tensor's item tree.
// 4. FinalKernel: one thread folds segments per tensor (ItemTree), applies
//    NVFP4's global scale (stats_order.h step 5a) and adds the tensors in
//    order (step 6) into one BlockStats.
//
// Loads. Codes: a warp reads one item row, 256 (fp8) or 128 (E2M1)
// consecutive bytes, one 8- or 4-byte load per thread where the row's
// address is aligned to it (byte loads otherwise and in a partial row),
// streaming (__ldcs: read once). Sources: one element per load, a thread's
// 8 consecutive elements, the warp's loads covering 256 consecutive
// elements (coalesced through L1). Scales: read-only cache (__ldg), only
// when the block changes. No logging, no library headers besides CUDA's.
#include <cuda_runtime.h>

#include "kernels/cuda/block_stats_kernels.h"
#include "kernels/cuda/tree_reduce.h"

namespace gnmr::cuda::blk {
namespace {

constexpr uint32_t kFull = 0xffffffffu;
constexpr uint32_t kThreads = 256, kWarpsPerBlock = kThreads / kWarp;

__device__ __forceinline__ uint64_t WarpMax64(uint64_t v) {
#pragma unroll
  for (uint32_t d = 16; d > 0; d >>= 1) {
    const uint64_t o = __shfl_xor_sync(kFull, v, d);
    v = o > v ? o : v;
  }
  return v;
}

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

// Resident blocks per SM the registers are held to: 4 (64 registers, no
// spill) without a source; 2 with one (three sums of 8 lanes: 124-126
// registers, no spill; unheld ptxas took 156 registers, 1 block).
// docs/perf.md, "GPU".
template <bool kSource>
constexpr int kMinItemBlocks = kSource ? 2 : 4;

// Steps 1-4 of every item of one tensor per block row y of the grid.
template <BlockFormat F, bool kSource>
__global__ void __launch_bounds__(kThreads, kMinItemBlocks<kSource>)
    ItemKernel(Launch l, uint32_t group_first) {
  const uint32_t tensor = l.order[group_first + blockIdx.y];
  const BlockDesc d = l.descs[tensor];
  const uint32_t t = threadIdx.x % kWarp;
  const uint64_t warp = (static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x) / kWarp;
  const uint64_t n_warps = static_cast<uint64_t>(gridDim.x) * kWarpsPerBlock;
  for (uint64_t k = warp; k < d.n_items; k += n_warps) {
    const uint64_t first = k * kItemElems;
    Lanes<kSource> lanes;
    Counts c;
    ThreadItem<F, kSource>(
        d, k, t, [&](uint32_t row) { return LoadRow<F>(d, first, row, t); },
        [&](uint64_t index) { return LoadScale<F>(d, index); },
        [&](uint64_t e) { return LoadSource(d, e); },
        [&](uint64_t block, uint32_t f) { OrFlags(l.flags, d.first_block + block, f); }, &lanes,
        &c);
    Sums s{WarpLaneTree<kSlots>(lanes.sq), 0.0, 0.0};
    if constexpr (kSource) {
      s.err = WarpLaneTree<kSlots>(lanes.err);
      s.src = WarpLaneTree<kSlots>(lanes.src);
    }
    const uint64_t amax = WarpMax64(c.amax_bits);
    const uint32_t nonfinite = __reduce_add_sync(kFull, c.nonfinite);
    const uint32_t nans = __reduce_add_sync(kFull, c.nans);
    const uint32_t zeros = __reduce_add_sync(kFull, c.zero_codes);
    const uint32_t saturated = __reduce_add_sync(kFull, c.saturated);
    const uint32_t underflow = kSource ? __reduce_add_sync(kFull, c.underflow) : 0u;
    if (t == 0) {
      l.item_sums[d.first_item + k] = s;
      Counters* o = l.counters + tensor;
      AddCount(&o->nonfinite, nonfinite);
      AddCount(&o->nans, nans);
      AddCount(&o->zero_codes, zeros);
      AddCount(&o->saturated, saturated);
      AddCount(&o->underflow, underflow);
      if (amax != 0u) atomicMax(&o->amax_bits, static_cast<unsigned long long>(amax));
    }
  }
}

template <BlockFormat F>
__device__ __forceinline__ BlockCounts Figures(const BlockDesc& d, uint32_t flags, uint64_t b) {
  const uint64_t bi = b / d.grid_cols, bj = b % d.grid_cols;
  return BlockFigures<F>(flags, LoadScale<F>(d, ScaleIndex(d, bi, bj)), d.source != nullptr);
}

// Per-block figures: one thread per block of tensor blockIdx.y.
__global__ void __launch_bounds__(kThreads) BlockKernel(Launch l) {
  const BlockDesc d = l.descs[blockIdx.y];
  unsigned long long sat = 0, dead = 0, clamps = 0, scaled = 0;
  uint32_t max_enc = 0, min_enc = 0;
  long long log2_sum = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t b = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; b < d.n_blocks;
       b += stride) {
    const uint64_t slot = d.first_block + b;
    const uint32_t f = (l.flags[slot / 8] >> (4 * (slot % 8))) & 0xfu;
    BlockCounts k;
    switch (static_cast<BlockFormat>(d.format)) {
      case BlockFormat::kMxfp8E4M3:
      case BlockFormat::kMxfp8E5M2:
      case BlockFormat::kMxfp4:
        k = Figures<BlockFormat::kMxfp4>(d, f, b);  // E8M0 scales alike
        break;
      case BlockFormat::kNvfp4:
        k = Figures<BlockFormat::kNvfp4>(d, f, b);
        break;
      default:
        k = Figures<BlockFormat::kFp8Block>(d, f, b);
        break;
    }
    sat += k.saturated_blocks;
    dead += k.dead_blocks;
    clamps += k.scale_clamps;
    if (k.scaled_blocks != 0u) {
      ++scaled;
      log2_sum += k.log2;
      max_enc = max(max_enc, static_cast<uint32_t>(k.log2 + kLog2Bias));
      min_enc = max(min_enc, static_cast<uint32_t>(kLog2Bias - k.log2));
    }
  }
  // One atomic per thread and figure, only where non-zero (the counts of
  // one thread are 64-bit: a tensor may have 2^44 blocks).
  Counters* o = l.counters + blockIdx.y;
  if (sat != 0) atomicAdd(&o->saturated_blocks, sat);
  if (dead != 0) atomicAdd(&o->dead_blocks, dead);
  if (clamps != 0) atomicAdd(&o->scale_clamps, clamps);
  if (scaled != 0) atomicAdd(&o->scaled_blocks, scaled);
  if (log2_sum != 0) atomicAdd(&o->log2_sum, static_cast<unsigned long long>(log2_sum));
  if (max_enc != 0u) atomicMax(&o->log2_max_enc, max_enc);
  if (min_enc != 0u) atomicMax(&o->log2_min_enc, min_enc);
}

// 16 consecutive values as an exact pairwise subtree ((v0 + v1) + (v2 +
// v3)) + ...; missing items are the +0.0 padding.
__device__ __forceinline__ double Pairwise16(double (&v)[16]) {
#pragma unroll
  for (uint32_t s = 1; s < 16; s <<= 1) {
#pragma unroll
    for (uint32_t i = 0; i < 16; i += 2 * s) v[i] = __dadd_rn(v[i], v[i + s]);
  }
  return v[0];
}

// Step 5 per segment: thread j folds items [16j, 16j + 16), PairTree the rest.
__global__ void __launch_bounds__(kPairTreeThreads) SegKernel(Launch l) {
  __shared__ double sh[kPairTreeThreads];
  constexpr uint32_t kPer = kSegItems / kPairTreeThreads;
  const BlockDesc d = l.descs[blockIdx.y];
  for (uint64_t s = blockIdx.x; s < d.n_segs; s += gridDim.x) {
    double sq[kPer], err[kPer], src[kPer];
#pragma unroll
    for (uint32_t i = 0; i < kPer; ++i) {
      const uint64_t item = s * kSegItems + threadIdx.x * kPer + i;
      const Sums v = item < d.n_items ? l.item_sums[d.first_item + item] : Sums{0.0, 0.0, 0.0};
      sq[i] = v.sq;
      err[i] = v.err;
      src[i] = v.src;
    }
    Sums out;
    out.sq = PairTree(sh, Pairwise16(sq));
    out.err = PairTree(sh, Pairwise16(err));
    out.src = PairTree(sh, Pairwise16(src));
    if (threadIdx.x == 0) l.seg_sums[d.first_seg + s] = out;
  }
}

// Steps 5 (over segments), 5a and 6, one thread.
__global__ void FinalKernel(Launch l) {
  BlockStats out{};
  uint64_t nans = 0;
  bool any_log2 = false;
  for (uint32_t k = 0; k < l.n_tensors; ++k) {
    const BlockDesc d = l.descs[k];
    if (d.numel == 0) continue;  // adds +0.0 and no blocks (nor has_source), as on the CPU
    const Counters c = l.counters[k];
    Tree sq, err, src;
    for (uint64_t s = 0; s < d.n_segs; ++s) {
      const Sums v = l.seg_sums[d.first_seg + s];
      sq.Push(v.sq);
      err.Push(v.err);
      src.Push(v.src);
    }
    const double g = fabs(d.global_scale);
    out.sumsq = __dadd_rn(out.sumsq, __dmul_rn(sq.Finish(), __dmul_rn(g, g)));
    const double amax = __dmul_rn(__longlong_as_double(static_cast<long long>(c.amax_bits)), g);
    out.amax = amax > out.amax ? amax : out.amax;
    if (d.source != nullptr) {
      out.has_source = true;
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

template <BlockFormat F, bool kSource>
cudaError_t LaunchItems(const Launch& l, const Group& g, cudaStream_t st) {
  Launch copy = l;
  uint32_t first = g.first;
  void* args[] = {&copy, &first};
  const dim3 grid(Grid((g.max_items + kWarpsPerBlock - 1) / kWarpsPerBlock, l.max_grid), g.count);
  return cudaLaunchKernel(reinterpret_cast<const void*>(&ItemKernel<F, kSource>), grid,
                          dim3(kThreads), args, 0, st);
}

template <BlockFormat F>
cudaError_t LaunchFormat(const Launch& l, const Group& g, cudaStream_t st) {
  return g.source ? LaunchItems<F, true>(l, g, st) : LaunchItems<F, false>(l, g, st);
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
  for (uint32_t i = 0; i < l.n_groups && e == cudaSuccess; ++i) e = LaunchGroup(l, l.groups[i], st);
  if (e == cudaSuccess && l.n_tensors > 0) {
    e = cudaLaunchKernel(
        reinterpret_cast<const void*>(&BlockKernel),
        dim3(Grid((l.max_blocks + kThreads - 1) / kThreads, l.max_grid), l.n_tensors),
        dim3(kThreads), args, 0, st);
  }
  if (e == cudaSuccess && l.n_tensors > 0) {
    e = cudaLaunchKernel(reinterpret_cast<const void*>(&SegKernel),
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
