// Device helpers for step 5 of kernels/stats_order.h (the item tree),
// shared by the segment / unit kernels (reduce_kernels.cu) and the
// block-scaled reduction (block_stats_kernels.cu). CUDA only.
#pragma once

#include <cstdint>

#include "kernels/cuda/item_math.h"

namespace gnmr::cuda {

// Threads of a PairTree block: one per 16-item subtree of a 4096-item segment.
constexpr uint32_t kPairTreeThreads = 256;

// stats_order.h ItemTree, on the device.
struct Tree {
  double value[65];
  int level[65];
  int depth = 0;
  __device__ void Push(double v) {
    int l = 0;
    while (depth > 0 && level[depth - 1] == l) {
      v = __dadd_rn(value[depth - 1], v);
      --depth;
      ++l;
    }
    value[depth] = v;
    level[depth] = l;
    ++depth;
  }
  __device__ double Finish() const {
    if (depth == 0) return 0.0;
    double acc = value[depth - 1];
    for (int i = depth - 2; i >= 0; --i) acc = __dadd_rn(value[i], acc);
    return acc;
  }
};

// Step 5 inside a segment (stats_order.h): the 256 aligned 16-item subtrees
// in sh[0..256) combined as adjacent pairs, level by level: ((B0 + B1) +
// (B2 + B3)) + ..., the item tree's own shape. Threads without items hold
// +0.0, the padding, which never changes a sum. All threads call it.
inline __device__ double PairTree(double* sh, double v) {
  const uint32_t j = threadIdx.x;
  sh[j] = v;
  __syncthreads();
  for (uint32_t s = 1; s < kPairTreeThreads; s <<= 1) {
    if (j % (2 * s) == 0) sh[j] = __dadd_rn(sh[j], sh[j + s]);
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}

// Step 4 (the lane tree) of one warp on layout P (item_math.h): lane 0 of
// the warp gets the item's partial.
template <uint32_t P>
__device__ __forceinline__ double WarpLaneTree(double (&v)[item::kSlots]) {
#pragma unroll
  for (uint32_t level = 0; level < 8; ++level) {
    const uint32_t s = 128u >> level;
    if (item::CrossThread<P>(s)) {
      double partner[item::kSlots] = {};
#pragma unroll
      for (uint32_t i = 0; i < P; ++i) {
        partner[i] = __shfl_down_sync(0xffffffffu, v[i], item::ShuffleDelta<P>(s));
      }
      item::CrossStep<P>(v, partner);
    } else {
      item::InThreadStep<P>(s, v);
    }
  }
  return v[0];  // lane 0 of the warp holds the item's partial
}

}  // namespace gnmr::cuda
