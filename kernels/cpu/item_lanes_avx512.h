// Part of the AVX-512 item path (item_kernels_avx512.h, whose top comment
// explains the whole): how 32 elements become doubles in the registers
// (Values32), which canonical lane each one lands in (Lane), and the last
// five levels of the lane tree in registers (LastLanes). Included only by
// the AVX-512 build of item_kernels.cc (internal linkage throughout).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace gnmr::cpu::GNMR_CPU_ISA {
namespace {
namespace avx512 {

enum class Mode { kFp32Normal, kFp32Sub, kBf16Normal, kBf16Sub, kFp16Normal };

constexpr int ElemBytes(Mode m) { return m == Mode::kFp32Normal || m == Mode::kFp32Sub ? 4 : 2; }

// The values of 32 consecutive elements at `q` (the integers m of the top
// comment in the Sub modes) as four vectors of 8 doubles, exact. Lane of
// element k of x[i]: Lane<M>(i, k). fp16 converts 8 at a time (ymm):
// measured ~20% faster than 16 at a time plus an extract.
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
  // pattern is the top half of its fp32 pattern). Normal mode: by
  // unpacking with zeros (shuffle ports; the previous shift + AND put the
  // shift on the conversion ports: ~4% slower); Sub mode: integers m by an
  // AND and a shift + AND (even, odd elements). 8 floats -> 8 doubles with
  // no extract. Measured no faster (L2-resident, Zen 5): zmm widening plus
  // extracts, masked 16-bit loads, and doubles built by integer shifts
  // times 2^896 (vmulpd instead of vcvtps2pd).
  for (int h = 0; h < 2; ++h) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * h));
    if constexpr (M == Mode::kBf16Normal) {
      const __m256i zero = _mm256_setzero_si256();
      x[2 * h] = _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, v)));
      x[2 * h + 1] = _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, v)));
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
  if constexpr (M == Mode::kBf16Normal) {
    // x[2h]: elements 0-3 and 8-11 of its 16, x[2h + 1]: 4-7 and 12-15
    // (the unpacks work inside 128-bit halves).
    return (i >> 1) * 16 + (i & 1) * 4 + (k & 3) + (k >> 2) * 8;
  }
  if constexpr (M == Mode::kBf16Sub) {
    return (i >> 1) * 16 + 2 * k + (i & 1);  // x[2h]: even elements, x[2h + 1]: odd
  }
  return 8 * i + k;
}

// For canonical lane 8v + m (of a chunk's 32), where Values32's vectors
// keep it: x[2 (v / 2) + src / 8][src % 8] with src = Perm<M>().src[v][m],
// i.e. a two-source permute index (checked at compile time: each group of
// 8 canonical lanes comes from one pair of vectors).
struct LanePerm {
  int64_t src[4][8];
};
template <Mode M>
constexpr LanePerm Perm() {
  LanePerm p{};
  for (int i = 0; i < 4; ++i) {
    for (int k = 0; k < 8; ++k) {
      const int lane = Lane<M>(i, k);
      p.src[lane / 8][lane % 8] = (i & 1) * 8 + k;
      if (i / 2 != lane / 16) p.src[0][0] = -1;  // not a pair permute: fails below
    }
  }
  return p;
}

// Steps s = 16, 8, 4, 2, 1 of the lane tree (stats_order.h step 4) over the
// 32 lanes in t[0..3] (Values32's layout), in vector registers: the lanes
// are first put in canonical order (four two-source permutes), then each
// level adds lane j + s onto lane j (IEEE addition commutes, so which
// operand comes first does not matter). The scalar tree it replaces (32
// moves through memory and 31 adds) cost ~10% of a bf16 item in cache.
template <Mode M>
__attribute__((always_inline)) inline double LastLanes(const __m512d t[4]) {
  static constexpr LanePerm kPerm = Perm<M>();
  static_assert(kPerm.src[0][0] >= 0, "Values32 layout is not a pair permute");
  __m512d c[4];
  for (int v = 0; v < 4; ++v) {
    const __m512i idx = _mm512_loadu_si512(kPerm.src[v]);
    c[v] = _mm512_permutex2var_pd(t[2 * (v / 2)], idx, t[2 * (v / 2) + 1]);
  }
  __m512d a = _mm512_add_pd(_mm512_add_pd(c[0], c[2]), _mm512_add_pd(c[1], c[3]));  // s = 16, 8
  // s = 8 above is (c0 + c2) + (c1 + c3): lane j of c0 + c2 is l[j] (after
  // s = 16) and lane j of c1 + c3 is l[j + 8], as the canonical tree adds.
  __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(a), _mm512_extractf64x4_pd(a, 1));  // s = 4
  __m128d q = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));      // s = 2
  return _mm_cvtsd_f64(_mm_add_sd(q, _mm_unpackhi_pd(q, q)));                          // s = 1
}

}  // namespace avx512
}  // namespace
}  // namespace gnmr::cpu::GNMR_CPU_ISA
