// AVX-512 fast path for full fp32, bf16 and fp16 work items, included only
// by the AVX-512 build of item_kernels.cc (everything here has internal
// linkage, so no other ISA build can ever pick up one of these functions).
//
// Why a separate path: the generic kernel, written with vector extensions,
// gets its fp32 -> fp64 conversions split into 128-bit pieces by GCC, and
// its 256 lane accumulators live in memory; bf16/fp16 were compute-bound at
// about a third of the streaming-read bandwidth. Here, per full item:
//
// - Pass 1 streams the item (8 or 16 KiB) once, on raw bit patterns:
//   magnitude max, (minimum nonzero magnitude) - 1, zero count. It decides
//   whether the item qualifies before anything is committed.
// - Pass 2 re-reads the item from L1, converts to double exactly and adds
//   x * x into the canonical lane (stats_order.h step 3) with one fused
//   multiply-add: x * x is exact in fp64 (at most 48 significant bits, far
//   from the fp64 range limits), so fma(x, x, lane) rounds once, exactly
//   like lane + x * x. Lanes are blocked by 128 (16 register accumulators);
//   the adds inside a lane still go in row order 0..15, all that step 3
//   fixes. Pass 2 also prefetches 16 KiB ahead (bf16: two items, fp32:
//   one; see SumItem): without it the
//   hardware prefetcher left bf16 at ~70% of the streaming read (the
//   compute-only pass 2 has no demand misses to train it), with it ~95%.
//
// Which items qualify (the others go to the generic paths, exact too):
// - Items of zeros and normals: the fp32 value (bf16: the pattern shifted;
//   fp16: vcvtph2ps, exact on normals) is a normal fp32, so cvtps2pd is
//   exact.
// - fp32 / bf16 items of zeros and subnormals only: x = m * 2^-e0 with an
//   integer m (fp32: e0 = 149, m < 2^23; bf16: e0 = 133, m < 2^7),
//   converted exactly (cvtdq2pd / cvtdq2ps). The lanes and the tree then
//   sum m^2 instead of x^2 = m^2 * 2^(-2 e0): every canonical value is ours
//   times 2^(-2 e0), and all of them are normal fp64 numbers (>= 2^-298
//   when nonzero), so each rounding scales exactly and the partial is
//   ours * 2^(-2 e0), exactly.
// Items with a NaN/Inf, items mixing subnormals and normals, and fp16 items
// with a subnormal are refused. So no floating-point instruction here sees
// a denormal input or produces a denormal result, and FTZ/DAZ cannot
// change a result.
#pragma once

#include <immintrin.h>

#include <cstdint>

// GCC 12 warns about the deliberately undefined upper halves inside its own
// AVX-512 intrinsic headers (a false positive, GCC PR 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace gnmr::cpu::GNMR_CPU_ISA {
namespace {
namespace avx512 {

enum class Mode { kFp32Normal, kFp32Sub, kBf16Normal, kBf16Sub, kFp16Normal };

constexpr int ElemBytes(Mode m) {
  return m == Mode::kFp32Normal || m == Mode::kFp32Sub ? 4 : 2;
}

// The values of 32 consecutive elements at `q` (the integers m of the top
// comment in the Sub modes) as four vectors of 8 doubles, exact. Lane of
// element k of x[i]: Lane<M>(i, k) (bf16 even and odd elements come out
// separately: one AND, one shift, no shuffle). fp16 converts 8 at a time
// (ymm): measured ~20% faster than 16 at a time plus an extract.
template <Mode M>
__attribute__((always_inline)) inline void Values32(const unsigned char* q, __m512d x[4]) {
  if constexpr (M == Mode::kFp32Normal || M == Mode::kFp32Sub) {
    for (int i = 0; i < 4; ++i) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * i));
      if constexpr (M == Mode::kFp32Normal) {
        x[i] = _mm512_cvtps_pd(_mm256_castsi256_ps(v));
      } else {
        x[i] = _mm512_cvtepi32_pd(_mm256_and_si256(v, _mm256_set1_epi32(0x7fffffff)));
      }
    }
    return;
  }
  if constexpr (M == Mode::kFp16Normal) {
    for (int i = 0; i < 4; ++i) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * i));
      x[i] = _mm512_cvtps_pd(_mm256_cvtph_ps(v));
    }
    return;
  }
  __m512 s0, s1;
  {
    const __m512i v = _mm512_loadu_si512(q);
    if constexpr (M == Mode::kBf16Normal) {
      // A bf16 pattern is the top half of its fp32 pattern.
      s0 = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      s1 = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(-65536)));
    } else {
      const __m512i m = _mm512_set1_epi32(0x7fff);
      s0 = _mm512_cvtepi32_ps(_mm512_and_si512(v, m));
      s1 = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 16), m));
    }
  }
  x[0] = _mm512_cvtps_pd(_mm512_castps512_ps256(s0));
  x[1] = _mm512_cvtps_pd(_mm512_extractf32x8_ps(s0, 1));
  x[2] = _mm512_cvtps_pd(_mm512_castps512_ps256(s1));
  x[3] = _mm512_cvtps_pd(_mm512_extractf32x8_ps(s1, 1));
}

// Lane (0..31 inside a 32-element chunk) of element k of Values32's x[i].
template <Mode M>
constexpr int Lane(int i, int k) {
  if constexpr (M == Mode::kBf16Normal || M == Mode::kBf16Sub) {
    return (i & 1) * 16 + 2 * k + (i >> 1);  // x[0..1]: even elements, x[2..3]: odd
  }
  return 8 * i + k;
}

// Steps 3-4 of stats_order.h for a qualifying full item.
template <Mode M>
double SumItem(const unsigned char* p) {
  constexpr int kElem = ElemBytes(M);
  constexpr int kRowBytes = 256 * kElem;
  constexpr int kStepBytes = kRowBytes / 2;  // one row of one 128-lane block
  __m512d acc[2][16];
  for (int b = 0; b < 2; ++b) {
    __m512d a[16];
    for (int v = 0; v < 16; ++v) a[v] = _mm512_setzero_pd();
    for (int r = 0; r < 16; ++r) {
      const unsigned char* row = p + r * kRowBytes + b * kStepBytes;
      // The data 16 KiB ahead (bf16: the item two ahead, fp32: the next
      // item), a 32nd of an item per step (prefetches never fault, and an
      // integer address keeps pointer arithmetic inside the tensor). fp32
      // used to fetch two items (32 KiB) ahead: with the current item that
      // is the whole 48 KiB L1d, and it measured ~10% slower.
      const uintptr_t next = reinterpret_cast<uintptr_t>(p) + 16384 + (b * 16 + r) * kStepBytes;
      for (int l = 0; l < kStepBytes / 64; ++l) {
        _mm_prefetch(reinterpret_cast<const char*>(next + 64 * l), _MM_HINT_T0);
      }
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        __m512d x[4];
        Values32<M>(row + 32 * kElem * c, x);
        for (int i = 0; i < 4; ++i) a[4 * c + i] = _mm512_fmadd_pd(x[i], x[i], a[4 * c + i]);
      }
    }
    for (int v = 0; v < 16; ++v) acc[b][v] = a[v];
  }
  // Lane tree. Every 32-element chunk has the same layout, so s = 128
  // (block 1 onto block 0), 64 and 32 (chunk c + 2, c + 1) are vector adds
  // of the canonical pairs.
  __m512d t[16];
  for (int v = 0; v < 16; ++v) t[v] = _mm512_add_pd(acc[0][v], acc[1][v]);
  for (int v = 0; v < 8; ++v) t[v] = _mm512_add_pd(t[v], t[v + 8]);
  for (int v = 0; v < 4; ++v) t[v] = _mm512_add_pd(t[v], t[v + 4]);
  double tmp[4][8];
  double l[32];
  for (int i = 0; i < 4; ++i) _mm512_storeu_pd(tmp[i], t[i]);
  for (int i = 0; i < 4; ++i) {
    for (int k = 0; k < 8; ++k) l[Lane<M>(i, k)] = tmp[i][k];
  }
  for (int s = 16; s >= 1; s /= 2) {
    for (int j = 0; j < s; ++j) l[j] += l[j + s];
  }
  if constexpr (M == Mode::kBf16Sub) return l[0] * 0x1p-266;
  if constexpr (M == Mode::kFp32Sub) return l[0] * 0x1p-298;
  return l[0];
}

// Pass 1 over a full item of Bits (uint16_t or uint32_t) patterns: max
// magnitude, min(magnitude - 1) (zeros wrap to all ones), zero count.
template <typename Bits>
void Scan(const unsigned char* p, __m512i* amax, __m512i* minm1, uint64_t* zeros) {
  constexpr bool k16 = sizeof(Bits) == 2;
  const __m512i abs = k16 ? _mm512_set1_epi16(0x7fff) : _mm512_set1_epi32(0x7fffffff);
  const __m512i one = k16 ? _mm512_set1_epi16(1) : _mm512_set1_epi32(1);
  __m512i mx = _mm512_setzero_si512();
  __m512i mn = _mm512_set1_epi32(-1);
  uint64_t z = 0;
  for (uint32_t i = 0; i < 4096 * sizeof(Bits) / 64; ++i) {
    const __m512i a = _mm512_and_si512(_mm512_loadu_si512(p + 64 * i), abs);
    if constexpr (k16) {
      mx = _mm512_max_epu16(mx, a);
      mn = _mm512_min_epu16(mn, _mm512_sub_epi16(a, one));
      z += static_cast<uint32_t>(__builtin_popcount(_mm512_testn_epi16_mask(a, a)));
    } else {
      mx = _mm512_max_epu32(mx, a);
      mn = _mm512_min_epu32(mn, _mm512_sub_epi32(a, one));
      z += static_cast<uint32_t>(__builtin_popcount(_mm512_testn_epi32_mask(a, a)));
    }
  }
  *amax = mx;
  *minm1 = mn;
  *zeros = z;
}

// Whether any (unsigned) pattern in v is >= lim.
template <typename Bits>
bool AnyGe(__m512i v, uint32_t lim) {
  if constexpr (sizeof(Bits) == 2) {
    return _mm512_cmpge_epu16_mask(v, _mm512_set1_epi16(static_cast<int16_t>(lim))) != 0;
  } else {
    return _mm512_cmpge_epu32_mask(v, _mm512_set1_epi32(static_cast<int32_t>(lim))) != 0;
  }
}
template <typename Bits>
bool AnyBelow(__m512i v, uint32_t lim) {
  if constexpr (sizeof(Bits) == 2) {
    return _mm512_cmplt_epu16_mask(v, _mm512_set1_epi16(static_cast<int16_t>(lim))) != 0;
  } else {
    return _mm512_cmplt_epu32_mask(v, _mm512_set1_epi32(static_cast<int32_t>(lim))) != 0;
  }
}

// One full item of format F (fp32, bf16 or fp16; see item_kernels.cc) at
// `p` (any alignment). Returns false, changing nothing, if the item does
// not qualify (see the top comment); else writes its partial and folds its
// magnitude patterns into *amax_w (lanes of F's width) and its zeros into
// *zeros.
template <typename F>
bool Item(const unsigned char* p, double* partial, __m512i* amax_w, uint64_t* zeros) {
  using Bits = typename F::Bits;
  constexpr bool kFp16 = F::kBias == 15;
  constexpr bool k32 = sizeof(Bits) == 4;
  constexpr uint32_t kMinNormal = 1u << F::kMantBits;
  __m512i amax, minm1;
  uint64_t z;
  Scan<Bits>(p, &amax, &minm1, &z);
  if (AnyGe<Bits>(amax, F::kNonfinite)) return false;  // NaN / Inf
  if (!AnyBelow<Bits>(minm1, kMinNormal - 1)) {        // zeros and normals
    *partial = SumItem<k32 ? Mode::kFp32Normal : kFp16 ? Mode::kFp16Normal
                                                        : Mode::kBf16Normal>(p);
  } else if (!kFp16 && !AnyGe<Bits>(amax, kMinNormal)) {  // zeros and subnormals
    *partial = SumItem<k32 ? Mode::kFp32Sub : Mode::kBf16Sub>(p);
  } else {
    return false;
  }
  *amax_w = k32 ? _mm512_max_epu32(*amax_w, amax) : _mm512_max_epu16(*amax_w, amax);
  *zeros += z;
  return true;
}

// The largest pattern in amax_w (lanes of Bits' width).
template <typename Bits>
uint32_t MaxPattern(__m512i amax_w) {
  Bits v[64 / sizeof(Bits)];
  _mm512_storeu_si512(v, amax_w);
  uint32_t m = 0;
  for (Bits x : v) m = m > x ? m : x;
  return m;
}

}  // namespace avx512
}  // namespace
}  // namespace gnmr::cpu::GNMR_CPU_ISA
