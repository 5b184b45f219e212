// Per-unit statistics (gradient and forward tensors) on the CPU (docs/statistics.md, "What a rank
// computes per unit"), bit-identical to the GPU path: sumsq follows the canonical order of
// kernels/stats_order.h.
//
// Runs on the calling thread, allocates nothing, never logs or throws.
#pragma once

#include <cstddef>

#include "gnmr/status.h"
#include "gnmr/tensor.h"
#include "kernels/cpu_isa.h"

namespace gnmr::cpu {

// OK if the CPU path can compute statistics of these tensors: host memory,
// any DType, data non-null when numel > 0, for fp8 a finite scale_inv or an
// aligned scale_inv_ptr (whose value is read by each computation; a NaN/Inf
// there gives a NaN sumsq, stats_order.h step 5a), a saturation_magnitude
// that is neither negative nor NaN. InvalidArgument otherwise, naming the tensor;
// Unimplemented for device tensors.
Status CheckTensors(const TensorRef* tensors, size_t count);

// Statistics of one unit made of `count` tensors, in tensor order. Checks
// the tensors first (CheckTensors); `out` is untouched on error.
// Uses the best kernel this CPU supports (SelectedIsa()).
Status ComputeStats(const TensorRef* tensors, size_t count, UnitStats* out);

// The same with a given kernel build; Unimplemented if it is not available.
// For tests: every build must give bit-identical results.
Status ComputeStatsWithIsa(Isa isa, const TensorRef* tensors, size_t count, UnitStats* out);

}  // namespace gnmr::cpu
