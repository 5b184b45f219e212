// CPU statistics: checks, ISA dispatch, tensor and unit combination.
//
// Work items go to the vectorized kernel of the best ISA (see
// item_kernels.h) in chunks of 64, and their partials enter the streaming
// item tree (stats_order.h step 5). Nothing here allocates.
#include "kernels/cpu_stats.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/cpu/item_kernels.h"
#include "kernels/saturation.h"
#include "kernels/stats_order.h"

namespace gnmr::cpu {
namespace {

using stats_order::kItemElems;

constexpr uint64_t kChunkItems = 64;

bool IsFp8(DType d) { return d == DType::kFp8E4M3 || d == DType::kFp8E5M2; }

// float -> double without floating-point arithmetic on a subnormal input:
// under DAZ a plain conversion would read a subnormal scale_inv as 0 (the
// GPU path does not; stats_order.h step 1's rule, applied to the scale).
double ExactDouble(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  if ((b & 0x7f800000u) != 0) return static_cast<double>(f);  // normal, Inf, NaN
  const double m = static_cast<double>(static_cast<int32_t>(b & 0x7fffffu)) * 0x1p-149;
  return (b >> 31) != 0 ? -m : m;
}

struct TensorResult {
  double sum = 0.0;  // finite elements only
  ItemCounters counters;
};

// `scale_inv`: fp8 only, finite (the value Compute read for this call).
TensorResult TensorStats(ItemsFn items_fn, const TensorRef& ref, float scale_inv) {
  const unsigned char* data = static_cast<const unsigned char*>(ref.data);
  constexpr uint64_t kChunk = kChunkItems * kItemElems;
  TensorResult t;
  stats_order::ItemTree tree;
  double partials[kChunkItems];
  const uint32_t sat = saturation::Threshold(ref.dtype, ref.saturation_magnitude);
  for (uint64_t first = 0; first < ref.numel; first += kChunk) {
    const uint64_t n = ref.numel - first < kChunk ? ref.numel - first : kChunk;
    const uint64_t items =
        items_fn(ref.dtype, data + first * DTypeSize(ref.dtype), n, sat, partials, &t.counters);
    for (uint64_t i = 0; i < items; ++i) tree.Push(partials[i]);
  }
  t.sum = tree.Finish();
  if (IsFp8(ref.dtype)) {  // stats_order.h step 5a
    const double s = std::fabs(ExactDouble(scale_inv));
    t.sum = t.sum * (s * s);
    t.counters.amax = t.counters.amax * s;
  }
  return t;
}

Status Compute(ItemsFn items_fn, const TensorRef* tensors, size_t count, UnitStats* out) {
  GNMR_RETURN_IF_ERROR(CheckTensors(tensors, count));
  UnitStats u;
  uint64_t nans = 0;
  bool undefined = false;  // an fp8 scale read through scale_inv_ptr was NaN/Inf
  for (size_t i = 0; i < count; ++i) {
    const TensorRef& ref = tensors[i];
    if (ref.numel == 0) continue;  // adds +0.0
    float scale_inv = ref.scale_inv;
    if (IsFp8(ref.dtype) && ref.scale_inv_ptr != nullptr) scale_inv = *ref.scale_inv_ptr;
    const bool defined = !IsFp8(ref.dtype) || std::isfinite(scale_inv);
    const TensorResult t = TensorStats(items_fn, ref, defined ? scale_inv : 1.0f);
    if (defined) {
      u.sumsq = u.sumsq + t.sum;
      u.amax = u.amax > t.counters.amax ? u.amax : t.counters.amax;
    } else {
      undefined = true;  // stats_order.h step 5a
    }
    u.nonfinite += t.counters.nonfinite;
    u.zeros += t.counters.zeros;
    u.saturated += t.counters.saturated;
    u.numel += ref.numel;
    nans += t.counters.nans;
  }
  if (nans > 0 || undefined) {
    std::memcpy(&u.sumsq, &stats_order::kCanonicalNanBits, sizeof u.sumsq);
  } else if (u.nonfinite > 0) {
    u.sumsq = std::numeric_limits<double>::infinity();
  }
  *out = u;
  return Status::Ok();
}

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kBaseline:
      return "baseline";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

bool IsaAvailable(Isa isa) {
  switch (isa) {
    case Isa::kBaseline:
      return true;
    case Isa::kAvx2:
#if defined(GNMR_CPU_HAVE_AVX2)
      return __builtin_cpu_supports("avx2");
#else
      return false;
#endif
    case Isa::kAvx512:
#if defined(GNMR_CPU_HAVE_AVX512)
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx2");
#else
      return false;
#endif
  }
  return false;
}

Isa SelectedIsa() {
  static const Isa selected = IsaAvailable(Isa::kAvx512) ? Isa::kAvx512
                              : IsaAvailable(Isa::kAvx2) ? Isa::kAvx2
                                                         : Isa::kBaseline;
  return selected;
}

ItemsFn ItemsFor(Isa isa) {
  if (!IsaAvailable(isa)) return nullptr;
  switch (isa) {
#if defined(GNMR_CPU_HAVE_AVX2)
    case Isa::kAvx2:
      return &isa_avx2::Items;
#endif
#if defined(GNMR_CPU_HAVE_AVX512)
    case Isa::kAvx512:
      return &isa_avx512::Items;
#endif
    default:
      return &isa_baseline::Items;
  }
}

Status CheckTensors(const TensorRef* tensors, size_t count) {
  if (count > 0 && tensors == nullptr) {
    return InvalidArgument("tensor list is null");
  }
  // Messages are built only on error: this runs on the training thread.
  auto error = [](StatusCode code, size_t i, const std::string& what) {
    return Status(code, "tensor " + std::to_string(i) + ": " + what);
  };
  for (size_t i = 0; i < count; ++i) {
    const TensorRef& t = tensors[i];
    if (t.device != kHostDevice) {
      return error(StatusCode::kUnimplemented, i, "device tensors need the CUDA statistics path");
    }
    switch (t.dtype) {
      case DType::kFp32:
      case DType::kBf16:
      case DType::kFp16:
        break;
      case DType::kFp8E4M3:
      case DType::kFp8E5M2:
        if (t.scale_inv_ptr != nullptr) {  // read (and judged) at each computation
          if (reinterpret_cast<uintptr_t>(t.scale_inv_ptr) % alignof(float) != 0) {
            return error(StatusCode::kInvalidArgument, i, "scale_inv_ptr is not 4-byte aligned");
          }
        } else if (!std::isfinite(t.scale_inv)) {
          return error(StatusCode::kInvalidArgument, i,
                       std::string(DTypeName(t.dtype)) + " scale_inv is not finite");
        }
        break;
      default:
        return error(StatusCode::kInvalidArgument, i,
                     "unknown dtype " + std::to_string(static_cast<int>(t.dtype)));
    }
    if (!saturation::ValidMagnitude(t.saturation_magnitude)) {
      return error(StatusCode::kInvalidArgument, i, "saturation_magnitude is negative or NaN");
    }
    if (t.numel > 0 && t.data == nullptr) {
      return error(StatusCode::kInvalidArgument, i,
                   "data is null but numel is " + std::to_string(t.numel));
    }
  }
  return Status::Ok();
}

Status ComputeStats(const TensorRef* tensors, size_t count, UnitStats* out) {
  static const ItemsFn best = ItemsFor(SelectedIsa());
  return Compute(best, tensors, count, out);
}

Status ComputeStatsWithIsa(Isa isa, const TensorRef* tensors, size_t count, UnitStats* out) {
  const ItemsFn fn = ItemsFor(isa);
  if (fn == nullptr) {
    return Status(StatusCode::kUnimplemented, std::string("ISA not available: ") + IsaName(isa));
  }
  return Compute(fn, tensors, count, out);
}

}  // namespace gnmr::cpu
