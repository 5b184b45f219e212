// Tensors as the client library sees them, and their per-unit statistics
// (docs/statistics.md, "What a rank computes per unit"). Public header:
// installed as <gnmr/tensor.h>.
//
// A TensorRef is a non-owning view: the caller keeps the memory alive and
// may point a unit at new memory at any time (frameworks reallocate
// gradients), see gnmr::Client::SetTensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

namespace gnmr {

// Element formats. The values equal gnmr.v1.DType on the wire.
enum class DType : uint8_t {
  kFp32 = 1,
  kBf16 = 2,
  kFp16 = 3,
  kFp8E4M3 = 4,  // e4m3fn: no infinities, NaN = S.1111.111
  kFp8E5M2 = 5,
};

// "fp32", "bf16", ...; "unknown" for a value outside the enum.
inline const char* DTypeName(DType d) {
  switch (d) {
    case DType::kFp32:
      return "fp32";
    case DType::kBf16:
      return "bf16";
    case DType::kFp16:
      return "fp16";
    case DType::kFp8E4M3:
      return "fp8_e4m3fn";
    case DType::kFp8E5M2:
      return "fp8_e5m2";
  }
  return "unknown";
}

// Bytes per element; 0 for a value outside the enum.
inline size_t DTypeSize(DType d) {
  switch (d) {
    case DType::kFp32:
      return 4;
    case DType::kBf16:
    case DType::kFp16:
      return 2;
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      return 1;
  }
  return 0;
}

// Where a tensor lives: kHostDevice, or a CUDA device ordinal (>= 0; the GPU
// path arrives with the CUDA kernels).
constexpr int32_t kHostDevice = -1;

// TensorRef::saturation_magnitude for "the format's largest finite
// magnitude" (+Inf).
constexpr float kSaturationAtFormatMax = std::numeric_limits<float>::infinity();

struct TensorRef {
  const void* data = nullptr;  // any alignment; may be null when numel == 0
  uint64_t numel = 0;
  DType dtype = DType::kFp32;
  int32_t device = kHostDevice;
  // fp8 only: the real value of an element is stored * scale_inv.
  float scale_inv = 1.0f;
  // fp8 only, optional: where the current scale_inv lives, read at every
  // computation instead of `scale_inv` (FP8 recipes rescale every step; for
  // a device tensor this is device memory of its device, e.g. the
  // framework's scale_inv tensor, read by the kernel on the stream, so
  // graph replays see each step's value; for a host tensor, host memory
  // read during Observe). Must stay valid while the unit is registered. A
  // value that is not finite when read makes the unit's sumsq NaN
  // (kernels/stats_order.h step 5a).
  const float* scale_inv_ptr = nullptr;
  // Saturation counting (UnitStats::saturated), for forward tensors such as
  // a quantizer's stored codes; gradient tensors leave it off. Compared on
  // the magnitude bit pattern, so NaN/Inf are never counted, -x counts as x,
  // and, for fp8, scale_inv plays no part (the stored code is compared).
  // - 0 (default, +0 or -0): not counted (`saturated` gets 0 from this
  //   tensor, and the statistics run exactly the code they run without it).
  // - kSaturationAtFormatMax (+Inf): count elements at the format's largest
  //   finite magnitude: fp8 e4m3fn 0x7E (448), e5m2 0x7B (57344), fp16
  //   65504, bf16 0x7F7F, fp32 FLT_MAX.
  // - A finite m > 0 (fake-quantized codes in fp32/bf16/fp16, or an fp8
  //   threshold in stored units): count finite elements with |x| >= m',
  //   where m' is m rounded up into the tensor's format (the least finite
  //   magnitude of the format that is >= m; subnormals included). Since
  //   every element is a value of the format, this is exactly |x| >= m.
  //   An m above the format's largest finite magnitude counts nothing.
  // - Negative or NaN: InvalidArgument.
  // Device tensors: read when the table is set (GpuStats::SetTable), like
  // the dtype.
  float saturation_magnitude = 0.0f;
};

// Statistics of one unit (all its tensors) at one step.
struct UnitStats {
  // Sum of x^2 in fp64, in the canonical order of kernels/stats_order.h.
  // NaN if any element is NaN, else +Inf if any element is infinite.
  double sumsq = 0.0;
  double amax = 0.0;       // max |x| over finite elements (0 if none)
  uint64_t nonfinite = 0;  // NaN and Inf elements
  uint64_t zeros = 0;      // exact zeros (+0 and -0)
  // Finite elements at or above the saturation magnitude of their tensor
  // (TensorRef::saturation_magnitude); 0 from tensors that do not count.
  uint64_t saturated = 0;
  uint64_t numel = 0;
};

}  // namespace gnmr
