// Launchers of the block-scaled statistics kernels (internal): the plain
// structs shared by the host code (gpu_block_stats.cc) and the kernels
// (block_stats_kernels.cu). The per-item arithmetic is block_item_math.h.
#pragma once

#include <cstdint>

#include "gnmr/block_tensor.h"
#include "kernels/cuda/block_item_math.h"

namespace gnmr::cuda::blk {

// A segment: up to kSegItems items of one tensor, an aligned subtree of its
// item tree (stats_order.h step 5), as in stats_kernels.h.
constexpr uint64_t kSegItems = 4096;

// The source sums (error, source) of one item or segment.
struct Sums {
  double err, src;
};

// A tensor's order-free figures, accumulated with atomics (zeroed before
// every launch). The log2 extremes are stored biased so that 0 means
// "none" and both are maxima: max_enc = log2 + kLog2Bias, min_enc =
// kLog2Bias - log2.
constexpr int32_t kLog2Bias = 1024;
struct Counters {
  unsigned long long nonfinite, nans, zero_codes, saturated, underflow, amax_bits;
  unsigned long long saturated_blocks, dead_blocks, scale_clamps, scaled_blocks;
  unsigned long long log2_sum;  // two's complement int64, summed modulo 2^64
  unsigned int log2_max_enc, log2_min_enc;
};

// Launch groups over `order` (tensor indices, contiguous per group): the
// block kernel runs once per format (`source` false: every non-empty
// tensor of it), the item kernel once per format for the tensors with a
// source (`source` true).
struct Group {
  BlockFormat format;
  bool source;
  uint32_t first, count;  // into `order`
  uint64_t max_items;     // of its tensors
  uint64_t max_blocks;
};

struct Launch {
  const BlockDesc* descs;  // device, n_tensors
  const uint32_t* order;   // device, grouped tensor indices
  Sums* item_sums;         // device, total items (err, src; tensors with a source)
  Sums* seg_sums;          // device, total segments
  double* block_partials;  // device, total blocks: P of each block, grid order
  double* bseg_sums;       // device, total block segments
  uint32_t* flags;         // device, ceil(total blocks / 8) words, zeroed
  Counters* counters;      // device, n_tensors, zeroed
  BlockStats* out;         // device, one result
  uint32_t n_tensors;
  uint64_t max_segs, max_bsegs;  // over the tensors
  const Group* groups;           // host
  uint32_t n_groups;
  uint32_t max_grid;  // blocks per launch dimension x (persistent grid)
};

// cudaSuccess (0) if the kernels have code for the current device, else
// the cudaError_t as int (cudaErrorNoKernelImageForDevice: not built for it).
int CheckBlockKernelImage();

// Enqueues the item (tensors with a source), block, segment and final kernels on `stream`; the
// cudaError_t of the first failed launch as int (0: success).
int LaunchBlockStats(const Launch& l, void* stream);

}  // namespace gnmr::cuda::blk
