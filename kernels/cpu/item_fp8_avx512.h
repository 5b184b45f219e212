// AVX-512 VBMI path for full fp8 e4m3 work items, included only by the
// AVX-512 build of item_kernels.cc (internal linkage throughout) and run
// only where the CPU has VBMI (HasVbmi; Ice Lake, Zen 4 and later).
//
// Why it can ignore the lane order of stats_order.h: every e4m3 value is
// M * 2^(E - 10) with an integer M < 16 and E in 1..15 (subnormals: E = 1),
// so its square is an integer number of units of 2^-18, below 2^36, and
// an item's 4096 squares sum to less than 2^48 units. Every partial sum
// the canonical order forms is such a multiple of 2^-18 below 2^30, which
// a double holds exactly: the canonical partial is the exact sum, whatever
// the order. So this path sums the squares as integers, in any order, and
// converts once (exact: < 2^53). e5m2 squares span 2^-32 .. 2^32, where
// the canonical double sums do round, so e5m2 keeps the generic paths.
//
// How: the square of each of the 128 magnitude patterns is cut into five
// byte planes (bits 0-7, ..., 32-39); one two-source byte permute per
// plane (vpermi2b: a 128-entry byte table indexed by the low 7 bits of the
// element, so the sign bit needs no masking) maps 64 elements to that
// plane's bytes, and vpsadbw adds them in groups of 8 into 64-bit lanes.
// Per 64 bytes: 5 x (permute, sad, add), plus the scan: u = 2a (sign
// shifted out), max(u), zeros by a mask popcount, and with kSat u >= 2 thr.
// No floating-point instruction sees an element, so FTZ/DAZ cannot change
// a result (the bf16 path, by contrast, is bound by its conversions).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace gnmr::cpu::GNMR_CPU_ISA {
namespace {
namespace avx512 {

// The square of the finite e4m3 magnitude pattern a, in units of 2^-18 (the
// square of the least subnormal, 2^-9).
constexpr uint64_t E4M3SquareUnits(uint32_t a) {
  const uint32_t field = a >> 3;
  const uint64_t m = field == 0 ? (a & 7u) : 8u + (a & 7u);
  const uint32_t e = field == 0 ? 1u : field;
  return (m * m) << (2 * e - 2);
}

// plane[p][a] = byte p of E4M3SquareUnits(a), a = 0..127 (0x7f, the NaN,
// gets a value too: an item holding one is refused before it counts).
struct SquarePlanes {
  static constexpr int kPlanes = 5;  // 448^2 = 196 * 2^28 units < 2^36
  alignas(64) uint8_t plane[kPlanes][128];
};
constexpr SquarePlanes MakeE4M3SquarePlanes() {
  SquarePlanes s{};
  for (int p = 0; p < SquarePlanes::kPlanes; ++p) {
    for (uint32_t a = 0; a < 128; ++a) {
      s.plane[p][a] = static_cast<uint8_t>(E4M3SquareUnits(a) >> (8 * p));
    }
  }
  return s;
}
static_assert(E4M3SquareUnits(0x7e) >> 40 == 0, "five byte planes hold every square");

inline bool HasVbmi() {
  static const bool has = __builtin_cpu_supports("avx512vbmi");
  return has;
}

// One full e4m3 item (4096 bytes at `p`, any alignment). Returns false,
// changing nothing, if it holds a NaN (the generic paths count it); else
// writes the item's partial (stats_order.h steps 1-4, exact, see above)
// and folds 2 x its magnitude patterns into *amax_u (bytes; MaxPattern
// <uint8_t> of item_kernels_avx512.h halved is the largest pattern), its zeros into
// *zeros and, with kSat, the patterns >= sat into *saturated (a committed
// item is all finite, so no upper bound is needed).
template <bool kSat>
__attribute__((target("avx512vbmi"))) bool E4M3Item(const unsigned char* p, uint32_t sat,
                                                    double* partial, __m512i* amax_u,
                                                    uint64_t* zeros, uint64_t* saturated) {
  static constexpr SquarePlanes kTables = MakeE4M3SquarePlanes();
  constexpr int kPlanes = SquarePlanes::kPlanes;
  __m512i lo[kPlanes], hi[kPlanes], acc[kPlanes];
  for (int k = 0; k < kPlanes; ++k) {
    lo[k] = _mm512_load_si512(kTables.plane[k]);
    hi[k] = _mm512_load_si512(kTables.plane[k] + 64);
    acc[k] = _mm512_setzero_si512();
  }
  // u = 2a <= 254; a >= thr iff u >= 2 thr (thr <= 0x7f; larger counts nothing).
  const __m512i two_thr = _mm512_set1_epi8(static_cast<char>(sat >= 128 ? 255 : 2 * sat));
  const __m512i zero = _mm512_setzero_si512();
  __m512i mx = _mm512_setzero_si512();
  uint64_t z = 0, s = 0;
  for (int c = 0; c < 4096 / 64; ++c) {
    const __m512i x = _mm512_loadu_si512(p + 64 * c);
    const __m512i u = _mm512_add_epi8(x, x);
    mx = _mm512_max_epu8(mx, u);
    z += static_cast<uint64_t>(__builtin_popcountll(_mm512_testn_epi8_mask(u, u)));
    if constexpr (kSat) {
      s += static_cast<uint64_t>(__builtin_popcountll(_mm512_cmpge_epu8_mask(u, two_thr)));
    }
    for (int k = 0; k < kPlanes; ++k) {
      const __m512i bytes = _mm512_permutex2var_epi8(lo[k], x, hi[k]);
      acc[k] = _mm512_add_epi64(acc[k], _mm512_sad_epu8(bytes, zero));
    }
  }
  if (_mm512_cmpge_epu8_mask(mx, _mm512_set1_epi8(static_cast<char>(0xfe))) != 0) return false;
  uint64_t units = 0;
  for (int k = 0; k < kPlanes; ++k) {
    units += static_cast<uint64_t>(_mm512_reduce_add_epi64(acc[k])) << (8 * k);
  }
  *partial = static_cast<double>(units) * 0x1p-18;  // units < 2^48: exact
  *amax_u = _mm512_max_epu8(*amax_u, mx);
  *zeros += z;
  if constexpr (kSat) *saturated += s;
  return true;
}

}  // namespace avx512
}  // namespace
}  // namespace gnmr::cpu::GNMR_CPU_ISA
