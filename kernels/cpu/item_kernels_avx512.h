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
//   whether the item fits the mode it was summed in (DAZ set; with DAZ
//   clear, only whether it has a NaN/Inf). If so the lanes are
//   committed (lane tree as before); if not they are discarded: whatever a
//   NaN, an Inf, or a subnormal flushed by DAZ did to them never reaches a
//   result. An item of the other qualifying kind is re-summed from L1;
//   anything else is refused (below). The two-pass predecessor (scan pass,
//   then an L1 compute pass) left the memory idle during the compute pass:
//   64-68% of the best streaming read for fp32/bf16.
//
// Which items qualify (the others go to the generic paths, exact too).
// When the caller's MXCSR.DAZ is clear (the usual case; ItemsOf reads it
// once per call): every item without NaN/Inf, summed in the normal mode
// with the lean scan (max magnitude and zeros only, ScanChunkLean). With
// DAZ clear cvtps2pd converts fp32/bf16 subnormals exactly and vcvtph2ps
// turns fp16 subnormals into normal floats, and a nonzero square is at
// least 2^-298, a normal double, so neither a denormal input nor FTZ can
// change a sum. When DAZ is set (a trainer may set it), the full scan and:
// - Items of zeros and normals: the fp32 value (bf16: the pattern widened;
//   fp16: vcvtph2ps, exact on normals) is a normal fp32, so cvtps2pd is
//   exact.
// - fp32 / bf16 items of zeros and subnormals only: x = m * 2^-e0 with an
//   integer m (fp32: e0 = 149, m < 2^23; bf16: e0 = 133, m < 2^7),
//   converted exactly (cvtdq2pd / cvtdq2ps). The lanes and the tree then
//   sum m^2 instead of x^2 = m^2 * 2^(-2 e0): every canonical value is ours
//   times 2^(-2 e0), and all of them are normal fp64 numbers (>= 2^-298
//   when nonzero), so each rounding scales exactly and the partial is
//   ours * 2^(-2 e0), exactly.
//   Items with a NaN/Inf, items mixing subnormals and normals, and fp16
//   items with a subnormal are refused. In every committed sum no
//   floating-point instruction saw a denormal input or produced a denormal
//   result, so FTZ/DAZ cannot change a result (a discarded sum may have
//   seen anything).
//
// Measured on the Zen 5 tuning machine (bench/cpu_stats_vs_read, docs/
// perf.md): bf16 is bound by the conversions (vcvtps2pd zmm runs about 1.2
// per cycle there, 4 per 64 bytes of bf16), so every other vector op in
// the loop costs throughput: the lean scan (3 ops per 64 B instead of 5),
// unpack widening (off the conversion ports; shifts compete with them) and
// the vector lane tree (LastLanes) took bf16 in L2 from ~45 to ~48 GB/s.
// (The block structure of SumItem differs for fp32: see there.)
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/item_lanes_avx512.h"
#include "kernels/cpu/item_scan_avx512.h"

namespace gnmr::cpu::GNMR_CPU_ISA {
namespace {
namespace avx512 {

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
// kSat (with a scan): the scan also counts the patterns >= *thr.
template <Mode M, ScanKind K, bool kSat = false>
double SumItem(const unsigned char* p, ScanOf<kSat>* scan, const SatThreshold* thr = nullptr) {
  constexpr bool kScan = K != ScanKind::kNone;
  constexpr int kElem = ElemBytes(M);
  constexpr int kRowBytes = 256 * kElem;
  constexpr int kStepBytes = kRowBytes / 2;  // one row of one 128-lane block
  ScanOf<kSat> sc;
  sc.mx =
      ElemBytes(M) == 4 || K == ScanKind::kLean ? _mm512_setzero_si512() : _mm512_set1_epi16(-1);
  sc.mn = _mm512_set1_epi32(-1);
  sc.nz = _mm512_setzero_si512();
  sc.zeros = 0;
  if constexpr (kSat) sc.sat = _mm512_setzero_si512(), sc.sat_n = 0;
  // One 128-lane block of the item: its 16 half rows into a[16].
  const auto block = [&](int b, __m512d a[16]) __attribute__((always_inline)) {
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
        if constexpr (K == ScanKind::kFull) ScanChunk<M, kSat>(q, &sc, thr);
        if constexpr (K == ScanKind::kLean) ScanChunkLean<M, kSat>(q, &sc, thr);
        __m512d x[4];
        Values32<M>(q, x);
        for (int i = 0; i < 4; ++i) a[4 * c + i] = _mm512_fmadd_pd(x[i], x[i], a[4 * c + i]);
      }
    }
  };
  // Block 0's accumulators wait in memory while block 1 runs. 16-bit
  // formats: two inlined calls, block 1 stays in registers (bf16 +4% in
  // cache). fp32 keeps the loop with both blocks stored: the two-call form
  // was as fast in cache but ~12% slower from memory, reproducibly (we
  // could not find out why without performance counters).
  __m512d acc0[16];
  __m512d acc1[16];
  if constexpr (ElemBytes(M) == 2) {
    block(0, acc0);
    block(1, acc1);
  } else {
    __m512d stored[2][16];
    for (int b = 0; b < 2; ++b) {
      __m512d a[16];
      block(b, a);
      for (int v = 0; v < 16; ++v) stored[b][v] = a[v];
    }
    for (int v = 0; v < 16; ++v) acc0[v] = stored[0][v], acc1[v] = stored[1][v];
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
  for (int v = 0; v < 16; ++v) t[v] = _mm512_add_pd(acc0[v], acc1[v]);
  for (int v = 0; v < 8; ++v) t[v] = _mm512_add_pd(t[v], t[v + 8]);
  for (int v = 0; v < 4; ++v) t[v] = _mm512_add_pd(t[v], t[v + 4]);
  const double l0 = LastLanes<M>(t);
  if constexpr (M == Mode::kBf16Sub) return l0 * 0x1p-266;
  if constexpr (M == Mode::kFp32Sub) return l0 * 0x1p-298;
  return l0;
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
//
// kSat: the scan also counts the patterns >= sat (the saturation pattern,
// stats_order.h), added to *saturated with the rest when the item is
// committed (a committed item is all finite, so no upper bound is needed).
template <typename F, bool kSat>
bool Item(const unsigned char* p, uint32_t sat, double* partial, __m512i* amax_w, uint64_t* zeros,
          uint64_t* saturated, bool* sub_hint, bool daz_clear) {
  using Bits = typename F::Bits;
  constexpr bool kFp16 = F::kBias == 15;
  constexpr bool k32 = sizeof(Bits) == 4;
  constexpr Mode kNormal = k32 ? Mode::kFp32Normal : kFp16 ? Mode::kFp16Normal : Mode::kBf16Normal;
  constexpr Mode kSub = k32 ? Mode::kFp32Sub : Mode::kBf16Sub;  // unused for fp16
  ScanOf<kSat> s;
  SatThreshold thr{};
  if constexpr (kSat) thr = MakeSatThreshold<kNormal>(sat);
  if (daz_clear) {
    const double lean = SumItem<kNormal, ScanKind::kLean, kSat>(p, &s, &thr);
    if (AnyGe<Bits>(s.mx, 2 * F::kNonfinite)) return false;  // NaN/Inf: s.mx is 2a
    *partial = lean;
    if constexpr (kSat) *saturated += k32 ? NonzeroCount<Bits>(s.sat) : s.sat_n;
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
    part = SumItem<kSub, ScanKind::kFull, kSat>(p, &s, &thr);
  } else {
    part = SumItem<kNormal, ScanKind::kFull, kSat>(p, &s, &thr);
  }
  // Zeros and normals: no nonzero magnitude below the smallest normal
  // (mn, see ItemScan), nothing >= Inf.
  const bool fits_normal =
      !AnyLt<Bits>(s.mn, (1u << F::kMantBits) - 1) && !AnyGe<Bits>(s.mx, F::kNonfinite);
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
  if constexpr (kSat) *saturated += k32 ? NonzeroCount<Bits>(s.sat) : s.sat_n;
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
