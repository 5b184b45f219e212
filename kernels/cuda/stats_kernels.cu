// Statistics and apply kernels (canonical order: kernels/stats_order.h).
// Kept small: no logging, no library headers besides CUDA's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "kernels/cuda/stats_kernels.h"

namespace gnmr::cuda {
namespace {

constexpr uint32_t kLanes = 256, kRows = 16;
constexpr uint64_t kNanBits = 0x7ff8000000000000ull;

struct Fmt {
  uint32_t size, abs_mask, nonfin, nan_min, mant, bias;
  double sub_scale;  // 2^(1 - bias - mant)
};
__device__ __forceinline__ Fmt FmtOf(uint32_t dtype) {
  switch (dtype) {
    case 2: return {2, 0x7fffu, 0x7f80u, 0x7f81u, 7, 127, 0x1p-133};
    case 3: return {2, 0x7fffu, 0x7c00u, 0x7c01u, 10, 15, 0x1p-24};
    case 4: return {1, 0x7fu, 0x7fu, 0x7fu, 3, 7, 0x1p-9};
    case 5: return {1, 0x7fu, 0x7cu, 0x7du, 2, 15, 0x1p-16};
    default: return {4, 0x7fffffffu, 0x7f800000u, 0x7f800001u, 23, 127, 0x1p-149};
  }
}

// |x| of a finite magnitude pattern, exactly, with integer operations and
// an exact int -> double conversion (no FTZ/DAZ effect).
__device__ __forceinline__ double Decode(const Fmt& f, uint32_t a) {
  if (a >= (1u << f.mant)) {
    const uint64_t bits = (static_cast<uint64_t>(a) << (52 - f.mant)) +
                          (static_cast<uint64_t>(1023 - f.bias) << 52);
    return __longlong_as_double(static_cast<long long>(bits));
  }
  return __dmul_rn(static_cast<double>(static_cast<int>(a)), f.sub_scale);
}

__device__ __forceinline__ uint32_t LoadBits(const unsigned char* p, uint32_t size,
                                             bool aligned) {
  if (aligned) {
    if (size == 4) return *reinterpret_cast<const uint32_t*>(p);
    if (size == 2) return *reinterpret_cast<const uint16_t*>(p);
    return *p;
  }
  uint32_t v = 0;
  for (uint32_t b = 0; b < size; ++b) v |= static_cast<uint32_t>(p[b]) << (8 * b);
  return v;
}

// stats_order.h ItemTree, on the device.
struct Tree {
  double value[65];
  int level[65];
  int depth = 0;
  __device__ void Push(double v) {
    int l = 0;
    while (depth > 0 && level[depth - 1] == l) {
      v = __dadd_rn(value[depth - 1], v);
      --depth;
      ++l;
    }
    value[depth] = v;
    level[depth] = l;
    ++depth;
  }
  __device__ double Finish() const {
    if (depth == 0) return 0.0;
    double acc = value[depth - 1];
    for (int i = depth - 2; i >= 0; --i) acc = __dadd_rn(value[i], acc);
    return acc;
  }
};

// Canonical lane tree over sh[0..256) (step 4); all threads call it.
__device__ double LaneTree(double* sh, double v) {
  const uint32_t j = threadIdx.x;
  sh[j] = v;
  __syncthreads();
  for (uint32_t s = kLanes / 2; s >= 1; s >>= 1) {
    if (j < s) sh[j] = __dadd_rn(sh[j], sh[j + s]);
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}

// Step 5 inside a segment (stats_order.h): the 256 aligned 16-item subtrees
// in sh[0..256) combined as adjacent pairs, level by level: ((B0 + B1) +
// (B2 + B3)) + ..., the item tree's own shape (LaneTree's s = 128..1 order
// would add B0 + B128 first). Threads without items hold +0.0, the
// padding, which never changes a sum. All threads call it.
__device__ double PairTree(double* sh, double v) {
  const uint32_t j = threadIdx.x;
  sh[j] = v;
  __syncthreads();
  for (uint32_t s = 1; s < kLanes; s <<= 1) {
    if (j % (2 * s) == 0) sh[j] = __dadd_rn(sh[j], sh[j + s]);
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}

// Integer block reductions (order-independent): results valid in thread 0.
__device__ void ReduceCounts(uint32_t* amax, uint32_t* c0, uint32_t* c1, uint32_t* c2) {
  __shared__ uint32_t w[4][kLanes / 32];
  const uint32_t m = __reduce_max_sync(0xffffffffu, *amax);
  const uint32_t a = __reduce_add_sync(0xffffffffu, *c0);
  const uint32_t b = __reduce_add_sync(0xffffffffu, *c1);
  const uint32_t c = __reduce_add_sync(0xffffffffu, *c2);
  const uint32_t warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
    w[0][warp] = m; w[1][warp] = a; w[2][warp] = b; w[3][warp] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (uint32_t i = 1; i < kLanes / 32; ++i) {
      w[0][0] = max(w[0][0], w[0][i]);
      w[1][0] += w[1][i]; w[2][0] += w[2][i]; w[3][0] += w[3][i];
    }
    *amax = w[0][0]; *c0 = w[1][0]; *c1 = w[2][0]; *c2 = w[3][0];
  }
  __syncthreads();
}

// Steps 1-4: one block per work item, thread j = lane j.
__global__ void __launch_bounds__(256) ItemKernel(Tables t) {
  __shared__ double sh[kLanes];
  const uint32_t j = threadIdx.x;
  for (uint64_t k = blockIdx.x; k < t.n_items; k += gridDim.x) {
    const DevItem it = t.items[k];
    const DevTensor& ten = t.tensors[it.tensor];
    const Fmt f = FmtOf(ten.dtype);
    const unsigned char* base = t.ptrs[it.tensor] + it.offset * f.size;
    const bool aligned = (reinterpret_cast<uintptr_t>(t.ptrs[it.tensor]) % f.size) == 0;
    double lane = 0.0;
    uint32_t amax = 0, zeros = 0, nonfin = 0, nans = 0;
    // All 16 loads first, so each thread has them in flight at once (a load
    // feeding the add of the same iteration left one in flight); then the
    // lane's adds in row order 0..15 (step 3). Rows past the item's end are
    // missing elements: +0.0 for the sum, and not counted.
    uint32_t bits[kRows];
#pragma unroll
    for (uint32_t r = 0; r < kRows; ++r) {
      const uint32_t i = r * kLanes + j;
      bits[r] = i < it.n ? LoadBits(base + static_cast<uint64_t>(i) * f.size, f.size, aligned)
                         : 0u;
    }
#pragma unroll
    for (uint32_t r = 0; r < kRows; ++r) {
      if (r * kLanes + j >= it.n) continue;
      const uint32_t a = bits[r] & f.abs_mask;
      const uint32_t fa = a < f.nonfin ? a : 0u;
      const double m = Decode(f, fa);
      lane = __dadd_rn(lane, __dmul_rn(m, m));
      amax = max(amax, fa);
      zeros += a == 0;
      nonfin += a >= f.nonfin;
      nans += a >= f.nan_min;
    }
    const double partial = LaneTree(sh, lane);
    ReduceCounts(&amax, &zeros, &nonfin, &nans);
    if (j == 0) t.item_out[k] = ItemOut{partial, amax, zeros, nonfin, nans};
  }
}

// Step 5 per segment: thread j folds 16 consecutive items (an aligned
// subtree), then the 256 subtrees are combined by the pairwise tree.
__global__ void __launch_bounds__(256) SegKernel(Tables t) {
  __shared__ double sh[kLanes];
  const uint32_t j = threadIdx.x;
  constexpr uint32_t kPer = kSegItems / kLanes;
  for (uint64_t s = blockIdx.x; s < t.n_segs; s += gridDim.x) {
    const DevSeg seg = t.segs[s];
    Tree tree;
    uint32_t amax = 0, zeros = 0, nonfin = 0, nans = 0;
    for (uint32_t i = j * kPer; i < (j + 1) * kPer && i < seg.n_items; ++i) {
      const ItemOut o = t.item_out[seg.first_item + i];
      tree.Push(o.partial);
      amax = max(amax, o.amax);
      zeros += o.zeros; nonfin += o.nonfinite; nans += o.nans;
    }
    const double sum = PairTree(sh, tree.Finish());
    ReduceCounts(&amax, &zeros, &nonfin, &nans);
    if (j == 0) t.seg_out[s] = SegOut{sum, amax, 0, zeros, nonfin, nans};
  }
}

// Steps 5 (over segments), 5a and 6: one thread per unit.
__global__ void UnitKernel(Tables t) {
  const uint32_t u = blockIdx.x * blockDim.x + threadIdx.x;
  if (u >= t.n_units) return;
  const DevUnit un = t.units[u];
  UnitStats out{};
  uint64_t nans = 0;
  bool undefined = false;  // an fp8 scale read through scale_inv_ptr was NaN/Inf
  for (uint32_t k = 0; k < un.n_tensors; ++k) {
    const DevTensor ten = t.tensors[un.first_tensor + k];
    if (ten.numel == 0) continue;
    const Fmt f = FmtOf(ten.dtype);
    Tree tree;
    uint32_t amax_bits = 0;
    for (uint64_t s = ten.first_seg; s < ten.first_seg + ten.n_segs; ++s) {
      const SegOut o = t.seg_out[s];
      tree.Push(o.sum);
      amax_bits = max(amax_bits, o.amax);
      out.zeros += o.zeros;
      out.nonfinite += o.nonfinite;
      nans += o.nans;
    }
    double sum = tree.Finish();
    double amax = Decode(f, amax_bits);
    bool defined = true;
    if (ten.dtype == 4 || ten.dtype == 5) {
      // Read now, on the stream: a graph replay sees this step's scale.
      const float sv = ten.scale_inv_ptr != nullptr ? *ten.scale_inv_ptr : ten.scale_inv;
      const double sc = fabs(static_cast<double>(sv));
      defined = isfinite(sc);  // else stats_order.h step 5a: sumsq NaN
      sum = __dmul_rn(sum, __dmul_rn(sc, sc));
      amax = __dmul_rn(amax, sc);
    }
    if (defined) {
      out.sumsq = __dadd_rn(out.sumsq, sum);
      out.amax = out.amax > amax ? out.amax : amax;
    } else {
      undefined = true;
    }
    out.numel += ten.numel;
  }
  if (nans > 0 || undefined) {
    out.sumsq = __longlong_as_double(static_cast<long long>(kNanBits));
  } else if (out.nonfinite > 0) {
    out.sumsq = __longlong_as_double(0x7ff0000000000000ll);
  }
  t.unit_out[u] = out;
}

__device__ __forceinline__ void StoreBits(unsigned char* p, uint32_t size, bool aligned,
                                          uint32_t v) {
  if (aligned) {
    if (size == 4) *reinterpret_cast<uint32_t*>(p) = v;
    else if (size == 2) *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(v);
    else *p = static_cast<unsigned char>(v);
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

__global__ void __launch_bounds__(256) ApplyKernel(Tables t, const float* scale) {
  const uint32_t j = threadIdx.x;
  for (uint64_t k = blockIdx.x; k < t.n_items; k += gridDim.x) {
    const DevItem it = t.items[k];
    const DevTensor& ten = t.tensors[it.tensor];
    const float s = scale[ten.unit];
    if (s == 1.0f) continue;
    const Fmt f = FmtOf(ten.dtype);
    unsigned char* base = const_cast<unsigned char*>(t.ptrs[it.tensor]) + it.offset * f.size;
    const bool aligned = (reinterpret_cast<uintptr_t>(t.ptrs[it.tensor]) % f.size) == 0;
    for (uint32_t r = 0; r < kRows; ++r) {
      const uint32_t i = r * kLanes + j;
      if (i >= it.n) break;
      unsigned char* p = base + static_cast<uint64_t>(i) * f.size;
      StoreBits(p, f.size, aligned, ScaleBits(ten.dtype, LoadBits(p, f.size, aligned), s));
    }
  }
}

uint32_t Grid(uint64_t n) { return static_cast<uint32_t>(n < (1u << 30) ? n : (1u << 30)); }

}  // namespace

int LaunchStats(const Tables& t, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (t.n_items > 0) {
    ItemKernel<<<Grid(t.n_items), kLanes, 0, st>>>(t);
    SegKernel<<<Grid(t.n_segs), kLanes, 0, st>>>(t);
  }
  if (t.n_units > 0) UnitKernel<<<(t.n_units + 127) / 128, 128, 0, st>>>(t);
  return static_cast<int>(cudaGetLastError());
}

int LaunchApply(const Tables& t, const float* unit_scale, void* stream) {
  if (t.n_items == 0) return 0;
  ApplyKernel<<<Grid(t.n_items), kLanes, 0, static_cast<cudaStream_t>(stream)>>>(t, unit_scale);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace gnmr::cuda
