// The arithmetic of the item kernel (stats_kernels.cu): one warp computes
// one work item of kernels/stats_order.h (steps 1-4). Everything here is
// __host__ __device__, so the CPU tests (tests/kernels/gpu_item_math_test.cc)
// run this very code on a simulated warp; only the loads, the shuffles and
// the warp reductions are the kernel's own.
//
// Layout. Each of the 32 threads of the warp owns 8 of the item's 256
// lanes, in "slots" 0..7. With P elements per load (P = 8: a 16-byte load
// of bf16/fp16, an 8-byte load of fp8; P = 4: a 16-byte load of fp32; P =
// 1: one element per load, the path for unaligned or partial items), slot
// i of thread t is lane
//     Lane(t, i) = (i / P) * 32P + t * P + i % P,
// so a warp's load covers 32P consecutive elements of one row (coalesced)
// and every lane sees its 16 rows in order, one thread adding them
// sequentially (step 3). The lane tree (step 4) is then a fixed sequence:
// for s = 128 .. 1, lane j += lane j + s is a slot-to-slot add inside a
// thread when s >= 32P (slot i += slot i + s/32) or s < P (slot i += slot
// i + s), and a shuffle down by s/P otherwise (slot i += the same slot of
// thread t + s/P). Either way it adds exactly stats_order.h's operands.
//
// Per element: a hardware conversion to double (bf16 -> f32 is a shift;
// fp16 -> f32 and fp8x2 -> f16x2 are exact, subnormals included, since the
// kernels are built without -ftz), then fma(m, m, acc), which rounds once,
// exactly as acc + m * m does because m * m is exact in fp64. The fast path
// keeps no per-element finiteness test: it tracks the largest magnitude bit
// pattern, and only an item whose maximum is a NaN/Inf pattern is scanned
// again with the careful per-element rules (NaN/Inf add +0.0, amax over
// finite values, counts). Zeros are counted with packed integer tricks, two
// (16-bit) or four (fp8) elements per instruction, and so, in the kSat
// instantiations (tensors that count saturation), are the patterns at or
// above the saturation pattern (stats_order.h, saturated); kSat = false
// is the code without that count.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "gnmr/tensor.h"

#define GNMR_HD __host__ __device__ __forceinline__
#if defined(__CUDACC__)
#define GNMR_UNROLL _Pragma("unroll")
#define GNMR_NO_UNROLL _Pragma("unroll 1")
#else
#define GNMR_UNROLL
#define GNMR_NO_UNROLL
#endif

namespace gnmr::cuda::item {

constexpr uint32_t kWarp = 32;
constexpr uint32_t kSlots = 8;    // lanes per thread
constexpr uint32_t kRows = 16;    // stats_order.h kRowsPerItem
constexpr uint32_t kLanes = 256;  // stats_order.h kLanes
constexpr uint32_t kItemElems = kRows * kLanes;

// Per-dtype constants: element size, the magnitude mask, the first NaN/Inf
// magnitude pattern, the first NaN pattern, elements per vector load (P).
template <DType D>
struct Fmt;
template <>
struct Fmt<DType::kFp32> {
  static constexpr uint32_t kSize = 4, kAbs = 0x7fffffffu, kNonfinite = 0x7f800000u,
                            kNanMin = 0x7f800001u, kP = 4;
};
template <>
struct Fmt<DType::kBf16> {
  static constexpr uint32_t kSize = 2, kAbs = 0x7fffu, kNonfinite = 0x7f80u, kNanMin = 0x7f81u,
                            kP = 8;
};
template <>
struct Fmt<DType::kFp16> {
  static constexpr uint32_t kSize = 2, kAbs = 0x7fffu, kNonfinite = 0x7c00u, kNanMin = 0x7c01u,
                            kP = 8;
};
template <>
struct Fmt<DType::kFp8E4M3> {  // no Inf: only S.1111.111 (NaN) is not finite
  static constexpr uint32_t kSize = 1, kAbs = 0x7fu, kNonfinite = 0x7fu, kNanMin = 0x7fu, kP = 8;
};
template <>
struct Fmt<DType::kFp8E5M2> {
  static constexpr uint32_t kSize = 1, kAbs = 0x7fu, kNonfinite = 0x7cu, kNanMin = 0x7du, kP = 8;
};

template <DType D>
constexpr uint32_t kVecBytes = Fmt<D>::kP * Fmt<D>::kSize;  // 16, or 8 for fp8

template <uint32_t P>
GNMR_HD constexpr uint32_t Lane(uint32_t t, uint32_t i) {
  return (i / P) * (kWarp * P) + t * P + i % P;
}

GNMR_HD float FloatFromBits(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, 4);
  return f;
#endif
}

GNMR_HD double Fma(double a, double b, double c) {
#ifdef __CUDA_ARCH__
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// max of the two 16-bit halves, each unsigned (VIMNMX.U16x2 on sm_90).
GNMR_HD uint32_t MaxU16x2(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  return __vmaxu2(a, b);
#else
  const uint32_t lo = (a & 0xffffu) > (b & 0xffffu) ? (a & 0xffffu) : (b & 0xffffu);
  const uint32_t hi = (a >> 16) > (b >> 16) ? (a >> 16) : (b >> 16);
  return lo | (hi << 16);
#endif
}

// fp16 -> double, exact (one cvt.f64.f16 on the device).
GNMR_HD double HalfToDouble(unsigned short h) {
#ifdef __CUDA_ARCH__
  double d;
  asm("cvt.f64.f16 %0, %1;" : "=d"(d) : "h"(h));
  return d;
#else
  __half_raw r;
  r.x = h;
  return static_cast<double>(__half2float(__half(r)));
#endif
}

// The value of one element pattern (any sign; NaN/Inf patterns give NaN/Inf
// or, for fp8, a value the fast path never uses), exactly, as a double.
template <DType D>
GNMR_HD double Decode(uint32_t bits) {
  if constexpr (D == DType::kFp32) {
    return static_cast<double>(FloatFromBits(bits));
  } else if constexpr (D == DType::kBf16) {
    return static_cast<double>(FloatFromBits(bits << 16));
  } else if constexpr (D == DType::kFp16) {
    return HalfToDouble(static_cast<unsigned short>(bits));
  } else {
    constexpr __nv_fp8_interpretation_t k = D == DType::kFp8E4M3 ? __NV_E4M3 : __NV_E5M2;
    return HalfToDouble(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(bits), k).x);
  }
}

// Fast-path figures of one thread, packed per dtype: `amax` is the largest
// magnitude pattern (16-bit and fp8: two u16 maxima), `nonzero` counts
// nonzero magnitudes (16-bit: two u16 counters; fp8: four u8 counters; at
// most 128 elements a thread per item, so no field overflows).
struct Fast {
  uint32_t amax = 0;
  uint32_t nonzero = 0;
  uint32_t saturated = 0;  // kSat: patterns >= the threshold, packed like nonzero
};

// What AccumulateWord<D, true> adds to compare against the saturation
// pattern thr (1 <= thr <= the first NaN/Inf pattern), packed: a field a
// (< 2^(w-1), w = 16 or 8 bits) is >= thr iff a + 2^(w-1) - thr has bit
// w - 1 set, and the sum stays below 2^w (nothing carries into the next
// field), as for the nonzero count (thr = 1). fp32: thr itself.
template <DType D>
GNMR_HD uint32_t SatAddend(uint32_t thr) {
  if constexpr (Fmt<D>::kSize == 4) return thr;
  if constexpr (Fmt<D>::kSize == 2) return (0x8000u - thr) * 0x00010001u;
  return (0x80u - thr) * 0x01010101u;
}

// Adds the elements packed in the 32-bit word `w` (little-endian: the
// first element in the low bits) to slots v[0 .. 4 / size). kSat: also
// counts the patterns >= the saturation pattern (sat_add = SatAddend).
template <DType D, bool kSat = false>
GNMR_HD void AccumulateWord(uint32_t w, double* v, Fast* f, uint32_t sat_add = 0) {
  if constexpr (Fmt<D>::kSize == 4) {
    const double m = Decode<D>(w);
    v[0] = Fma(m, m, v[0]);
    const uint32_t a = w & Fmt<D>::kAbs;
    f->amax = a > f->amax ? a : f->amax;
    f->nonzero += a != 0u ? 1u : 0u;
    if constexpr (kSat) f->saturated += a >= sat_add ? 1u : 0u;
  } else if constexpr (Fmt<D>::kSize == 2) {
    const double m0 = Decode<D>(w & 0xffffu), m1 = Decode<D>(w >> 16);
    v[0] = Fma(m0, m0, v[0]);
    v[1] = Fma(m1, m1, v[1]);
    const uint32_t a = w & 0x7fff7fffu;
    f->amax = MaxU16x2(f->amax, a);
    // Each half is <= 0x7fff, so a + 0x7fff has bit 15 set iff the half is
    // nonzero and never carries into the next half.
    f->nonzero += ((a + 0x7fff7fffu) >> 15) & 0x00010001u;
    if constexpr (kSat) f->saturated += ((a + sat_add) >> 15) & 0x00010001u;
  } else {
    constexpr __nv_fp8_interpretation_t k = D == DType::kFp8E4M3 ? __NV_E4M3 : __NV_E5M2;
    const __half2_raw p0 = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w), k);
    const __half2_raw p1 =
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> 16), k);
    const double m0 = HalfToDouble(p0.x), m1 = HalfToDouble(p0.y);
    const double m2 = HalfToDouble(p1.x), m3 = HalfToDouble(p1.y);
    v[0] = Fma(m0, m0, v[0]);
    v[1] = Fma(m1, m1, v[1]);
    v[2] = Fma(m2, m2, v[2]);
    v[3] = Fma(m3, m3, v[3]);
    const uint32_t a = w & 0x7f7f7f7fu;
    f->amax = MaxU16x2(f->amax, MaxU16x2(a & 0x00ff00ffu, (a >> 8) & 0x00ff00ffu));
    f->nonzero += ((a + 0x7f7f7f7fu) >> 7) & 0x01010101u;  // as above, per byte
    if constexpr (kSat) f->saturated += ((a + sat_add) >> 7) & 0x01010101u;
  }
}

template <DType D>
GNMR_HD uint32_t FastAmax(const Fast& f) {
  if constexpr (Fmt<D>::kSize == 4) return f.amax;
  const uint32_t lo = f.amax & 0xffffu, hi = f.amax >> 16;
  return lo > hi ? lo : hi;
}
// The sum of the fields of a packed count (Fast::nonzero, Fast::saturated).
template <DType D>
GNMR_HD uint32_t PackedSum(uint32_t x) {
  if constexpr (Fmt<D>::kSize == 4) return x;
  if constexpr (Fmt<D>::kSize == 2) return (x & 0xffffu) + (x >> 16);
  return (x & 0xffu) + ((x >> 8) & 0xffu) + ((x >> 16) & 0xffu) + (x >> 24);
}
template <DType D>
GNMR_HD uint32_t FastNonzero(const Fast& f) {
  return PackedSum<D>(f.nonzero);
}
template <DType D>
GNMR_HD uint32_t FastSaturated(const Fast& f) {
  return PackedSum<D>(f.saturated);
}

// One vector load: 16 bytes (P * size), or 8 for fp8.
template <DType D>
struct Vec {
  uint32_t w[kVecBytes<D> / 4];
};

// Loads per thread per item, in order (row-major: load L is row L / (8 / P),
// part L % (8 / P)), and how many are issued before the first is used
// (128 bytes a thread in flight).
template <DType D>
constexpr uint32_t kVecLoads = kRows * (kSlots / Fmt<D>::kP);
template <DType D>
constexpr uint32_t kVecBatch = 128 / kVecBytes<D>;

// Element offset (within the item) of the first element of thread t's load L.
template <DType D>
GNMR_HD constexpr uint32_t VecOffset(uint32_t t, uint32_t L) {
  constexpr uint32_t P = Fmt<D>::kP, kParts = kSlots / P;
  return (L / kParts) * kLanes + Lane<P>(t, (L % kParts) * P);
}

// Steps 1-3 of a whole item (4096 elements) on the vector layout, for one
// thread: `load(L)` returns load L (see VecOffset). kSat, sat_add: see
// AccumulateWord.
template <DType D, bool kSat = false, class Load>
GNMR_HD void ThreadVecItem(const Load& load, double (&v)[kSlots], Fast* f, uint32_t sat_add = 0) {
  constexpr uint32_t P = Fmt<D>::kP, kParts = kSlots / P;
  constexpr uint32_t kPerWord = 4 / Fmt<D>::kSize;
  GNMR_UNROLL
  for (uint32_t b = 0; b < kVecLoads<D>; b += kVecBatch<D>) {
    Vec<D> x[kVecBatch<D>];
    GNMR_UNROLL
    for (uint32_t j = 0; j < kVecBatch<D>; ++j) x[j] = load(b + j);
    GNMR_UNROLL
    for (uint32_t j = 0; j < kVecBatch<D>; ++j) {
      const uint32_t part = (b + j) % kParts;
      GNMR_UNROLL
      for (uint32_t k = 0; k < kVecBytes<D> / 4; ++k) {
        AccumulateWord<D, kSat>(x[j].w[k], &v[part * P + k * kPerWord], f, sat_add);
      }
    }
  }
}

// Careful (and partial-item) figures of one thread: amax over finite
// magnitudes, counts of zeros, NaN/Inf and NaN.
struct Counts {
  uint32_t amax = 0;
  uint32_t zeros = 0;
  uint32_t nonfinite = 0;
  uint32_t nans = 0;
  uint32_t saturated = 0;  // kSat
};

// One element on the scalar path. kCareful: NaN/Inf add +0.0 and are
// counted (stats_order.h step 1); otherwise amax is the largest magnitude
// pattern of any kind (the trigger for a careful scan). kSat: counts the
// patterns >= the saturation pattern `sat` (kCareful: finite ones only; a
// non-careful result with a NaN/Inf is redone carefully anyway).
template <DType D, bool kCareful, bool kSat = false>
GNMR_HD void AccumulateElement(uint32_t bits, double* lane, Counts* c, uint32_t sat = 0) {
  const uint32_t a = bits & Fmt<D>::kAbs;
  if constexpr (kSat && kCareful) {
    c->saturated += a - sat < Fmt<D>::kNonfinite - sat ? 1u : 0u;  // sat <= a < NaN/Inf
  } else if constexpr (kSat) {
    c->saturated += a >= sat ? 1u : 0u;
  }
  if constexpr (kCareful) {
    const bool finite = a < Fmt<D>::kNonfinite;
    const double m = Decode<D>(finite ? a : 0u);
    *lane = Fma(m, m, *lane);
    const uint32_t fa = finite ? a : 0u;
    c->amax = fa > c->amax ? fa : c->amax;
    c->nonfinite += finite ? 0u : 1u;
    c->nans += a >= Fmt<D>::kNanMin ? 1u : 0u;
  } else {
    const double m = Decode<D>(a);
    *lane = Fma(m, m, *lane);
    c->amax = a > c->amax ? a : c->amax;
  }
  c->zeros += a == 0u ? 1u : 0u;
}

// Steps 1-3 of an item of n <= 4096 elements on the scalar layout (P = 1)
// for thread t: `load(e)` returns the bits of element e (< n). Loads a
// batch of two rows before using them. kSat, sat: see AccumulateElement.
template <DType D, bool kCareful, bool kSat = false, class Load>
GNMR_HD void ThreadScalarItem(const Load& load, uint32_t t, uint32_t n, double (&v)[kSlots],
                              Counts* c, uint32_t sat = 0) {
  constexpr uint32_t kBatchRows = 2;
  GNMR_NO_UNROLL
  for (uint32_t r0 = 0; r0 < kRows; r0 += kBatchRows) {
    uint32_t bits[kBatchRows * kSlots];
    GNMR_UNROLL
    for (uint32_t j = 0; j < kBatchRows * kSlots; ++j) {
      const uint32_t e = (r0 + j / kSlots) * kLanes + Lane<1>(t, j % kSlots);
      bits[j] = e < n ? load(e) : 0u;
    }
    GNMR_UNROLL
    for (uint32_t j = 0; j < kBatchRows * kSlots; ++j) {
      const uint32_t e = (r0 + j / kSlots) * kLanes + Lane<1>(t, j % kSlots);
      if (e < n) AccumulateElement<D, kCareful, kSat>(bits[j], &v[j % kSlots], c, sat);
    }
  }
}

// Step 4 for layout P. Level s (128, 64, .., 1) is either in-thread
// (InThreadStep) or across threads: then slot i (< P) of thread t adds the
// same slot of thread t + ShuffleDelta(s) (CrossStep).
template <uint32_t P>
GNMR_HD constexpr bool CrossThread(uint32_t s) {
  return s >= P && s < kWarp * P;
}
template <uint32_t P>
GNMR_HD constexpr uint32_t ShuffleDelta(uint32_t s) {
  return s / P;
}
template <uint32_t P>
GNMR_HD void InThreadStep(uint32_t s, double (&v)[kSlots]) {
  const uint32_t stride = s >= kWarp * P ? s / kWarp : s;
  GNMR_UNROLL
  for (uint32_t i = 0; i < kSlots; ++i) {
    if (i < stride && i + stride < kSlots) v[i] = v[i] + v[i + stride];
  }
}
template <uint32_t P>
GNMR_HD void CrossStep(double (&v)[kSlots], const double (&partner)[kSlots]) {
  GNMR_UNROLL
  for (uint32_t i = 0; i < P; ++i) v[i] = v[i] + partner[i];
}

// What one work item yields (the warp's lane 0 writes it out).
struct Result {
  double partial = 0.0;
  uint32_t amax = 0;
  uint32_t zeros = 0;
  uint32_t nonfinite = 0;
  uint32_t nans = 0;
  uint32_t saturated = 0;
};

// The kernel's dispatch: whole items of a tensor that starts on a vector
// boundary take the vector path, the rest the scalar one; a fast result
// whose largest magnitude pattern is NaN/Inf is redone carefully.
template <DType D>
GNMR_HD bool UsesVectorPath(uint32_t n, uintptr_t tensor_address) {
  return n == kItemElems && tensor_address % kVecBytes<D> == 0;
}
template <DType D>
GNMR_HD bool NeedsCarefulScan(const Result& fast) {
  return fast.amax >= Fmt<D>::kNonfinite;
}

// stats_order.h step 5a for one fp8 tensor: its sum and amax (of unscaled
// values) times the scale, s = |scale_inv| (s * s is exact). False if the
// scale is not finite: the tensor's values are undefined.
GNMR_HD bool ApplyFp8Scale(float scale_inv, double* sum, double* amax) {
  const double s = fabs(static_cast<double>(scale_inv));
#ifdef __CUDA_ARCH__
  if (!isfinite(s)) return false;
#else
  if (!std::isfinite(s)) return false;
#endif
  *sum = *sum * (s * s);
  *amax = *amax * s;
  return true;
}

}  // namespace gnmr::cuda::item
