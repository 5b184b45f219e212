// Reference implementations of the unit statistics, for tests (of the CPU
// path now, of the CUDA kernels later). Slow and obvious on purpose; they
// share no code with kernels/cpu/cpu_stats.cc.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gnmr/tensor.h"

namespace gnmr::cpu {

// The canonical order of kernels/stats_order.h written out literally: a
// lane array per work item, the strided lane tree, the recursive item tree
// over a vector of partials. Decodes values with ordinary float
// conversions (so it assumes the default, non-FTZ/DAZ floating-point mode).
// Must be bit-identical to ComputeStats. Tensors are assumed valid.
UnitStats CanonicalStatsNaive(const TensorRef* tensors, size_t count);

// Order-free figures: the sum of squares of the finite elements in
// long double, plus counts and amax. For accuracy comparisons.
struct ReferenceStats {
  long double sumsq_finite = 0.0L;
  double amax = 0.0;
  uint64_t nans = 0;
  uint64_t infs = 0;
  uint64_t zeros = 0;
  uint64_t saturated = 0;  // finite |unscaled x| >= SaturationValue(t)
  uint64_t numel = 0;
};
ReferenceStats ComputeReferenceStats(const TensorRef* tensors, size_t count);

// The value of element i as a double (NaN and Inf included).
double ElementValue(const TensorRef& t, uint64_t i);

// The magnitude an element of t (fp8: unscaled) must reach to count as
// saturated, by the textbook reading of TensorRef::saturation_magnitude:
// +Inf (not counted) for 0, the format's largest finite value written out
// for kSaturationAtFormatMax, else the magnitude itself (every element is
// a value of the format, so |x| >= m is |x| >= m rounded up into it).
double SaturationValue(const TensorRef& t);

}  // namespace gnmr::cpu
