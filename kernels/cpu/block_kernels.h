// The passes of the block-scaled statistics (block_kernels.cc), built once
// per x86 instruction set like the item kernels (item_kernels.h) and picked
// at run time. Every build runs the same IEEE operations in the same order
// per lane, so all of them are bit-identical; the tests check it.
#pragma once

#include <cstdint>
#include <limits>

#include "gnmr/block_tensor.h"
#include "kernels/cpu_isa.h"

namespace gnmr::cpu {

// One tensor's element pass: sums in the canonical order, before
// global_scale (docs/statistics.md, "Canonical order").
struct ElementResult {
  double sum = 0.0;     // squares of the finite dequantized values
  double error = 0.0;   // with a source: (x - x_hat * g)^2
  double source = 0.0;  // with a source: x^2
  double amax = 0.0;    // of the finite dequantized values, before g
  uint64_t nans = 0;
  uint64_t nonfinite = 0;
  uint64_t zero_codes = 0;
  uint64_t saturated = 0;
  uint64_t underflow = 0;
};

// One tensor's block pass (integers: no order).
struct BlockResult {
  uint64_t blocks = 0, saturated = 0, dead = 0, clamps = 0, scaled = 0;
  int32_t log2_min = std::numeric_limits<int32_t>::max();
  int32_t log2_max = std::numeric_limits<int32_t>::min();
  int64_t log2_sum = 0;
};

// Both passes over one valid (CheckBlockTensor), non-empty tensor.
using BlockPassFn = void (*)(const BlockTensorRef& t, ElementResult* e, BlockResult* b);

namespace isa_baseline {
void BlockPass(const BlockTensorRef&, ElementResult*, BlockResult*);
}
namespace isa_avx2 {
void BlockPass(const BlockTensorRef&, ElementResult*, BlockResult*);
}
namespace isa_avx512 {
void BlockPass(const BlockTensorRef&, ElementResult*, BlockResult*);
}

BlockPassFn BlockPassFor(Isa isa);  // null if not available

}  // namespace gnmr::cpu
