// One ISA build of the CPU statistics kernel (see item_kernels.h).
//
// On AVX-512 builds, full fp32/bf16/fp16 items first try the intrinsics
// path of item_kernels_avx512.h (one pass over memory, denormals included),
// and full e4m3 items the integer path of item_fp8_avx512.h where the CPU
// has VBMI and VNNI; the items they refuse, e5m2, and every item of the AVX2/SSE2
// builds take the two paths below. Two paths per work item, bit-identical by construction:
//
// - Fast path (full items). GCC vector extensions, so the
//   same source becomes AVX-512, AVX2 or SSE2 code. Each group of 16
//   elements of a row is widened to an fp32 bit pattern without arithmetic
//   (fp32 as is, bf16 by a 16-bit shift, fp16/fp8 by re-biasing the
//   exponent, their subnormals by an exact int -> float conversion times a
//   power of two whose result is a normal fp32), converted to double with
//   cvtps2pd and squared into the 256 lane accumulators (lane j = element
//   j of the row, as stats_order.h step 3 requires; 256 independent
//   chains, so the adds pipeline). Only zeros and the integer
//   amax are tracked besides. An item with an fp32/bf16 subnormal is redone
//   (from L1) by a variant where the subnormal m * 2^-149 enters as the
//   normal (2^23 + m) * 2^-149 and the normal 2^-126 is subtracted after
//   the conversion, exactly, in double: cvtps2pd never sees a denormal
//   (which DAZ would flush) and denormals cost little. An item holding a
//   non-finite element goes to the slow path.
// - Slow path (partial items, flagged items): the scalar-per-lane exact
//   decoder: integer operations and an int -> double conversion only.
//
// Saturation (stats_order.h, saturated): a tensor with a saturation pattern
// runs every path instantiated with kSat, which adds one integer compare
// and count per element group to the scan the path already does, in the
// same pass; a tensor without one (gradients) runs the kSat = false
// instantiations, the code as it was before the count existed.
//
// Neither path lets a floating-point instruction see a denormal, so the
// FTZ/DAZ modes of a training framework cannot change a result. Products
// of decoded elements are exact, so FMA contraction cannot either.
#include "kernels/cpu/item_kernels.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/stats_order.h"

#ifndef GNMR_CPU_ISA
#define GNMR_CPU_ISA isa_baseline
#endif

// The vector helpers are internal and inlined; their ABI never matters.
#pragma GCC diagnostic ignored "-Wpsabi"

// fp32/bf16/fp16 items get a dedicated path where AVX-512 (BW, DQ) is
// available (item_kernels_avx512.h).
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
#define GNMR_CPU_AVX512_ITEMS 1
// GCC 12 warns about the deliberately undefined upper halves inside its own
// AVX-512 intrinsic headers (a false positive, GCC PR 105593), for both
// paths below. Clang does not, and does not know -Wmaybe-uninitialized.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/cpu/item_fp8_avx512.h"
#include "kernels/cpu/item_kernels_avx512.h"
#endif

namespace gnmr::cpu::GNMR_CPU_ISA {
namespace {

// A binary format. kNonfinite: smallest magnitude pattern that is Inf or
// NaN; kNanMin: smallest that is NaN (e4m3fn has no Inf: both are 0x7f).
template <typename BitsT, uint32_t kAbs, uint32_t kNonfin, uint32_t kNan, int kMant, int kBiasV>
struct Format {
  using Bits = BitsT;
  static constexpr uint32_t kAbsMask = kAbs;
  static constexpr uint32_t kNonfinite = kNonfin;
  static constexpr uint32_t kNanMin = kNan;
  static constexpr int kMantBits = kMant;
  static constexpr int kBias = kBiasV;
  // Subnormals of this format are subnormal fp32 values too.
  static constexpr bool kFp32Range = kBiasV == 127;
};
using Fp32 = Format<uint32_t, 0x7fffffffu, 0x7f800000u, 0x7f800001u, 23, 127>;
using Bf16 = Format<uint16_t, 0x7fffu, 0x7f80u, 0x7f81u, 7, 127>;
using Fp16 = Format<uint16_t, 0x7fffu, 0x7c00u, 0x7c01u, 10, 15>;
using E5M2 = Format<uint8_t, 0x7fu, 0x7cu, 0x7du, 2, 15>;
using E4M3 = Format<uint8_t, 0x7fu, 0x7fu, 0x7fu, 3, 7>;

constexpr double Pow2(int e) {
  double r = 1.0;
  for (; e > 0; --e) r *= 2.0;
  for (; e < 0; ++e) r *= 0.5;
  return r;
}

// |x| for a finite magnitude bit pattern `a` (sign cleared); exact.
template <typename F>
inline double Decode(uint32_t a) {
  // Normal: re-bias the exponent and widen the mantissa in the bit pattern.
  const uint64_t normal_bits = (static_cast<uint64_t>(a) << (52 - F::kMantBits)) +
                               (static_cast<uint64_t>(1023 - F::kBias) << 52);
  // Subnormal (exponent field 0): mantissa * 2^(1 - bias - mant_bits).
  constexpr double kSubScale = Pow2(1 - F::kBias - F::kMantBits);
  const double sub = static_cast<double>(static_cast<int32_t>(a)) * kSubScale;
  uint64_t sub_bits;
  std::memcpy(&sub_bits, &sub, sizeof sub);
  const uint64_t normal = 0ull - static_cast<uint64_t>(a >= (1u << F::kMantBits));
  const uint64_t bits = (normal_bits & normal) | (sub_bits & ~normal);
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

// Slow path: steps 1-4 of stats_order.h for the work item of `n` <= 4096
// elements at `p`. Missing elements of a partial item would add +0.0 to a
// non-negative lane, which changes nothing, so they are not visited.
// kSat: also counts the finite patterns >= sat (stats_order.h, saturated).
template <typename F, bool kSat>
double SlowItem(const unsigned char* p, uint32_t n, uint32_t sat, uint32_t* amax_bits,
                ItemCounters* c) {
  using Bits = typename F::Bits;
  constexpr uint32_t kLanes = stats_order::kLanes;
  alignas(64) double lane[kLanes];
  for (uint32_t j = 0; j < kLanes; ++j) lane[j] = 0.0;
  uint32_t amax = 0, zeros = 0, nonfinite = 0, nans = 0, saturated = 0;
  const uint32_t rows = (n + kLanes - 1) / kLanes;
  for (uint32_t r = 0; r < rows; ++r) {
    const unsigned char* row = p + static_cast<uint64_t>(r) * kLanes * sizeof(Bits);
    const uint32_t width = r + 1 < rows ? kLanes : n - r * kLanes;
    const uint32_t end = width == kLanes ? kLanes : width;
    for (uint32_t j = 0; j < end; ++j) {
      Bits b;
      std::memcpy(&b, row + j * sizeof(Bits), sizeof b);
      const uint32_t a = b & F::kAbsMask;
      // Non-finite elements become +0 here: they add +0.0, never win amax.
      const uint32_t fa = a & (0u - static_cast<uint32_t>(a < F::kNonfinite));
      const double m = Decode<F>(fa);
      lane[j] += m * m;
      amax = amax > fa ? amax : fa;
      zeros += a == 0;
      nonfinite += a >= F::kNonfinite;
      nans += a >= F::kNanMin;
      if constexpr (kSat) saturated += a - sat < F::kNonfinite - sat;  // sat <= a < nonfinite
    }
  }
  for (uint32_t s = kLanes / 2; s >= 1; s /= 2) {
    for (uint32_t j = 0; j < s; ++j) lane[j] += lane[j + s];
  }
  *amax_bits = *amax_bits > amax ? *amax_bits : amax;
  c->zeros += zeros;
  c->nonfinite += nonfinite;
  c->nans += nans;
  c->saturated += saturated;
  return lane[0];
}

typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef float f32x16 __attribute__((vector_size(64)));
typedef float f32x8 __attribute__((vector_size(32)));
typedef double f64x8 __attribute__((vector_size(64)));
typedef uint16_t u16x16 __attribute__((vector_size(32)));
typedef uint8_t u8x16 __attribute__((vector_size(16)));

// 16 consecutive elements, widened to 32-bit magnitude patterns.
template <typename F>
__attribute__((always_inline)) inline u32x16 Load16(const unsigned char* p) {
  if constexpr (sizeof(typename F::Bits) == 4) {
    u32x16 v;
    std::memcpy(&v, p, sizeof v);
    return v & F::kAbsMask;
  } else if constexpr (sizeof(typename F::Bits) == 2) {
    u16x16 v;
    std::memcpy(&v, p, sizeof v);
    return __builtin_convertvector(v, u32x16) & F::kAbsMask;
  } else {
    u8x16 v;
    std::memcpy(&v, p, sizeof v);
    return __builtin_convertvector(v, u32x16) & F::kAbsMask;
  }
}

// The fp32 value of finite magnitude patterns (exact; see the top comment).
template <typename F>
__attribute__((always_inline)) inline f32x16 ToF32(const u32x16& a) {
  if constexpr (F::kFp32Range) {
    const u32x16 bits = a << (23 - F::kMantBits);
    f32x16 f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  } else {
    const u32x16 normal = (a << (23 - F::kMantBits)) + ((127u - F::kBias) << 23);
    constexpr float kSub = static_cast<float>(Pow2(1 - F::kBias - F::kMantBits));
    const f32x16 sub = __builtin_convertvector((i32x16)a, f32x16) * kSub;
    u32x16 sub_bits;
    std::memcpy(&sub_bits, &sub, sizeof sub);
    const u32x16 is_normal = (u32x16)(a >= (1u << F::kMantBits));
    const u32x16 bits = (normal & is_normal) | (sub_bits & ~is_normal);
    f32x16 f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
}

// The double values of the finite magnitude patterns a[0..8) and a[8..16).
template <typename F, bool kSub>
__attribute__((always_inline)) inline void ToF64(const u32x16& a, f64x8* lo, f64x8* hi) {
  u32x16 sub = u32x16{};
  if constexpr (kSub) {
    // An fp32 subnormal m * 2^-149 becomes the normal (2^23 + m) * 2^-149,
    // and the normal 2^-126 is subtracted in double, exactly.
    sub = (u32x16)((a - 1u) < ((1u << F::kMantBits) - 1u)) & (1u << F::kMantBits);
  }
  const f32x16 f = ToF32<F>(a | sub);
  f32x8 h[2];
  std::memcpy(h, &f, sizeof h);
  *lo = __builtin_convertvector(h[0], f64x8);
  *hi = __builtin_convertvector(h[1], f64x8);
  if constexpr (kSub) {
    const u32x16 corr_bits = sub << (23 - F::kMantBits);
    f32x8 c[2];
    std::memcpy(c, &corr_bits, sizeof c);
    *lo -= __builtin_convertvector(c[0], f64x8);
    *hi -= __builtin_convertvector(c[1], f64x8);
  }
}

// Fast path for a full item. Returns false (and changes nothing) if the
// item needs another path: a non-finite element, or (kSub false, fp32/bf16
// only) a subnormal one. Rows stream through all 256 lane accumulators
// (kept in L1): lane blocks with register accumulators and rows strided
// inside the item were 2.5x slower (they defeat the prefetcher).
// kSat: also counts the patterns >= sat into *saturated (a committed item
// is all finite, so no upper bound is needed).
template <typename F, bool kSub, bool kSat>
bool FastItem(const unsigned char* p, uint32_t sat, double* partial, u32x16* amax, uint64_t* zeros,
              uint64_t* saturated) {
  constexpr uint32_t kLanes = stats_order::kLanes;
  constexpr uint32_t kGroups = kLanes / 16;
  constexpr uint32_t kBlock = kGroups;  // one block: measured 2.5x faster than 4
  constexpr size_t kElem = sizeof(typename F::Bits);
  constexpr size_t kRowBytes = kLanes * kElem;
  f64x8 acc[2 * kGroups];
  i32x16 bad = i32x16{};
  i32x16 zc = i32x16{};
  i32x16 sc = i32x16{};
  u32x16 am = *amax;
  for (uint32_t b = 0; b < kGroups; b += kBlock) {
    f64x8 blk[2 * kBlock];
    for (uint32_t v = 0; v < 2 * kBlock; ++v) blk[v] = f64x8{};
    for (uint32_t r = 0; r < stats_order::kRowsPerItem; ++r) {
      const unsigned char* row = p + r * kRowBytes + b * 16 * kElem;
#pragma GCC unroll 4
      for (uint32_t g = 0; g < kBlock; ++g) {
        const u32x16 a = Load16<F>(row + g * 16 * kElem);
        bad |= a >= F::kNonfinite;
        if constexpr (F::kFp32Range && !kSub) bad |= (a - 1u) < ((1u << F::kMantBits) - 1u);
        zc -= a == 0u;
        if constexpr (kSat) sc -= a >= sat;
        am = am > a ? am : a;
        f64x8 lo, hi;
        ToF64<F, kSub && F::kFp32Range>(a, &lo, &hi);
        blk[2 * g] += lo * lo;
        blk[2 * g + 1] += hi * hi;
      }
    }
    for (uint32_t v = 0; v < 2 * kBlock; ++v) acc[2 * b + v] = blk[v];
  }
  int32_t any_bad = 0;
  for (int i = 0; i < 16; ++i) any_bad |= bad[i];
  if (any_bad) return false;
  // Lane tree (step 4): vectors of 8 lanes for s >= 8, then scalars.
  for (uint32_t s = kGroups; s >= 1; s /= 2) {
    for (uint32_t v = 0; v < s; ++v) acc[v] += acc[v + s];
  }
  double l[8];
  for (int j = 0; j < 8; ++j) l[j] = acc[0][j];
  for (int s = 4; s >= 1; s /= 2) {
    for (int j = 0; j < s; ++j) l[j] += l[j + s];
  }
  *partial = l[0];
  uint64_t z = 0;
  for (int i = 0; i < 16; ++i) z += static_cast<uint32_t>(zc[i]);
  *zeros += z;
  if constexpr (kSat) {
    uint64_t n = 0;
    for (int i = 0; i < 16; ++i) n += static_cast<uint32_t>(sc[i]);
    *saturated += n;
  }
  *amax = am;
  return true;
}

// kSat: with the saturation count (pattern `sat`); without, `sat` is unused
// and every path runs the code it ran before the count existed.
template <typename F, bool kSat>
uint64_t ItemsOf(const unsigned char* data, uint64_t numel, uint32_t sat, double* partials,
                 ItemCounters* c) {
  constexpr uint64_t kItem = stats_order::kItemElems;
  uint32_t amax_bits = 0;
  u32x16 amax_vec = u32x16{};
  uint64_t fast_zeros = 0, fast_sat = 0;
#ifdef GNMR_CPU_AVX512_ITEMS
  constexpr bool kAvx512Item = sizeof(typename F::Bits) >= 2;  // not fp8
  constexpr bool kE4M3 = std::is_same_v<F, E4M3>;              // VBMI + VNNI: item_fp8_avx512.h
  const bool vbmi = kE4M3 && avx512::HasVbmiVnni();
  __m512i amax_w = _mm512_setzero_si512();
  bool sub_hint = false;  // see avx512::Item
  // DAZ (MXCSR bit 6) clear: the lean single pass (avx512::Item). Read once
  // per call: a caller cannot change it while we run on its thread.
  const bool daz_clear = (_mm_getcsr() & 0x40u) == 0;
#endif
  uint64_t k = 0;
  for (uint64_t first = 0; first < numel; first += kItem, ++k) {
    const unsigned char* p = data + first * sizeof(typename F::Bits);
    const uint32_t n = static_cast<uint32_t>(numel - first < kItem ? numel - first : kItem);
    if (n == kItem) {
#ifdef GNMR_CPU_AVX512_ITEMS
      if constexpr (kAvx512Item) {
        if (avx512::Item<F, kSat>(p, sat, &partials[k], &amax_w, &fast_zeros, &fast_sat, &sub_hint,
                                  daz_clear)) {
          continue;
        }
      }
      if constexpr (kE4M3) {
        if (vbmi && avx512::E4M3Item<kSat>(p, sat, &partials[k], &amax_w, &fast_zeros, &fast_sat)) {
          continue;
        }
      }
#endif
      // A failed attempt re-reads the item from L1 (8-16 KiB), not memory.
      if (FastItem<F, false, kSat>(p, sat, &partials[k], &amax_vec, &fast_zeros, &fast_sat)) {
        continue;
      }
      if (F::kFp32Range &&
          FastItem<F, true, kSat>(p, sat, &partials[k], &amax_vec, &fast_zeros, &fast_sat)) {
        continue;
      }
    }
    partials[k] = SlowItem<F, kSat>(p, n, sat, &amax_bits, c);
  }
  for (int i = 0; i < 16; ++i) amax_bits = amax_bits > amax_vec[i] ? amax_bits : amax_vec[i];
#ifdef GNMR_CPU_AVX512_ITEMS
  if constexpr (kAvx512Item) {
    const uint32_t m = avx512::MaxPattern<typename F::Bits>(amax_w);
    amax_bits = amax_bits > m ? amax_bits : m;
  }
  if constexpr (kE4M3) {
    const uint32_t m = avx512::MaxPattern<uint8_t>(amax_w) >> 1;  // bytes of 2a
    amax_bits = amax_bits > m ? amax_bits : m;
  }
#endif
  c->zeros += fast_zeros;
  c->saturated += fast_sat;
  const double amax = Decode<F>(amax_bits);
  c->amax = c->amax > amax ? c->amax : amax;
  return k;
}

template <typename F>
uint64_t ItemsOf(const unsigned char* data, uint64_t numel, uint32_t sat, double* partials,
                 ItemCounters* c) {
  return sat == 0 ? ItemsOf<F, false>(data, numel, 0, partials, c)
                  : ItemsOf<F, true>(data, numel, sat, partials, c);
}

}  // namespace

uint64_t Items(DType dtype, const unsigned char* data, uint64_t numel, uint32_t saturation,
               double* partials, ItemCounters* c) {
  switch (dtype) {
    case DType::kFp32:
      return ItemsOf<Fp32>(data, numel, saturation, partials, c);
    case DType::kBf16:
      return ItemsOf<Bf16>(data, numel, saturation, partials, c);
    case DType::kFp16:
      return ItemsOf<Fp16>(data, numel, saturation, partials, c);
    case DType::kFp8E4M3:
      return ItemsOf<E4M3>(data, numel, saturation, partials, c);
    case DType::kFp8E5M2:
      return ItemsOf<E5M2>(data, numel, saturation, partials, c);
    default:
      return 0;  // checked by the caller
  }
}

}  // namespace gnmr::cpu::GNMR_CPU_ISA
