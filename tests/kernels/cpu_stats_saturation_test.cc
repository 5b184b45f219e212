// The saturation count (UnitStats::saturated, kernels/stats_order.h) on the
// CPU path: the threshold rule of kernels/saturation.h against brute force
// over every pattern, hand-made edge patterns with known counts, and random
// tensors built to reach every item path (AVX-512 lean and full scans,
// generic fast items, the scalar path for partial and NaN/Inf items),
// compared with the literal reference on every ISA build, at unaligned
// starts, with FTZ/DAZ clear and set.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "kernels/cpu/reference_stats.h"
#include "kernels/cpu_stats.h"
#include "kernels/saturation.h"
#include "tests/client/stats_test_util.h"

namespace gnmr {
namespace {

using testing::Bits;
using testing::ExpectSame;
using testing::TestTensor;

constexpr DType kAllDtypes[] = {DType::kFp32, DType::kBf16, DType::kFp16, DType::kFp8E4M3,
                                DType::kFp8E5M2};
constexpr cpu::Isa kIsas[] = {cpu::Isa::kBaseline, cpu::Isa::kAvx2, cpu::Isa::kAvx512};
constexpr float kInf = std::numeric_limits<float>::infinity();

uint32_t SignBit(DType d) {
  return DTypeSize(d) == 4 ? 0x80000000u : DTypeSize(d) == 2 ? 0x8000u : 0x80u;
}

// The value (unscaled) of magnitude pattern a of dtype d, by the reference.
double PatternValue(DType d, uint32_t a) {
  TestTensor t(d, 1);
  t.SetBits(0, a);
  return cpu::ElementValue(t.Ref(), 0);
}

uint32_t MaxFinite(DType d) { return saturation::BitsOf(d).nonfinite - 1; }

TEST(SaturationThreshold, FormatMaxAndOff) {
  EXPECT_EQ(saturation::Threshold(DType::kFp8E4M3, kSaturationAtFormatMax), 0x7eu);
  EXPECT_EQ(saturation::Threshold(DType::kFp8E5M2, kSaturationAtFormatMax), 0x7bu);
  EXPECT_EQ(saturation::Threshold(DType::kFp16, kSaturationAtFormatMax), 0x7bffu);
  EXPECT_EQ(saturation::Threshold(DType::kBf16, kSaturationAtFormatMax), 0x7f7fu);
  EXPECT_EQ(saturation::Threshold(DType::kFp32, kSaturationAtFormatMax), 0x7f7fffffu);
  EXPECT_EQ(saturation::Threshold(DType::kFp8E4M3, 448.0f), 0x7eu);
  EXPECT_EQ(saturation::Threshold(DType::kFp8E4M3, 447.0f), 0x7eu);  // rounded up
  EXPECT_EQ(saturation::Threshold(DType::kFp8E4M3, 416.0f), 0x7du);
  EXPECT_EQ(saturation::Threshold(DType::kFp8E4M3, 449.0f), 0x7fu);  // counts nothing
  EXPECT_EQ(saturation::Threshold(DType::kFp8E5M2, 57344.0f), 0x7bu);
  for (DType d : kAllDtypes) {
    EXPECT_EQ(saturation::Threshold(d, 0.0f), 0u);
    EXPECT_EQ(saturation::Threshold(d, -0.0f), 0u);
    EXPECT_EQ(saturation::Threshold(d, -1.0f), 0u);
    EXPECT_EQ(saturation::Threshold(d, std::nanf("")), 0u);
    EXPECT_EQ(saturation::Threshold(d, std::numeric_limits<float>::denorm_min()), 1u);
    EXPECT_EQ(saturation::Threshold(d, std::numeric_limits<float>::max()),
              d == DType::kFp32 ? 0x7f7fffffu : saturation::BitsOf(d).nonfinite);
  }
  EXPECT_FALSE(saturation::ValidMagnitude(-1.0f));
  EXPECT_FALSE(saturation::ValidMagnitude(std::nanf("")));
  EXPECT_FALSE(saturation::ValidMagnitude(-kInf));
  EXPECT_TRUE(saturation::ValidMagnitude(-0.0f));
  EXPECT_TRUE(saturation::ValidMagnitude(kInf));
}

// Every pattern's value, just below it, and just above it, as magnitudes:
// the threshold is the least pattern whose value is >= the magnitude.
TEST(SaturationThreshold, LeastPatternAtOrAboveBruteForce) {
  for (DType d : {DType::kBf16, DType::kFp16, DType::kFp8E4M3, DType::kFp8E5M2}) {
    const uint32_t nonfinite = saturation::BitsOf(d).nonfinite;
    std::vector<double> value(nonfinite);
    for (uint32_t a = 0; a < nonfinite; ++a) value[a] = PatternValue(d, a);
    for (uint32_t a = 1; a < nonfinite; ++a) {
      const float v = static_cast<float>(value[a]);  // exact: every value fits fp32
      for (float m : {v, std::nextafter(v, 0.0f), std::nextafter(v, kInf)}) {
        const uint32_t want = static_cast<uint32_t>(
            std::lower_bound(value.begin() + 1, value.end(), static_cast<double>(m)) -
            value.begin());
        ASSERT_EQ(saturation::Threshold(d, m), want) << DTypeName(d) << " m=" << m;
      }
    }
  }
  // fp32: the magnitude's own pattern.
  std::mt19937 rng(5);
  for (int i = 0; i < 10000; ++i) {
    const uint32_t a = 1 + rng() % 0x7f7fffffu;
    float m;
    std::memcpy(&m, &a, 4);
    ASSERT_EQ(saturation::Threshold(DType::kFp32, m), a);
  }
}

UnitStats WithIsa(cpu::Isa isa, const std::vector<TensorRef>& refs, unsigned int csr) {
  UnitStats u;
#if defined(__x86_64__)
  const unsigned int saved = _mm_getcsr();
  _mm_setcsr((saved & ~0x8040u) | csr);
#endif
  const Status s = cpu::ComputeStatsWithIsa(isa, refs.data(), refs.size(), &u);
#if defined(__x86_64__)
  _mm_setcsr(saved);
#endif
  EXPECT_TRUE(s.ok()) << s.ToString();
  return u;
}

// Every ISA build (where available) under DAZ clear and FTZ + DAZ agrees
// with the reference, and returns `want_saturated` when given.
void CheckAllPaths(const std::vector<TensorRef>& refs, int64_t want_saturated = -1) {
  const UnitStats want = cpu::CanonicalStatsNaive(refs.data(), refs.size());
  if (want_saturated >= 0) {
    EXPECT_EQ(want.saturated, static_cast<uint64_t>(want_saturated));
  }
  for (cpu::Isa isa : kIsas) {
    if (!cpu::IsaAvailable(isa)) continue;
    for (unsigned int csr : {0u, 0x8040u}) {
      SCOPED_TRACE(std::string(cpu::IsaName(isa)) + (csr ? " FTZ+DAZ" : ""));
      ExpectSame(WithIsa(isa, refs, csr), want);
    }
  }
}

// The edge patterns of every format, in a partial item and in a full one
// (padded with small normals), with known counts at the format maximum.
TEST(SaturationCount, EdgePatternsAtFormatMax) {
  for (DType d : kAllDtypes) {
    SCOPED_TRACE(DTypeName(d));
    const uint32_t max = MaxFinite(d), sign = SignBit(d);
    const uint32_t nonfinite = saturation::BitsOf(d).nonfinite;
    // Counted: max, -max. Not: one below, NaN/Inf, subnormal, zeros.
    const std::vector<uint32_t> edge = {
        max, max | sign, max - 1, (max - 1) | sign, nonfinite, nonfinite | sign, sign | 1u,
        1u,  0u,         sign,    sign | 0x7fu};
    for (uint64_t n : {uint64_t{11}, uint64_t{4096}, uint64_t{3 * 4096 + 5}}) {
      TestTensor t(d, n, n % 3);
      for (uint64_t i = 0; i < n; ++i) t.SetBits(i, max / 2);  // a mid normal
      for (size_t k = 0; k < edge.size(); ++k) t.SetBits((k * 397) % n, edge[k]);
      TensorRef r = t.Ref();
      r.saturation_magnitude = kSaturationAtFormatMax;
      CheckAllPaths({r}, 2);
      r.saturation_magnitude = 0.0f;  // off: nothing counted
      CheckAllPaths({r}, 0);
    }
  }
}

TEST(SaturationCount, Fp8IgnoresScaleAndE4m3NanIsNotCounted) {
  TestTensor t(DType::kFp8E4M3, 5000);
  for (uint64_t i = 0; i < 5000; ++i) t.SetBits(i, 0x40);
  for (uint64_t i : {3u, 4095u, 4096u, 4999u}) t.SetBits(i, 0x7e);
  t.SetBits(7, 0xfe);
  t.SetBits(8, 0x7f);  // NaN
  t.SetBits(9, 0xff);  // NaN
  for (float scale : {1.0f, 1e-30f, 3.5e4f}) {
    t.set_scale_inv(scale);
    TensorRef r = t.Ref();
    r.saturation_magnitude = kSaturationAtFormatMax;
    CheckAllPaths({r}, 5);
    r.saturation_magnitude = 447.0f;  // rounded up to 0x7e: the same
    CheckAllPaths({r}, 5);
    r.saturation_magnitude = 2.0f;  // 0x40 is 2.0 (stored units)
    CheckAllPaths({r}, 5000 - 2);
  }
}

// Random item kinds: magnitudes from [lo, hi] (random sign, ~3% zeros),
// `special` written once per item. Fractions of the elements reach the
// thresholds tried below.
struct Kind {
  uint32_t lo, hi, special;
};

std::vector<Kind> KindsOf(DType d) {
  const uint32_t max = MaxFinite(d), nonfinite = saturation::BitsOf(d).nonfinite;
  const uint32_t mant = 1u << saturation::BitsOf(d).mant_bits;  // least normal
  return {{max / 2, max, 0},         {max - 3, max, 0},
          {max - 3, max, nonfinite}, {max / 2, max, nonfinite + 1},
          {1, mant - 1, 0},          {1, mant - 1, max},
          {mant, max / 2, mant - 1}, {0, 0, 0},
          {mant, 3 * max / 4, max}};
}

TestTensor Build(DType d, uint64_t n, size_t offset, uint64_t seed) {
  const std::vector<Kind> kinds = KindsOf(d);
  TestTensor t(d, n, offset);
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i < n; ++i) {
    const Kind& k = kinds[(i / 4096) % kinds.size()];
    uint32_t a = 0;
    if (k.hi > 0 && rng() % 32 != 0) a = k.lo + static_cast<uint32_t>(rng() % (k.hi - k.lo + 1u));
    t.SetBits(i, a | (rng() % 2 ? SignBit(d) : 0u));
  }
  for (uint64_t item = 0; item * 4096 < n; ++item) {
    const Kind& k = kinds[item % kinds.size()];
    const uint64_t len = n - item * 4096 < 4096 ? n - item * 4096 : 4096;
    if (k.special != 0) t.SetBits(item * 4096 + rng() % len, k.special);
  }
  return t;
}

TEST(SaturationCount, RandomItemKindsEveryPathMatchesReference) {
  for (DType d : kAllDtypes) {
    SCOPED_TRACE(DTypeName(d));
    const uint32_t max = MaxFinite(d);
    const float v_mid = static_cast<float>(PatternValue(d, 3 * max / 4));
    const float v_sub = static_cast<float>(PatternValue(d, 2));
    const float magnitudes[] = {kSaturationAtFormatMax,
                                static_cast<float>(PatternValue(d, max - 2)),
                                v_mid,
                                std::nextafter(v_mid, kInf),  // rounds up to the next pattern
                                v_sub,
                                std::numeric_limits<float>::max()};
    for (uint64_t tail : {uint64_t{0}, uint64_t{1}, uint64_t{777}}) {
      const uint64_t n = KindsOf(d).size() * 4096 + tail;
      const TestTensor t = Build(d, n, tail % 4, tail + static_cast<uint64_t>(d));
      for (float m : magnitudes) {
        SCOPED_TRACE("tail " + std::to_string(tail) + " magnitude " + std::to_string(m));
        TensorRef r = t.Ref();
        r.saturation_magnitude = m;
        CheckAllPaths({r});
      }
    }
  }
}

// A unit of several tensors: the counts add up; a tensor without counting
// adds nothing, and counting changes no other statistic.
TEST(SaturationCount, UnitSumsTensorsAndLeavesOtherFiguresAlone) {
  const TestTensor a = Build(DType::kBf16, 9 * 4096 + 3, 1, 11);
  const TestTensor b = Build(DType::kFp8E5M2, 9 * 4096, 0, 12);
  TensorRef ra = a.Ref(), rb = b.Ref();
  const UnitStats plain = WithIsa(cpu::SelectedIsa(), {ra, rb}, 0);
  EXPECT_EQ(plain.saturated, 0u);
  ra.saturation_magnitude = 1.0f;
  rb.saturation_magnitude = kSaturationAtFormatMax;
  const UnitStats sa = WithIsa(cpu::SelectedIsa(), {ra}, 0);
  const UnitStats sb = WithIsa(cpu::SelectedIsa(), {rb}, 0);
  const UnitStats both = WithIsa(cpu::SelectedIsa(), {ra, rb}, 0);
  EXPECT_GT(sa.saturated, 0u);
  EXPECT_GT(sb.saturated, 0u);
  EXPECT_EQ(both.saturated, sa.saturated + sb.saturated);
  UnitStats same = both;
  same.saturated = 0;
  ExpectSame(same, plain);
  CheckAllPaths({ra, rb}, static_cast<int64_t>(both.saturated));
}

// e4m3 full items (the integer path of item_fp8_avx512.h where the CPU has
// VBMI): every code in each item, the extremes 448 and 2^-9 side by side,
// an item holding only the largest squares, a NaN item (refused, so the
// generic path counts it) next to clean ones, with and without the count,
// scaled, under DAZ clear and set: the same bits as the canonical order.
TEST(SaturationCount, E4M3ItemsOfEveryCodeMatchCanonical) {
  constexpr uint64_t kNumel = 4096 * 5 + 100;
  TestTensor t(DType::kFp8E4M3, kNumel, 1);
  for (uint64_t i = 0; i < kNumel; ++i) {
    uint32_t code = static_cast<uint32_t>((i * 37) % 256);
    if ((code & 0x7f) == 0x7f) code = 0x01;           // no NaN but in item 3
    if (i / 4096 == 1) code = (i % 2) ? 0x7e : 0xfe;  // all +-448: 2^17.6 each
    if (i / 4096 == 2) code = (i % 3) ? 0x01 : 0x7e;  // least subnormal and max
    t.SetBits(i, code);
  }
  t.SetBits(3 * 4096 + 9, 0x7f);  // NaN
  t.set_scale_inv(0.375f);
  for (float m : {0.0f, kSaturationAtFormatMax, 2.0f, 0.001953125f}) {
    SCOPED_TRACE(m);
    TensorRef r = t.Ref();
    r.saturation_magnitude = m;
    CheckAllPaths({r});
  }
  t.SetBits(3 * 4096 + 9, 0x00);  // the same without the NaN: finite sum
  TensorRef r = t.Ref();
  r.saturation_magnitude = kSaturationAtFormatMax;
  const UnitStats u = WithIsa(cpu::SelectedIsa(), {r}, 0);
  EXPECT_TRUE(std::isfinite(u.sumsq));
  EXPECT_EQ(u.amax, 448.0 * 0.375);
  CheckAllPaths({r});
}

TEST(SaturationCount, InvalidMagnitudeIsRefused) {
  TestTensor t(DType::kFp32, 10);
  for (float m : {-1.0f, std::nanf(""), -kInf}) {
    TensorRef r = t.Ref();
    r.saturation_magnitude = m;
    UnitStats u;
    const Status s = cpu::ComputeStats(&r, 1, &u);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("saturation_magnitude"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace gnmr
