// Part of the AVX-512 item path (item_kernels_avx512.h, whose top comment
// explains the whole): the integer scan of an item's bit patterns, folded
// into the same pass as the sums (full scan when MXCSR.DAZ is set, lean
// scan when clear), and the checks on its figures. Included only by the
// AVX-512 build of item_kernels.cc (internal linkage throughout).
#pragma once

#include <immintrin.h>

#include <cstdint>

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

}  // namespace avx512
}  // namespace
}  // namespace gnmr::cpu::GNMR_CPU_ISA
