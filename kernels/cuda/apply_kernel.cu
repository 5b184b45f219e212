// The apply kernel (GpuStats::ApplyScale): per-unit scale (clip) or zero
// (skip) of the registered tensors, in place. Rounding rules:
// kernels/gpu_stats.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "kernels/cuda/stats_kernels.h"

namespace gnmr::cuda {
namespace {

constexpr uint32_t kLanes = 256, kRows = 16;

__device__ __forceinline__ uint32_t SizeOf(uint32_t dtype) {
  return dtype == 1 ? 4u : dtype <= 3 ? 2u : 1u;
}

__device__ __forceinline__ uint32_t LoadBits(const unsigned char* p, uint32_t size, bool aligned) {
  if (aligned) {
    if (size == 4) return *reinterpret_cast<const uint32_t*>(p);
    if (size == 2) return *reinterpret_cast<const uint16_t*>(p);
    return *p;
  }
  uint32_t v = 0;
  for (uint32_t b = 0; b < size; ++b) v |= static_cast<uint32_t>(p[b]) << (8 * b);
  return v;
}

__device__ __forceinline__ void StoreBits(unsigned char* p, uint32_t size, bool aligned,
                                          uint32_t v) {
  if (aligned) {
    if (size == 4)
      *reinterpret_cast<uint32_t*>(p) = v;
    else if (size == 2)
      *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(v);
    else
      *p = static_cast<unsigned char>(v);
    return;
  }
  for (uint32_t b = 0; b < size; ++b) p[b] = static_cast<unsigned char>(v >> (8 * b));
}

__device__ __forceinline__ uint32_t ScaleBits(uint32_t dtype, uint32_t b, float s) {
  if (s == 0.0f) return 0u;
  switch (dtype) {
    case 2: {
      const float p = __fmul_rn(__uint_as_float(b << 16), s);
      return __bfloat16_as_ushort(__float2bfloat16_rn(p));
    }
    case 3: {
      const float p = __fmul_rn(__half2float(__ushort_as_half(static_cast<unsigned short>(b))), s);
      return __half_as_ushort(__float2half_rn(p));
    }
    case 4:
    case 5: {
      const __nv_fp8_interpretation_t k = dtype == 4 ? __NV_E4M3 : __NV_E5M2;
      if (dtype == 5 && (b & 0x7fu) == 0x7cu) return b;  // Inf stays Inf
      const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), k);
      const float p = __fmul_rn(__half2float(__half(h)), s);
      return __nv_cvt_float_to_fp8(p, __NV_SATFINITE, k);
    }
    default: {
      // NaN stays that NaN, quieted (as the host's x * s does; the device's
      // multiply would return its canonical NaN instead).
      if ((b & 0x7fffffffu) > 0x7f800000u) return b | 0x00400000u;
      return __float_as_uint(__fmul_rn(__uint_as_float(b), s));
    }
  }
}

// One block per item: each thread loads its 16 elements first (16 loads in
// flight), then scales and stores them.
__global__ void __launch_bounds__(256) ApplyKernel(Tables t, const float* scale) {
  const uint32_t j = threadIdx.x;
  for (uint64_t k = blockIdx.x; k < t.n_items; k += gridDim.x) {
    const DevItem it = t.items[k];
    const DevTensor& ten = t.tensors[it.tensor];
    const float s = scale[ten.unit];
    if (s == 1.0f) continue;
    const uint32_t size = SizeOf(ten.dtype);
    unsigned char* base = const_cast<unsigned char*>(t.ptrs[it.tensor]) + it.offset * size;
    const bool aligned = (reinterpret_cast<uintptr_t>(t.ptrs[it.tensor]) % size) == 0;
    uint32_t bits[kRows];
#pragma unroll
    for (uint32_t r = 0; r < kRows; ++r) {
      const uint32_t i = r * kLanes + j;
      bits[r] = i < it.n ? LoadBits(base + static_cast<uint64_t>(i) * size, size, aligned) : 0u;
    }
#pragma unroll
    for (uint32_t r = 0; r < kRows; ++r) {
      const uint32_t i = r * kLanes + j;
      if (i < it.n) {
        StoreBits(base + static_cast<uint64_t>(i) * size, size, aligned,
                  ScaleBits(ten.dtype, bits[r], s));
      }
    }
  }
}

}  // namespace

int LaunchApply(const Tables& t, const LaunchConfig& c, const float* unit_scale, void* stream) {
  if (t.n_items == 0) return 0;
  Tables copy = t;
  void* args[] = {&copy, &unit_scale};
  const uint32_t blocks =
      static_cast<uint32_t>(t.n_items < c.max_blocks ? t.n_items : c.max_blocks);
  return static_cast<int>(cudaLaunchKernel(reinterpret_cast<const void*>(&ApplyKernel),
                                           dim3(blocks), dim3(256), args, 0,
                                           static_cast<cudaStream_t>(stream)));
}

}  // namespace gnmr::cuda
