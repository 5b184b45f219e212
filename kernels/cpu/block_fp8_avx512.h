// AVX-512 VBMI + VNNI path for rowwise e4m3 blocks (MXFP8 e4m3 1x32, FP8
// block 1x128), included only by the AVX-512 build of block_kernels.cc
// (internal linkage throughout) and run only where the CPU has VBMI and
// VNNI (avx512::HasVbmiVnni).
//
// Why it is bit-identical to the scalar path (docs/statistics.md,
// "Canonical order"): per block, Q is an exact integer number of units of
// 2^-18 (item_fp8_avx512.h explains the bucket permutes and vpdpbusd that
// sum it), so any order gives the same Q. The tail of 8 blocks runs in the
// lanes of one vector with the scalar path's IEEE operations, lane for
// lane: q = double(units) * 2^-18, P = q * (s * s), amax = code * s. The 8
// partials of a group whose first block index is a multiple of 8 are an
// exact subtree of the item tree (stats_order.h step 5), added here in the
// tree's own order, ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)); the
// caller adds those of 8 aligned groups the same way and pushes a subtree
// of level 6 (or, near the end, one of level 3). Everything else is an
// integer count, an integer sum or a maximum of exact values.
//
// Cost (docs/perf.md): per 64 codes, as in the per-tensor path, 4 x
// (permute, dot product) and the counts; per group, the folds of each
// block's lanes into one (BlockSums, BlockMaxBytes) and the tail.
//
// A group that holds a NaN code or a scale that is not a finite normal
// number (E8M0 0xff; fp32 zero, subnormal, Inf, NaN) is refused before
// anything is counted; the caller runs the scalar path on its 8 blocks.
// Converting a normal fp32 scale to double and every product here stay
// normal, so FTZ/DAZ cannot change a result.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <limits>

#include "kernels/cpu/block_format.h"
#include "kernels/cpu/block_kernels.h"
#include "kernels/cpu/item_fp8_avx512.h"

namespace gnmr::cpu::GNMR_CPU_ISA {
namespace {
namespace block_avx512 {

using block::Scales;

// Integer figures of the fast groups, folded into the results once.
struct Totals {
  __m512i log2_sum = _mm512_setzero_si512();
  __m512i log2_min = _mm512_set1_epi64(std::numeric_limits<int32_t>::max());
  __m512i log2_max = _mm512_set1_epi64(std::numeric_limits<int32_t>::min());
  __m512d amax = _mm512_setzero_pd();
  // Zero and saturated codes: byte counters (one increment per vector
  // scanned, at most 16 per group), flushed into 64-bit lanes every 8
  // groups scanned; saturated and dead blocks: 64-bit lane counters.
  __m512i zero_bytes = _mm512_setzero_si512(), saturated_bytes = _mm512_setzero_si512();
  __m512i zeros = _mm512_setzero_si512(), saturated = _mm512_setzero_si512();
  __m512i saturated_blocks = _mm512_setzero_si512(), dead = _mm512_setzero_si512();
  uint64_t clamps = 0, blocks = 0, scanned = 0;

  void FlushBytes() {
    zeros = _mm512_add_epi64(zeros, _mm512_sad_epu8(zero_bytes, _mm512_setzero_si512()));
    saturated =
        _mm512_add_epi64(saturated, _mm512_sad_epu8(saturated_bytes, _mm512_setzero_si512()));
    zero_bytes = saturated_bytes = _mm512_setzero_si512();
  }

  void Fold(ElementResult* e, BlockResult* b) {
    if (blocks == 0) return;
    FlushBytes();
    e->zero_codes += static_cast<uint64_t>(_mm512_reduce_add_epi64(zeros));
    e->saturated += static_cast<uint64_t>(_mm512_reduce_add_epi64(saturated));
    const double a = _mm512_reduce_max_pd(amax);
    e->amax = a > e->amax ? a : e->amax;
    b->blocks += blocks;
    b->scaled += blocks;  // every scale of a fast group is finite, non-zero
    b->saturated += static_cast<uint64_t>(_mm512_reduce_add_epi64(saturated_blocks));
    b->dead += static_cast<uint64_t>(_mm512_reduce_add_epi64(dead));
    b->clamps += clamps;
    b->log2_sum += _mm512_reduce_add_epi64(log2_sum);
    const int64_t lo = _mm512_reduce_min_epi64(log2_min), hi = _mm512_reduce_max_epi64(log2_max);
    b->log2_min = lo < b->log2_min ? static_cast<int32_t>(lo) : b->log2_min;
    b->log2_max = hi > b->log2_max ? static_cast<int32_t>(hi) : b->log2_max;
  }
};

// 4 vectors of dwords, block 2i in the low 256 bits of vector i and block
// 2i + 1 in the high: each block's sum (< 2^32) as a 64-bit lane, in block
// order.
inline __m512i BlockSums(__m512i a, __m512i b, __m512i c, __m512i d) {
  // 128-bit lane j of ab: block j's half sums (of a, b); of cd: block 4 + j.
  const __m512i ab =
      _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xdd));
  const __m512i cd =
      _mm512_add_epi32(_mm512_shuffle_i32x4(c, d, 0x88), _mm512_shuffle_i32x4(c, d, 0xdd));
  const __m512i x = _mm512_add_epi32(_mm512_unpacklo_epi32(ab, cd), _mm512_unpackhi_epi32(ab, cd));
  const __m512i y = _mm512_add_epi32(x, _mm512_shuffle_epi32(x, _MM_PERM_BADC));
  // Lane j: dword 0 = block j, dword 1 = block 4 + j.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_cvtepu32_epi64(_mm512_castsi512_si256(_mm512_permutexvar_epi32(order, y)));
}

// The same for the largest byte of each block.
inline __m512i BlockMaxBytes(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m512i ab =
      _mm512_max_epu8(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xdd));
  const __m512i cd =
      _mm512_max_epu8(_mm512_shuffle_i32x4(c, d, 0x88), _mm512_shuffle_i32x4(c, d, 0xdd));
  // Lane j: qword 0 = 8 bytes of block j, qword 1 = of block 4 + j.
  __m512i x = _mm512_max_epu8(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
  x = _mm512_max_epu8(x, _mm512_srli_epi64(x, 32));
  x = _mm512_max_epu8(x, _mm512_srli_epi64(x, 16));
  x = _mm512_max_epu8(x, _mm512_srli_epi64(x, 8));
  x = _mm512_and_si512(x, _mm512_set1_epi64(0xff));
  return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), x);
}

// The scan of two consecutive blocks of B codes at p, each in a 256-bit
// half: the dword sums t01 and t23 (units = t01 + t23 * 2^16, summed over
// the half), the magnitudes' byte maxima, and the zero and saturated
// codes counted into the byte counters of *t.
template <uint32_t B>
__attribute__((target("avx512vbmi,avx512vnni"))) inline void ScanPair(const unsigned char* p,
                                                                      const __m512i (&lo)[4],
                                                                      const __m512i (&hi)[4],
                                                                      __m512i* t01, __m512i* t23,
                                                                      __m512i* max_mag, Totals* t) {
  static_assert(B == 32 || B % 64 == 0, "a block is half a vector or whole vectors");
  constexpr int kVectors = B == 32 ? 1 : static_cast<int>(2 * B / 64);
  constexpr int kPerBlock = B == 32 ? 1 : kVectors / 2;
  const __m512i mag_mask = _mm512_set1_epi8(0x7f);
  const __m512i max_code = _mm512_set1_epi8(0x7e);
  // units = sum over the buckets q of acc[q] * 2^(8 q) = t01 + t23 * 2^16,
  // with t01 = acc[0] + acc[1] * 2^8: the odd buckets are summed first and
  // shifted into the even buckets' accumulators (no zeroed register, no add).
  __m512i odd[2][2], s01[2], s23[2], mx[2];
  __m512i x[kVectors];
  for (int h = 0; h < 2; ++h) {
    odd[h][0] = odd[h][1] = _mm512_setzero_si512();
  }
  for (int k = 0; k < kVectors; ++k) {
    const int h = k / kPerBlock;  // B = 32: both blocks in one vector
    x[k] = _mm512_loadu_si512(p + 64 * k);
    const __m512i a = _mm512_and_si512(x[k], mag_mask);
    mx[h] = k % kPerBlock == 0 ? a : _mm512_max_epu8(mx[h], a);
    const __m512i one = _mm512_set1_epi8(1);
    t->zero_bytes = _mm512_mask_add_epi8(t->zero_bytes, _mm512_testn_epi8_mask(x[k], mag_mask),
                                         t->zero_bytes, one);
    t->saturated_bytes = _mm512_mask_add_epi8(
        t->saturated_bytes, _mm512_cmpeq_epi8_mask(a, max_code), t->saturated_bytes, one);
    for (int q = 0; q < 2; ++q) {
      const __m512i v = _mm512_permutex2var_epi8(lo[2 * q + 1], x[k], hi[2 * q + 1]);
      odd[h][q] = _mm512_dpbusd_epi32(odd[h][q], v, v);
    }
  }
  for (int h = 0; h < 2; ++h) {
    s01[h] = _mm512_slli_epi32(odd[h][0], 8);
    s23[h] = _mm512_slli_epi32(odd[h][1], 8);
  }
  for (int k = 0; k < kVectors; ++k) {
    const int h = k / kPerBlock;
    const __m512i v0 = _mm512_permutex2var_epi8(lo[0], x[k], hi[0]);
    s01[h] = _mm512_dpbusd_epi32(s01[h], v0, v0);
    const __m512i v2 = _mm512_permutex2var_epi8(lo[2], x[k], hi[2]);
    s23[h] = _mm512_dpbusd_epi32(s23[h], v2, v2);
  }
  if constexpr (B == 32) {
    *t01 = s01[0];
    *t23 = s23[0];
    *max_mag = mx[0];
  } else {  // fold each block's 512 bits into one half
    auto fold_add = [](__m512i v0, __m512i v1) {
      const __m512i f0 = _mm512_add_epi32(v0, _mm512_shuffle_i64x2(v0, v0, 0x4e));
      const __m512i f1 = _mm512_add_epi32(v1, _mm512_shuffle_i64x2(v1, v1, 0x4e));
      return _mm512_inserti64x4(f0, _mm512_castsi512_si256(f1), 1);
    };
    auto fold_max = [](__m512i v0, __m512i v1) {
      const __m512i f0 = _mm512_max_epu8(v0, _mm512_shuffle_i64x2(v0, v0, 0x4e));
      const __m512i f1 = _mm512_max_epu8(v1, _mm512_shuffle_i64x2(v1, v1, 0x4e));
      return _mm512_inserti64x4(f0, _mm512_castsi512_si256(f1), 1);
    };
    *t01 = fold_add(s01[0], s01[1]);
    *t23 = fold_add(s23[0], s23[1]);
    *max_mag = fold_max(mx[0], mx[1]);
  }
}

// The value of e4m3 magnitude patterns a <= 0x7e (kCodes[a]) without a
// table (a gather is slow): a normal pattern's double has the exponent
// field E + 1016 and the mantissa bits M << 49, i.e. the bits
// (a + (1016 << 3)) << 49; a subnormal one is a * 2^-9. Both exact.
inline __m512d E4M3Magnitude(__m512i a) {
  const __m512d normal =
      _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_add_epi64(a, _mm512_set1_epi64(1016 << 3)), 49));
  const __m512d subnormal = _mm512_mul_pd(_mm512_cvtepu64_pd(a), _mm512_set1_pd(0x1p-9));
  return _mm512_mask_blend_pd(_mm512_cmplt_epu64_mask(a, _mm512_set1_epi64(8)), normal, subnormal);
}

// Scale entries idx .. idx + 7 as 64-bit lanes.
template <Scales S>
inline __m512i LoadScales(const void* scales, uint64_t idx) {
  const unsigned char* p = static_cast<const unsigned char*>(scales);
  if constexpr (S == Scales::kFp32) {
    return _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 4 * idx)));
  } else {
    return _mm512_cvtepu8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + idx)));
  }
}

// The 8 scale patterns of a group (64-bit lanes) -> s = |decode(scale)|, the
// log2 class of each, and whether the group can take this path.
template <Scales S>
inline bool DecodeScales(__m512i bits, __m512d* s, __m512i* log2, uint64_t* clamps) {
  if constexpr (S == Scales::kE8M0) {
    if (_mm512_cmpeq_epi64_mask(bits, _mm512_set1_epi64(0xff)) != 0) return false;  // NaN
    *clamps += static_cast<uint64_t>(
        __builtin_popcount(_mm512_cmpeq_epi64_mask(bits, _mm512_setzero_si512()) |
                           _mm512_cmpeq_epi64_mask(bits, _mm512_set1_epi64(0xfe))));
    *log2 = _mm512_sub_epi64(bits, _mm512_set1_epi64(127));
    *s = _mm512_castsi512_pd(
        _mm512_slli_epi64(_mm512_add_epi64(bits, _mm512_set1_epi64(1023 - 127)), 52));
  } else {
    static_assert(S == Scales::kFp32, "e4m3 codes come with E8M0 or fp32 scales");
    const __m512i field = _mm512_and_si512(_mm512_srli_epi64(bits, 23), _mm512_set1_epi64(0xff));
    const __mmask8 odd = _mm512_cmpeq_epi64_mask(field, _mm512_setzero_si512()) |
                         _mm512_cmpeq_epi64_mask(field, _mm512_set1_epi64(0xff));
    if (odd != 0) return false;  // zero, subnormal, Inf or NaN: no clamp here
    *log2 = _mm512_sub_epi64(field, _mm512_set1_epi64(127));
    const __m256 f = _mm256_castsi256_ps(_mm512_cvtepi64_epi32(bits));
    *s = _mm512_abs_pd(_mm512_cvtps_pd(f));  // exact: a normal fp32
  }
  return true;
}

// One aligned group of 8 rowwise blocks of B e4m3 codes at p with scale
// patterns `scale_bits`. Returns false, changing nothing, if the scalar
// path must take it; else adds its integer figures to *t and returns the
// item-tree subtree of its 8 partials in *subtree.
// What the scan of a group leaves for its tail, one block per lane.
struct GroupFigures {
  __m512i units, max_mag, log2;
  __m512d s;
  uint64_t clamps;
};

// The scan of one aligned group of 8 rowwise blocks of B e4m3 codes at p
// with scale patterns `scale_bits`. Returns false, changing nothing, if
// the scalar path must take it; else counts its codes into *t and fills
// *f. Apart from GroupTail so that the tails of a run of groups, long
// chains of dependent instructions, overlap.
template <Scales S, uint32_t B>
__attribute__((target("avx512vbmi,avx512vnni"))) inline bool ScanGroup(const unsigned char* p,
                                                                       __m512i scale_bits,
                                                                       const __m512i (&lo)[4],
                                                                       const __m512i (&hi)[4],
                                                                       GroupFigures* f, Totals* t) {
  f->clamps = 0;
  if (!DecodeScales<S>(scale_bits, &f->s, &f->log2, &f->clamps)) return false;
  // A NaN code refuses the group after its codes were counted: count them
  // into a copy.
  Totals counted = *t;
  __m512i t01[4], t23[4], mx[4];
  for (int i = 0; i < 4; ++i) {
    ScanPair<B>(p + 2 * B * i, lo, hi, &t01[i], &t23[i], &mx[i], &counted);
  }
  f->max_mag = BlockMaxBytes(mx[0], mx[1], mx[2], mx[3]);
  if (_mm512_cmpeq_epi64_mask(f->max_mag, _mm512_set1_epi64(0x7f)) != 0) return false;  // NaN
  t->zero_bytes = counted.zero_bytes;
  t->saturated_bytes = counted.saturated_bytes;
  if (++t->scanned % 8 == 0) t->FlushBytes();
  // A block's t01 (or t23), and so every dword summed into it, is at most
  // B * 120^2 * (1 + 2^8) < 2^29 for B <= 128: no 32-bit lane overflows.
  static_assert(B <= 128, "BlockSums' dwords");
  f->units = _mm512_add_epi64(BlockSums(t01[0], t01[1], t01[2], t01[3]),
                              _mm512_slli_epi64(BlockSums(t23[0], t23[1], t23[2], t23[3]), 16));
  return true;
}

// The tail of a group ScanGroup took: its integer figures into *t, and
// the item-tree subtree of its 8 partials.
inline double GroupTail(const GroupFigures& f, Totals* t) {
  // The scalar tail, lane for lane (FinishBlock in block_kernels.cc).
  const __m512d q = _mm512_mul_pd(_mm512_cvtepu64_pd(f.units), _mm512_set1_pd(0x1p-18));
  const __m512d part = _mm512_mul_pd(q, _mm512_mul_pd(f.s, f.s));
  const __m512d l1 = _mm512_add_pd(part, _mm512_permute_pd(part, 0x55));  // p0 + p1, ...
  const __m512d l2 = _mm512_add_pd(l1, _mm512_permutex_pd(l1, _MM_PERM_BADC));
  const __m512d l3 = _mm512_add_pd(l2, _mm512_shuffle_f64x2(l2, l2, 0x4e));
  t->amax = _mm512_max_pd(t->amax, _mm512_mul_pd(E4M3Magnitude(f.max_mag), f.s));
  t->log2_sum = _mm512_add_epi64(t->log2_sum, f.log2);
  t->log2_min = _mm512_min_epi64(t->log2_min, f.log2);
  t->log2_max = _mm512_max_epi64(t->log2_max, f.log2);
  const __m512i one = _mm512_set1_epi64(1);
  t->saturated_blocks = _mm512_mask_add_epi64(
      t->saturated_blocks, _mm512_cmpeq_epi64_mask(f.max_mag, _mm512_set1_epi64(0x7e)),
      t->saturated_blocks, one);
  t->dead = _mm512_mask_add_epi64(t->dead, _mm512_testn_epi64_mask(f.units, f.units), t->dead, one);
  t->clamps += f.clamps;
  t->blocks += 8;
  return _mm512_cvtsd_f64(l3);
}

}  // namespace block_avx512
}  // namespace
}  // namespace gnmr::cpu::GNMR_CPU_ISA
