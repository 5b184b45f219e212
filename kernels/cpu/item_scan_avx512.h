// Part of the AVX-512 item path (item_kernels_avx512.h, whose top comment
// explains the whole): the integer scan of an item's bit patterns, folded
// into the same pass as the sums (full scan when MXCSR.DAZ is set, lean
// scan when clear), and the checks on its figures. Included only by the
// AVX-512 build of item_kernels.cc (internal linkage throughout).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/item_lanes_avx512.h"

namespace gnmr::cpu::GNMR_CPU_ISA {
namespace {
namespace avx512 {

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
// The figures of a scan with the saturation count (kSat): the patterns
// a >= the saturation pattern, as per-lane counts in sat for fp32 (<= 256
// per lane), as the total sat_n for bf16/fp16 (mask popcounts, like their
// zeros: the scalar ports are idle while the conversions saturate the
// vector ones). Scans without it keep ItemScan, so their code is what it
// was before the count existed.
struct ItemScanSat : ItemScan {
  __m512i sat;
  uint64_t sat_n;
};
template <bool kSat>
using ScanOf = std::conditional_t<kSat, ItemScanSat, ItemScan>;

// The saturation pattern as the scans compare it: broadcast to lanes of the
// format's width, as thr - 1 for the full scan (which compares t = a - 1,
// signed for 16 bits, where a zero is -1) and as 2 thr for the lean scan
// (u = 2a). thr >= 1 and 2 thr fits the lane (thr < the NaN/Inf pattern).
struct SatThreshold {
  __m512i full;
  __m512i lean;
};
template <Mode M>
SatThreshold MakeSatThreshold(uint32_t thr) {
  if constexpr (ElemBytes(M) == 4) {
    return {_mm512_set1_epi32(static_cast<int32_t>(thr - 1)),
            _mm512_set1_epi32(static_cast<int32_t>(2 * thr))};
  } else {
    return {_mm512_set1_epi16(static_cast<int16_t>(thr - 1)),
            _mm512_set1_epi16(static_cast<int16_t>(2 * thr))};
  }
}

// Folds the 32 elements at `q` into the scan figures (measured on the
// Zen 5 tuning machine, L2-resident 512 KiB: the previous scan, max plus
// two tests, two mask moves and two popcounts per 64 bytes, ran fp32 at
// 63 GB/s, this one at 76; bf16/fp16 ~41-42 -> 42-43, where the lane
// conversions dominate). fp32: six vector integer instructions per 64
// bytes, no mask registers. bf16/fp16: t is negative (signed) exactly for
// zeros, so the signed max of t is mx - 1 (fixed after the item) and its
// sign bits (vpmovw2m, one popcount) count the zeros: five vector
// instructions per 64 bytes.
// kSat: also counts a >= thr into s->sat (a compare into a mask and a
// masked add; 32 bits: a > thr - 1 unsigned; 16 bits: t >= thr - 1 signed).
template <Mode M, bool kSat = false>
__attribute__((always_inline)) inline void ScanChunk(const unsigned char* q, ScanOf<kSat>* s,
                                                     const SatThreshold* thr = nullptr) {
  if constexpr (ElemBytes(M) == 4) {
    const __m512i abs = _mm512_set1_epi32(0x7fffffff);
    const __m512i one = _mm512_set1_epi32(1);
    for (int i = 0; i < 2; ++i) {
      const __m512i a = _mm512_and_si512(_mm512_loadu_si512(q + 64 * i), abs);
      s->mx = _mm512_max_epu32(s->mx, a);
      s->mn = _mm512_min_epu32(s->mn, _mm512_sub_epi32(a, one));
      s->nz = _mm512_add_epi32(s->nz, _mm512_min_epu32(a, one));
      if constexpr (kSat) {
        const __mmask16 k = _mm512_cmpgt_epu32_mask(a, thr->full);  // a > thr - 1
        s->sat = _mm512_mask_add_epi32(s->sat, k, s->sat, one);
      }
    }
  } else {
    const __m512i t = _mm512_sub_epi16(
        _mm512_and_si512(_mm512_loadu_si512(q), _mm512_set1_epi16(0x7fff)), _mm512_set1_epi16(1));
    s->mx = _mm512_max_epi16(s->mx, t);
    s->mn = _mm512_min_epu16(s->mn, t);
    s->zeros += static_cast<uint32_t>(__builtin_popcount(_mm512_movepi16_mask(t)));
    if constexpr (kSat) {  // t >= thr - 1, signed: a zero's t is -1
      s->sat_n += static_cast<uint32_t>(__builtin_popcount(_mm512_cmpge_epi16_mask(t, thr->full)));
    }
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
// kSat: also counts u >= 2 thr (a >= thr) into s->sat (compare + masked
// add: two more vector instructions per 64 bytes).
template <Mode M, bool kSat = false>
__attribute__((always_inline)) inline void ScanChunkLean(const unsigned char* q, ScanOf<kSat>* s,
                                                         const SatThreshold* thr = nullptr) {
  if constexpr (ElemBytes(M) == 4) {
    const __m512i one = _mm512_set1_epi32(1);
    for (int i = 0; i < 2; ++i) {
      const __m512i x = _mm512_loadu_si512(q + 64 * i);
      const __m512i u = _mm512_add_epi32(x, x);
      s->mx = _mm512_max_epu32(s->mx, u);
      s->nz = _mm512_add_epi32(s->nz, _mm512_min_epu32(u, one));
      if constexpr (kSat) {
        const __mmask16 k = _mm512_cmpge_epu32_mask(u, thr->lean);
        s->sat = _mm512_mask_add_epi32(s->sat, k, s->sat, one);
      }
    }
  } else {
    const __m512i x = _mm512_loadu_si512(q);
    const __m512i u = _mm512_add_epi16(x, x);
    s->mx = _mm512_max_epu16(s->mx, u);
    s->zeros += static_cast<uint32_t>(__builtin_popcount(_mm512_testn_epi16_mask(u, u)));
    if constexpr (kSat) {
      s->sat_n += static_cast<uint32_t>(__builtin_popcount(_mm512_cmpge_epu16_mask(u, thr->lean)));
    }
  }
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

// Sum of the per-lane counts in nz (lanes of Bits' width; nz or sat).
template <typename Bits>
uint64_t NonzeroCount(__m512i nz) {
  if constexpr (sizeof(Bits) == 2) {
    // Widen the 16-bit counts (<= 128) by adding the halves of each pair.
    nz = _mm512_add_epi32(_mm512_and_si512(nz, _mm512_set1_epi32(0xffff)),
                          _mm512_srli_epi32(nz, 16));
  }
  return static_cast<uint64_t>(_mm512_reduce_add_epi32(nz));
}

}  // namespace avx512
}  // namespace
}  // namespace gnmr::cpu::GNMR_CPU_ISA
