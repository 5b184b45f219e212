// AVX-512 fast path for full fp32, bf16 and fp16 work items, included only
// by the AVX-512 build of item_kernels.cc (everything here has internal
// linkage, so no other ISA build can ever pick up one of these functions).
//
// Why a separate path: the generic kernel, written with vector extensions,
// gets its fp32 -> fp64 conversions split into 128-bit pieces by GCC, and
// its 256 lane accumulators live in memory; bf16/fp16 were compute-bound at
// about a third of the streaming-read bandwidth. Here, per full item:
//
// - One pass over memory per item (SumItem<M, kFull/kLean>): each 32-element
//   chunk is loaded once (the second load of it hits L1) and folded into
//   the scan figures (magnitude max, least nonzero magnitude, zero count;
//   integer instructions on raw bit patterns, see ItemScan) and, in the same
//   loop, converted to double and added as x * x into its canonical lane
//   (stats_order.h step 3) with one fused multiply-add: x * x is exact in
//   fp64 (at most 48 significant bits, far from the fp64 range limits), so
//   fma(x, x, lane) rounds once, exactly like lane + x * x. Lanes are
//   blocked by 128 (16 register accumulators); the adds inside a lane
//   still go in row order 0..15, all that step 3 fixes. The loop also
//   prefetches 16 KiB ahead (kPrefetchAhead).
// - Only after the item does Item() decide, from the integer scan alone,
//   whether the item fits the mode it was summed in. If so the lanes are
//   committed (lane tree as before); if not they are discarded: whatever a
//   NaN, an Inf, or a subnormal flushed by DAZ did to them never reaches a
//   result. An item of the other qualifying kind is re-summed from L1;
//   anything else is refused (below). The two-pass predecessor (scan pass,
//   then an L1 compute pass) left the memory idle during the compute pass:
//   64-68% of the best streaming read for fp32/bf16.
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
// with a subnormal are refused. In every committed sum no floating-point
// instruction saw a denormal input or produced a denormal result, so
// FTZ/DAZ cannot change a result (a discarded sum may have seen anything).
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
  // bf16: 16 elements per 256-bit load, widened on 32-bit lanes (a bf16
  // pattern is the top half of its fp32 pattern): even elements by a
  // shift, odd ones by an AND; 8 floats -> 8 doubles with no extract.
  // Measured no faster (L2-resident, Zen 5): zmm widening plus extracts,
  // masked 16-bit loads instead of the shift/AND, and doubles built by
  // integer shifts times 2^896 (vmulpd instead of vcvtps2pd).
  for (int h = 0; h < 2; ++h) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * h));
    if constexpr (M == Mode::kBf16Normal) {
      x[2 * h] = _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
      x[2 * h + 1] =
          _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(-65536))));
    } else {
      const __m256i m = _mm256_set1_epi32(0x7fff);
      x[2 * h] = _mm512_cvtepi32_pd(_mm256_and_si256(v, m));
      x[2 * h + 1] = _mm512_cvtepi32_pd(_mm256_and_si256(_mm256_srli_epi32(v, 16), m));
    }
  }
}

// Lane (0..31 inside a 32-element chunk) of element k of Values32's x[i].
template <Mode M>
constexpr int Lane(int i, int k) {
  if constexpr (M == Mode::kBf16Normal || M == Mode::kBf16Sub) {
    return (i >> 1) * 16 + 2 * k + (i & 1);  // x[2h]: even elements, x[2h + 1]: odd
  }
  return 8 * i + k;
}

// Figures of one item's bit patterns (order-independent, integer only),
// per lane of the format's width, with a = the pattern without its sign
// and t = a - 1 (wrapping, so a zero becomes all-ones and never lowers a
// minimum): mx = max a, mn = min t (the least nonzero magnitude - 1: a
// subnormal is present iff mn < smallest normal pattern - 1), and the
// zero count, as nz = sum of min(a, 1) per 32-bit lane (<= 256; zeros =
// 4096 - total) for fp32, as `zeros` for bf16/fp16.
struct ItemScan {
  __m512i mx;
  __m512i mn;
  __m512i nz;
  uint64_t zeros;  // 16-bit formats (their nz stays 0)
};

// Folds the 32 elements at `q` into the scan figures (measured on the
// Zen 5 tuning machine, L2-resident 512 KiB: the previous scan, max plus
// two tests, two mask moves and two popcounts per 64 bytes, ran fp32 at
// 63 GB/s, this one at 76; bf16/fp16 ~41-42 -> 42-43, where the lane
// conversions dominate). fp32: six vector integer instructions per 64
// bytes, no mask registers. bf16/fp16: t is negative (signed) exactly for
// zeros, so the signed max of t is mx - 1 (fixed after the item) and its
// sign bits (vpmovw2m, one popcount) count the zeros: five vector
// instructions per 64 bytes.
template <Mode M>
__attribute__((always_inline)) inline void ScanChunk(const unsigned char* q, ItemScan* s) {
  if constexpr (ElemBytes(M) == 4) {
    const __m512i abs = _mm512_set1_epi32(0x7fffffff);
    const __m512i one = _mm512_set1_epi32(1);
    for (int i = 0; i < 2; ++i) {
      const __m512i a = _mm512_and_si512(_mm512_loadu_si512(q + 64 * i), abs);
      s->mx = _mm512_max_epu32(s->mx, a);
      s->mn = _mm512_min_epu32(s->mn, _mm512_sub_epi32(a, one));
      s->nz = _mm512_add_epi32(s->nz, _mm512_min_epu32(a, one));
    }
  } else {
    const __m512i t = _mm512_sub_epi16(
        _mm512_and_si512(_mm512_loadu_si512(q), _mm512_set1_epi16(0x7fff)), _mm512_set1_epi16(1));
    s->mx = _mm512_max_epi16(s->mx, t);
    s->mn = _mm512_min_epu16(s->mn, t);
    s->zeros += static_cast<uint32_t>(__builtin_popcount(_mm512_movepi16_mask(t)));
  }
}

// The lean scan, for a caller whose MXCSR.DAZ is clear (see Item): then
// cvtps2pd converts fp32/bf16 subnormals exactly and vcvtph2ps turns fp16
// subnormals into normal floats, and every square of a nonzero element is
// at least 2^-298, a normal double, so FTZ cannot touch a sum either: any
// finite item sums correctly in the normal mode, and the scan only needs
// the magnitude maximum and the zeros. u = pattern + pattern (the sign
// shifted out, 2a): mx = max u, zeros where u == 0. fp32: four vector
// instructions per 64 bytes (zeros as nz = sum of min(u, 1)); bf16/fp16:
// three plus one mask popcount (the full scan: six and five).
template <Mode M>
__attribute__((always_inline)) inline void ScanChunkLean(const unsigned char* q, ItemScan* s) {
  if constexpr (ElemBytes(M) == 4) {
    const __m512i one = _mm512_set1_epi32(1);
    for (int i = 0; i < 2; ++i) {
      const __m512i x = _mm512_loadu_si512(q + 64 * i);
      const __m512i u = _mm512_add_epi32(x, x);
      s->mx = _mm512_max_epu32(s->mx, u);
      s->nz = _mm512_add_epi32(s->nz, _mm512_min_epu32(u, one));
    }
  } else {
    const __m512i x = _mm512_loadu_si512(q);
    const __m512i u = _mm512_add_epi16(x, x);
    s->mx = _mm512_max_epu16(s->mx, u);
    s->zeros += static_cast<uint32_t>(__builtin_popcount(_mm512_testn_epi16_mask(u, u)));
  }
}

// How far ahead the single pass prefetches (bytes; see SumItem).
// 16 KiB: fp32 one item, bf16/fp16 two items ahead. Measured (loaded
// machine, 3 reps each, two rounds) against 8, 24, 32 and 48 KiB and
// against prefetcht1: 8 KiB was ~20% slower, prefetcht1 ~10-25% slower for
// fp32, the longer distances no better than the noise.
constexpr uintptr_t kPrefetchAhead = 16384;

// Which scan SumItem folds into its pass: none (a re-read from L1), the
// full one (ScanChunk) or the lean one (ScanChunkLean, DAZ clear only).
enum class ScanKind { kNone, kFull, kLean };

// Steps 3-4 of stats_order.h for a full item, in mode M. With a scan, this
// is the single pass over memory: the same loop also folds every element
// into *scan (ScanChunk or ScanChunkLean) and prefetches kPrefetchAhead
// bytes ahead, and the
// caller (Item) only keeps the partial if the scan shows the item
// qualifies for M. Until then the lane values may be anything (a NaN, an
// Inf, a subnormal flushed by DAZ, a rounded square in the wrong mode):
// they are discarded, and floating-point exceptions are masked (as for the
// generic path, which also converts the elements of items it refuses).
// Without a scan it re-reads an item already in L1 in a mode known to fit.
template <Mode M, ScanKind K>
double SumItem(const unsigned char* p, ItemScan* scan) {
  constexpr bool kScan = K != ScanKind::kNone;
  constexpr int kElem = ElemBytes(M);
  constexpr int kRowBytes = 256 * kElem;
  constexpr int kStepBytes = kRowBytes / 2;  // one row of one 128-lane block
  ItemScan sc{ElemBytes(M) == 4 || K == ScanKind::kLean ? _mm512_setzero_si512()
                                                       : _mm512_set1_epi16(-1),
              _mm512_set1_epi32(-1), _mm512_setzero_si512(), 0};
  __m512d acc[2][16];
  for (int b = 0; b < 2; ++b) {
    __m512d a[16];
    for (int v = 0; v < 16; ++v) a[v] = _mm512_setzero_pd();
    for (int r = 0; r < 16; ++r) {
      const unsigned char* row = p + r * kRowBytes + b * kStepBytes;
      if constexpr (kScan) {
        // A 32nd of the bytes kPrefetchAhead ahead per step, linearly
        // (prefetches never fault, and an integer address keeps pointer
        // arithmetic inside the tensor). The demand order inside an item
        // is block 0's half rows, then block 1's: all of it is in flight
        // well before its use, so the hardware prefetcher's view of the
        // strided demand order does not matter.
        const uintptr_t next =
            reinterpret_cast<uintptr_t>(p) + kPrefetchAhead + (b * 16 + r) * kStepBytes;
        for (int l = 0; l < kStepBytes / 64; ++l) {
          _mm_prefetch(reinterpret_cast<const char*>(next + 64 * l), _MM_HINT_T0);
        }
      }
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const unsigned char* q = row + 32 * kElem * c;
        if constexpr (K == ScanKind::kFull) ScanChunk<M>(q, &sc);
        if constexpr (K == ScanKind::kLean) ScanChunkLean<M>(q, &sc);
        __m512d x[4];
        Values32<M>(q, x);
        for (int i = 0; i < 4; ++i) a[4 * c + i] = _mm512_fmadd_pd(x[i], x[i], a[4 * c + i]);
      }
    }
    for (int v = 0; v < 16; ++v) acc[b][v] = a[v];
  }
  if constexpr (kScan) {
    if constexpr (ElemBytes(M) == 2 && K == ScanKind::kFull) {
      sc.mx = _mm512_add_epi16(sc.mx, _mm512_set1_epi16(1));
    }
    *scan = sc;
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

// Whether any (unsigned) pattern in v is >= lim.
template <typename Bits>
bool AnyGe(__m512i v, uint32_t lim) {
  if constexpr (sizeof(Bits) == 2) {
    return _mm512_cmpge_epu16_mask(v, _mm512_set1_epi16(static_cast<int16_t>(lim))) != 0;
  } else {
    return _mm512_cmpge_epu32_mask(v, _mm512_set1_epi32(static_cast<int32_t>(lim))) != 0;
  }
}

// Whether any (unsigned) pattern in v is < lim.
template <typename Bits>
bool AnyLt(__m512i v, uint32_t lim) {
  if constexpr (sizeof(Bits) == 2) {
    return _mm512_cmplt_epu16_mask(v, _mm512_set1_epi16(static_cast<int16_t>(lim))) != 0;
  } else {
    return _mm512_cmplt_epu32_mask(v, _mm512_set1_epi32(static_cast<int32_t>(lim))) != 0;
  }
}

constexpr uint64_t kItemElems = 4096;

// Sum of the per-lane counts in nz (lanes of Bits' width).
template <typename Bits>
uint64_t NonzeroCount(__m512i nz) {
  if constexpr (sizeof(Bits) == 2) {
    // Widen the 16-bit counts (<= 128) by adding the halves of each pair.
    nz = _mm512_add_epi32(_mm512_and_si512(nz, _mm512_set1_epi32(0xffff)),
                          _mm512_srli_epi32(nz, 16));
  }
  return static_cast<uint64_t>(_mm512_reduce_add_epi32(nz));
}

// One full item of format F (fp32, bf16 or fp16; see item_kernels.cc) at
// `p` (any alignment). Returns false, changing nothing but *sub_hint, if
// the item does not qualify (see the top comment); else writes its partial
// and folds its magnitude patterns into *amax_w (lanes of F's width) and
// its zeros into *zeros.
//
// With daz_clear (the caller read MXCSR.DAZ == 0), every finite item is
// summed in the normal mode with the lean scan (ScanChunkLean): one pass,
// no mode guess, and only items with a NaN/Inf go back to the caller.
//
// Otherwise (DAZ set), one pass over memory: SumItem<mode, kFull> sums the item in the mode
// *sub_hint predicts (the mode of the last item that took one; fp16 has
// only kFp16Normal) and scans it at the same time. The partial is kept
// only if the scan, integer-only and so immune to FTZ/DAZ, shows that the
// item fits that mode; if it fits the other mode, that mode re-reads it
// from L1 (once per change of kind: a tensor of subnormals, e.g. a
// vanishing gradient, costs one pass per item too). Items that fit
// neither (NaN/Inf, subnormals mixed with normals, fp16 subnormals) go
// back to the caller's generic paths.
template <typename F>
bool Item(const unsigned char* p, double* partial, __m512i* amax_w, uint64_t* zeros,
          bool* sub_hint, bool daz_clear) {
  using Bits = typename F::Bits;
  constexpr bool kFp16 = F::kBias == 15;
  constexpr bool k32 = sizeof(Bits) == 4;
  constexpr Mode kNormal = k32 ? Mode::kFp32Normal : kFp16 ? Mode::kFp16Normal
                                                           : Mode::kBf16Normal;
  constexpr Mode kSub = k32 ? Mode::kFp32Sub : Mode::kBf16Sub;  // unused for fp16
  ItemScan s;
  if (daz_clear) {
    const double lean = SumItem<kNormal, ScanKind::kLean>(p, &s);
    if (AnyGe<Bits>(s.mx, 2 * F::kNonfinite)) return false;  // NaN/Inf: s.mx is 2a
    *partial = lean;
    if constexpr (k32) {
      *amax_w = _mm512_max_epu32(*amax_w, _mm512_srli_epi32(s.mx, 1));
      *zeros += kItemElems - NonzeroCount<Bits>(s.nz);
    } else {
      *amax_w = _mm512_max_epu16(*amax_w, _mm512_srli_epi16(s.mx, 1));
      *zeros += s.zeros;
    }
    return true;
  }
  const bool guess_sub = !kFp16 && *sub_hint;
  double part;
  if (!kFp16 && guess_sub) {
    part = SumItem<kSub, ScanKind::kFull>(p, &s);
  } else {
    part = SumItem<kNormal, ScanKind::kFull>(p, &s);
  }
  // Zeros and normals: no nonzero magnitude below the smallest normal
  // (mn, see ItemScan), nothing >= Inf.
  const bool fits_normal = !AnyLt<Bits>(s.mn, (1u << F::kMantBits) - 1) &&
                           !AnyGe<Bits>(s.mx, F::kNonfinite);
  // Zeros and subnormals: every magnitude below the smallest normal.
  const bool fits_sub = !kFp16 && !AnyGe<Bits>(s.mx, 1u << F::kMantBits);
  if (guess_sub ? fits_sub : fits_normal) {
    // The guess was right (a zeros-only item fits both: keep the hint).
  } else if (fits_normal) {
    part = SumItem<kNormal, ScanKind::kNone>(p, nullptr);
    *sub_hint = false;
  } else if (!kFp16 && fits_sub) {
    part = SumItem<kSub, ScanKind::kNone>(p, nullptr);
    *sub_hint = true;
  } else {
    *sub_hint = false;
    return false;
  }
  *partial = part;
  *amax_w = k32 ? _mm512_max_epu32(*amax_w, s.mx) : _mm512_max_epu16(*amax_w, s.mx);
  *zeros += k32 ? kItemElems - NonzeroCount<Bits>(s.nz) : s.zeros;
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
