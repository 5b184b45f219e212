// The vectorized inner kernel of the CPU statistics, built once per x86
// instruction set (baseline SSE2, AVX2, AVX-512) and picked at run time.
//
// Every build runs the same IEEE operations in the same order (products of
// decoded elements are exact, so FMA contraction cannot change a result), so
// all of them are bit-identical; the tests check it. item_kernels.cc is
// compiled once per ISA with GNMR_CPU_ISA naming its namespace; it shares no
// inline function with other translation units, so the linker can never
// substitute an AVX-512 copy of a helper into the baseline path.
#pragma once

#include <cstdint>

#include "gnmr/tensor.h"
#include "kernels/cpu_isa.h"

namespace gnmr::cpu {

// Order-independent figures accumulated over work items.
struct ItemCounters {
  double amax = 0.0;  // max |x| over finite elements
  uint64_t zeros = 0;
  uint64_t nonfinite = 0;
  uint64_t nans = 0;
  uint64_t saturated = 0;  // finite elements with pattern >= the threshold
};

// Processes the `numel` elements of a tensor of any DType (fp8 unscaled) at `data` (any
// alignment) as ceil(numel / 4096) work items (stats_order.h), the last one
// possibly partial: writes item k's partial (steps 1-4) to partials[k],
// folds the counters into `c` and returns the number of items. Callers
// pass at most a few items at a time; `partials` must hold them all.
// `saturation`: the tensor's saturation pattern (kernels/saturation.h);
// 0 runs the code without the count (each path is built both ways).
using ItemsFn = uint64_t (*)(DType dtype, const unsigned char* data, uint64_t numel,
                             uint32_t saturation, double* partials, ItemCounters* c);

namespace isa_baseline {
uint64_t Items(DType, const unsigned char*, uint64_t, uint32_t, double*, ItemCounters*);
}
namespace isa_avx2 {
uint64_t Items(DType, const unsigned char*, uint64_t, uint32_t, double*, ItemCounters*);
}
namespace isa_avx512 {
uint64_t Items(DType, const unsigned char*, uint64_t, uint32_t, double*, ItemCounters*);
}

ItemsFn ItemsFor(Isa isa);  // null if not available

}  // namespace gnmr::cpu
