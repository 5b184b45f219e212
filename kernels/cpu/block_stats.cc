// Statistics of block-scaled tensors on the CPU (kernels/block_stats.h): the
// checks, the ISA dispatch and the combination of a unit's tensors. The
// passes themselves are block_kernels.cc.
#include "kernels/block_stats.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/cpu/block_kernels.h"
#include "kernels/stats_order.h"

namespace gnmr::cpu {
namespace {

Status Compute(BlockPassFn pass, const BlockTensorRef* tensors, size_t count, BlockStats* out) {
  if (count > 0 && tensors == nullptr) return InvalidArgument("block tensor list is null");
  for (size_t i = 0; i < count; ++i) {
    Status s = CheckBlockTensor(tensors[i]);
    if (!s.ok()) return Status(s.code(), "tensor " + std::to_string(i) + ": " + s.message());
  }
  BlockStats u;
  uint64_t nans = 0;
  for (size_t i = 0; i < count; ++i) {
    const BlockTensorRef& t = tensors[i];
    u.has_source = u.has_source || t.source != nullptr;
    if (t.rows * t.cols == 0) continue;  // adds +0.0 and no blocks
    ElementResult e;
    BlockResult b;
    pass(t, &e, &b);
    const double g = std::fabs(static_cast<double>(t.global_scale));
    u.numel += t.rows * t.cols;
    u.sumsq = u.sumsq + e.sum * (g * g);  // stats_order.h step 5a, then step 6
    u.amax = e.amax * g > u.amax ? e.amax * g : u.amax;
    u.nonfinite += e.nonfinite;
    nans += e.nans;
    u.zero_codes += e.zero_codes;
    u.saturated += e.saturated;
    if (t.source != nullptr) {
      u.underflow += e.underflow;
      u.error_sumsq = u.error_sumsq + e.error;
      u.source_sumsq = u.source_sumsq + e.source;
    }
    u.blocks += b.blocks;
    u.saturated_blocks += b.saturated;
    u.dead_blocks += b.dead;
    u.scale_clamps += b.clamps;
    if (b.scaled > 0) {
      u.scale_log2_min =
          u.scaled_blocks == 0 || b.log2_min < u.scale_log2_min ? b.log2_min : u.scale_log2_min;
      u.scale_log2_max =
          u.scaled_blocks == 0 || b.log2_max > u.scale_log2_max ? b.log2_max : u.scale_log2_max;
      u.scale_log2_sum += b.log2_sum;
      u.scaled_blocks += b.scaled;
    }
  }
  if (nans > 0) {
    std::memcpy(&u.sumsq, &stats_order::kCanonicalNanBits, sizeof u.sumsq);
  } else if (u.nonfinite > 0) {
    u.sumsq = std::numeric_limits<double>::infinity();
  }
  *out = u;
  return Status::Ok();
}

}  // namespace

BlockPassFn BlockPassFor(Isa isa) {
  if (!IsaAvailable(isa)) return nullptr;
  switch (isa) {
#if defined(GNMR_CPU_HAVE_AVX2)
    case Isa::kAvx2:
      return &isa_avx2::BlockPass;
#endif
#if defined(GNMR_CPU_HAVE_AVX512)
    case Isa::kAvx512:
      return &isa_avx512::BlockPass;
#endif
    default:
      return &isa_baseline::BlockPass;
  }
}

Status ComputeBlockStats(const BlockTensorRef* tensors, size_t count, BlockStats* out) {
  static const BlockPassFn best = BlockPassFor(SelectedIsa());
  return Compute(best, tensors, count, out);
}

Status ComputeBlockStatsWithIsa(Isa isa, const BlockTensorRef* tensors, size_t count,
                                BlockStats* out) {
  const BlockPassFn fn = BlockPassFor(isa);
  if (fn == nullptr) {
    return Status(StatusCode::kUnimplemented, std::string("ISA not available: ") + IsaName(isa));
  }
  return Compute(fn, tensors, count, out);
}

}  // namespace gnmr::cpu
