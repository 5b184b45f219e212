// Tensors as the client library sees them, and their per-unit statistics
// (SPEC section 5). Public header: installed as <gnmr/tensor.h>.
//
// A TensorRef is a non-owning view: the caller keeps the memory alive and
// may point a unit at new memory at any time (frameworks reallocate
// gradients), see gnmr::Client::SetTensors.
#pragma once

#include <cstddef>
#include <cstdint>

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
};

// Statistics of one unit (all its tensors) at one step.
struct UnitStats {
  // Sum of x^2 in fp64, in the canonical order of kernels/stats_order.h.
  // NaN if any element is NaN, else +Inf if any element is infinite.
  double sumsq = 0.0;
  double amax = 0.0;       // max |x| over finite elements (0 if none)
  uint64_t nonfinite = 0;  // NaN and Inf elements
  uint64_t zeros = 0;      // exact zeros (+0 and -0)
  uint64_t numel = 0;
};

}  // namespace gnmr
