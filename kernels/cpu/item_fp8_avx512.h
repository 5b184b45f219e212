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
// How: every finite magnitude pattern a is v * 2^(4q) units of 2^-9,
// with q = (E - 1) / 4 in 0..3 and v = M * 2^((E - 1) % 4) <= 120 (a byte
// that is both a valid unsigned and a valid signed 8-bit operand), so
// a^2 = v^2 * 2^(8q) units of 2^-18. Per exponent bucket q, one two-source
// byte permute (vpermi2b: a 128-entry table indexed by the low 7 bits of
// the element, so the sign bit needs no masking) maps 64 elements to their
// v (0 outside the bucket), and one vpdpbusd adds the squares of each
// group of four into a 32-bit lane (an item adds at most 256 squares of
// < 2^14 per lane). Per 64 bytes: 4 x (permute, dot product), plus the
// scan: u = 2a (sign shifted out), max(u), zeros by a mask popcount, and
// with kSat u >= 2 thr. Two chunks per iteration with their own
// accumulators, so the dot products' latency (4-5 cycles, one chain per
// bucket) does not bound the loop. The byte-plane form this replaced (five
// permutes, five vpsadbw and five adds per 64 bytes) ran 1.24x the bf16
// statistics per byte in cache (docs/perf.md).
// No floating-point instruction sees an element, so FTZ/DAZ cannot change
// a result (the bf16 path, by contrast, is bound by its conversions).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace gnmr::cpu::GNMR_CPU_ISA {
namespace {
namespace avx512 {

// The square root of the square of the finite e4m3 magnitude pattern a, in
// units of 2^-9 (the least subnormal): M * 2^(E - 1).
constexpr uint32_t E4M3Units(uint32_t a) {
  const uint32_t field = a >> 3;
  const uint32_t m = field == 0 ? (a & 7u) : 8u + (a & 7u);
  const uint32_t e = field == 0 ? 1u : field;
  return m << (e - 1);
}

// bucket[q][a] = E4M3Units(a) / 2^(4q) if (E - 1) / 4 == q, else 0, for
// a = 0..127 (0x7f, the NaN, gets a value too: an item holding one is
// refused before it counts).
struct ExponentBuckets {
  static constexpr int kBuckets = 4;  // E - 1 <= 14
  alignas(64) uint8_t bucket[kBuckets][128];
};
constexpr ExponentBuckets MakeE4M3Buckets() {
  ExponentBuckets b{};
  for (uint32_t a = 0; a < 128; ++a) {
    const uint32_t field = a >> 3;
    const uint32_t e = field == 0 ? 1u : field;
    const int q = static_cast<int>((e - 1) / 4);
    b.bucket[q][a] = static_cast<uint8_t>(E4M3Units(a) >> (4 * q));
  }
  return b;
}
constexpr bool BucketsAreSignedBytes(const ExponentBuckets& b) {
  for (const auto& row : b.bucket) {
    for (uint8_t v : row) {
      if (v > 127) return false;
    }
  }
  return true;
}
static_assert(BucketsAreSignedBytes(MakeE4M3Buckets()), "vpdpbusd's signed operand");

inline bool HasVbmiVnni() {
  static const bool has =
      __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vnni");
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
__attribute__((target("avx512vbmi,avx512vnni"))) bool E4M3Item(const unsigned char* p, uint32_t sat,
                                                               double* partial, __m512i* amax_u,
                                                               uint64_t* zeros,
                                                               uint64_t* saturated) {
  static constexpr ExponentBuckets kTables = MakeE4M3Buckets();
  constexpr int kBuckets = ExponentBuckets::kBuckets;
  __m512i lo[kBuckets], hi[kBuckets], acc[2][kBuckets];
  for (int q = 0; q < kBuckets; ++q) {
    lo[q] = _mm512_load_si512(kTables.bucket[q]);
    hi[q] = _mm512_load_si512(kTables.bucket[q] + 64);
    acc[0][q] = acc[1][q] = _mm512_setzero_si512();
  }
  // u = 2a <= 254; a >= thr iff u >= 2 thr (thr <= 0x7f; larger counts nothing).
  const __m512i two_thr = _mm512_set1_epi8(static_cast<char>(sat >= 128 ? 255 : 2 * sat));
  __m512i mx = _mm512_setzero_si512();
  uint64_t z = 0, s = 0;
  for (int c = 0; c < 4096 / 64; c += 2) {
    for (int h = 0; h < 2; ++h) {
      const __m512i x = _mm512_loadu_si512(p + 64 * (c + h));
      const __m512i u = _mm512_add_epi8(x, x);
      mx = _mm512_max_epu8(mx, u);
      z += static_cast<uint64_t>(__builtin_popcountll(_mm512_testn_epi8_mask(u, u)));
      if constexpr (kSat) {
        s += static_cast<uint64_t>(__builtin_popcountll(_mm512_cmpge_epu8_mask(u, two_thr)));
      }
      for (int q = 0; q < kBuckets; ++q) {
        const __m512i v = _mm512_permutex2var_epi8(lo[q], x, hi[q]);
        acc[h][q] = _mm512_dpbusd_epi32(acc[h][q], v, v);
      }
    }
  }
  if (_mm512_cmpge_epu8_mask(mx, _mm512_set1_epi8(static_cast<char>(0xfe))) != 0) return false;
  uint64_t units = 0;
  for (int q = 0; q < kBuckets; ++q) {
    const __m512i sum = _mm512_add_epi32(acc[0][q], acc[1][q]);  // lanes < 2^22: no overflow
    units += static_cast<uint64_t>(static_cast<uint32_t>(_mm512_reduce_add_epi32(sum))) << (8 * q);
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
