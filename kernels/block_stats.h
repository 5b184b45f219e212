// Statistics of block-scaled tensors on the CPU (docs/statistics.md,
// "Block-scaled formats"), bit-identical to the CUDA kernels: sumsq and the
// source sums follow the canonical order of kernels/stats_order.h over the
// dequantized elements.
//
// Runs on the calling thread, allocates nothing, never logs or throws.
#pragma once

#include <cstddef>

#include "gnmr/block_tensor.h"
#include "gnmr/status.h"
#include "kernels/cpu_isa.h"

namespace gnmr::cpu {

// OK if the CPU path can read this tensor; InvalidArgument naming the
// problem otherwise (Unimplemented for a device tensor):
// - a format, layout, scale layout or source dtype outside its enum;
// - data null with rows * cols > 0, or rows * cols above 2^48;
// - E2M1 (MXFP4, NVFP4) with an odd rows * cols;
// - scales null, or a scale tensor whose [scale_rows, scale_cols] does not
//   cover the block grid (compact), or is not exactly the padded grid
//   (swizzled), or holds more than 2^40 entries;
// - kSwizzled with kSquare blocks;
// - fp32 scales (FP8 block) not 4-byte aligned, a source not aligned to
//   its dtype;
// - global_scale not finite, or not 1 for a format other than NVFP4.
// Every message names the tensor's format and layout.
Status CheckBlockTensor(const BlockTensorRef& tensor);

// Statistics of `count` tensors (one unit), in tensor order. Checks every
// tensor first; `out` is untouched on error.
// Uses the best kernel build this CPU supports (SelectedIsa()).
Status ComputeBlockStats(const BlockTensorRef* tensors, size_t count, BlockStats* out);

// The same with a given kernel build; Unimplemented if it is not available.
// For tests: every build must give bit-identical results.
Status ComputeBlockStatsWithIsa(Isa isa, const BlockTensorRef* tensors, size_t count,
                                BlockStats* out);

}  // namespace gnmr::cpu
