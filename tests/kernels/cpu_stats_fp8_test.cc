// CPU statistics of fp8 e4m3fn / e5m2 tensors with a per-tensor scale_inv
// (stats_order.h step 5a): bit-identity with the literal canonical order,
// accuracy against a long-double reference, special values, the scale's
// semantics, unaligned starts and every ISA build.
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/reference_stats.h"
#include "kernels/cpu_stats.h"
#include "kernels/stats_order.h"
#include "tests/client/stats_test_util.h"

namespace gnmr {
namespace {

using testing::Bits;
using testing::ExpectSame;
using testing::TestTensor;

UnitStats Stats(const std::vector<TensorRef>& refs) {
  UnitStats u;
  Status s = cpu::ComputeStats(refs.data(), refs.size(), &u);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return u;
}

class Fp8Random : public ::testing::TestWithParam<std::tuple<DType, uint64_t, float>> {};

TEST_P(Fp8Random, MatchesCanonicalAndReference) {
  const auto [dtype, n, scale_inv] = GetParam();
  TestTensor t(dtype, n, n % 5);
  // Spread over normals and subnormals of both formats.
  t.FillNormal(n * 13 + static_cast<uint64_t>(dtype), dtype == DType::kFp8E4M3 ? 0.05f : 1e-4f);
  t.set_scale_inv(scale_inv);
  const std::vector<TensorRef> refs = {t.Ref()};
  const UnitStats fast = Stats(refs);
  ExpectSame(fast, cpu::CanonicalStatsNaive(refs.data(), refs.size()));
  const cpu::ReferenceStats ref = cpu::ComputeReferenceStats(refs.data(), refs.size());
  const long double err = std::fabs(static_cast<long double>(fast.sumsq) - ref.sumsq_finite);
  EXPECT_LE(err, ref.sumsq_finite * 1e-13L) << "n=" << n;
  EXPECT_EQ(fast.amax, ref.amax);
  EXPECT_EQ(fast.zeros, ref.zeros);
  EXPECT_EQ(fast.nonfinite, 0u);
  EXPECT_EQ(fast.numel, n);
}

INSTANTIATE_TEST_SUITE_P(Fp8, Fp8Random,
                         ::testing::Combine(::testing::Values(DType::kFp8E4M3, DType::kFp8E5M2),
                                            ::testing::Values(0u, 1u, 255u, 4095u, 4096u, 4097u,
                                                              65553u, 1048576u, 2000003u),
                                            ::testing::Values(1.0f, 3.0e-3f, 1234.5f)));

TEST(Fp8, ScaleEntersOncePerTensor) {
  for (DType dtype : {DType::kFp8E4M3, DType::kFp8E5M2}) {
    TestTensor t(dtype, 20000);
    t.FillNormal(7, 0.5f);
    const UnitStats one = Stats({t.Ref()});
    const float s = 0.3f;  // not a power of two
    t.set_scale_inv(s);
    const UnitStats scaled = Stats({t.Ref()});
    const double ds = static_cast<double>(s);
    EXPECT_EQ(Bits(scaled.sumsq), Bits(one.sumsq * (ds * ds)));
    EXPECT_EQ(Bits(scaled.amax), Bits(one.amax * ds));
    EXPECT_EQ(scaled.zeros, one.zeros);
    t.set_scale_inv(-s);  // the magnitude of the scale counts
    ExpectSame(Stats({t.Ref()}), scaled);
    t.set_scale_inv(0.0f);  // zeros are stored zeros, whatever the scale
    const UnitStats zero = Stats({t.Ref()});
    EXPECT_EQ(Bits(zero.sumsq), Bits(0.0));
    EXPECT_EQ(zero.zeros, one.zeros);
  }
}

TEST(Fp8, NonFiniteScaleIsRejected) {
  uint8_t x[4] = {1, 2, 3, 4};
  TensorRef t;
  t.data = x;
  t.numel = 4;
  t.dtype = DType::kFp8E5M2;
  UnitStats u;
  t.scale_inv = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(cpu::ComputeStats(&t, 1, &u).code(), StatusCode::kInvalidArgument);
  t.scale_inv = std::numeric_limits<float>::infinity();
  EXPECT_EQ(cpu::ComputeStats(&t, 1, &u).code(), StatusCode::kInvalidArgument);
  t.dtype = DType::kFp32;  // other dtypes ignore scale_inv
  t.numel = 1;             // the 4 bytes are one fp32
  EXPECT_TRUE(cpu::ComputeStats(&t, 1, &u).ok());
}

// TensorRef::scale_inv_ptr: the scale is read at every computation (FP8
// recipes rescale each step), replacing the static scale_inv.
TEST(Fp8, ScaleInvPointerIsReadAtEachComputation) {
  for (DType dtype : {DType::kFp8E4M3, DType::kFp8E5M2}) {
    TestTensor t(dtype, 9000, 3);
    t.FillNormal(11, 0.5f);
    float live = 0.3f;
    TensorRef by_ptr = t.Ref();
    by_ptr.scale_inv = 99.0f;  // ignored when the pointer is set
    by_ptr.scale_inv_ptr = &live;
    for (float s : {0.3f, 2.5f, -0.125f, 0.0f}) {
      live = s;
      t.set_scale_inv(s);
      ExpectSame(Stats({by_ptr}), Stats({t.Ref()}));
      ExpectSame(Stats({by_ptr}), cpu::CanonicalStatsNaive(&by_ptr, 1));
    }
  }
}

// A NaN/Inf scale read through the pointer is data, not a caller error:
// the unit's sumsq becomes the canonical NaN and the tensor adds nothing to
// amax; counts and numel still cover it (stats_order.h step 5a).
TEST(Fp8, NonFiniteScaleThroughPointerMakesSumsqNaN) {
  TestTensor fp8(DType::kFp8E4M3, 5000);
  fp8.FillNormal(3, 4.0f);  // larger magnitudes than the fp32 tensor
  fp8.SetBits(7, 0);
  TestTensor fp32(DType::kFp32, 300);
  fp32.FillNormal(4, 0.1f);
  fp32.SetBits(0, 0);
  const UnitStats only_fp32 = Stats({fp32.Ref()});
  const UnitStats both_fp8 = Stats({fp8.Ref()});
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    TensorRef r = fp8.Ref();
    r.scale_inv_ptr = &bad;
    const UnitStats u = Stats({fp32.Ref(), r});
    EXPECT_EQ(Bits(u.sumsq), stats_order::kCanonicalNanBits) << bad;
    EXPECT_EQ(Bits(u.amax), Bits(only_fp32.amax)) << bad;
    EXPECT_EQ(u.zeros, only_fp32.zeros + both_fp8.zeros);
    EXPECT_EQ(u.nonfinite, 0u);
    EXPECT_EQ(u.numel, 5300u);
  }
}

#if defined(__x86_64__)
// A subnormal scale_inv is a value like any other, also for a caller with
// DAZ set (a plain float -> double conversion would read it as 0).
TEST(Fp8, SubnormalScaleUnderDaz) {
  TestTensor t(DType::kFp8E4M3, 3000);
  t.FillNormal(5, 1.0f);
  t.set_scale_inv(1e-40f);  // subnormal float
  const UnitStats plain = Stats({t.Ref()});
  ASSERT_GT(plain.sumsq, 0.0);
  const unsigned int saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ + DAZ
  const UnitStats daz = Stats({t.Ref()});
  _mm_setcsr(saved);
  ExpectSame(daz, plain);
}
#endif

TEST(Fp8, ScaleInvPointerChecks) {
  uint8_t x[4] = {1, 2, 3, 4};
  alignas(8) unsigned char raw[8] = {};
  TensorRef t;
  t.data = x;
  t.numel = 4;
  t.dtype = DType::kFp8E5M2;
  t.scale_inv = std::numeric_limits<float>::quiet_NaN();  // unused with a pointer
  float s = 1.0f;
  t.scale_inv_ptr = &s;
  UnitStats u;
  EXPECT_TRUE(cpu::ComputeStats(&t, 1, &u).ok());
  t.scale_inv_ptr = reinterpret_cast<const float*>(raw + 1);  // misaligned
  EXPECT_EQ(cpu::ComputeStats(&t, 1, &u).code(), StatusCode::kInvalidArgument);
  t.scale_inv_ptr = nullptr;  // back to the static (NaN) scale: rejected
  EXPECT_EQ(cpu::ComputeStats(&t, 1, &u).code(), StatusCode::kInvalidArgument);
}

TEST(Fp8, E4M3HasNaNButNoInf) {
  TestTensor t(DType::kFp8E4M3, 9000, 3);
  t.FillNormal(1, 1.0f);
  t.SetBits(5, 0x7e);     // 448, the largest finite
  t.SetBits(6, 0x7f);     // NaN
  t.SetBits(7000, 0xff);  // -NaN
  t.SetBits(8, 0x80);     // -0
  t.SetBits(9, 0x01);     // smallest subnormal 2^-9
  const UnitStats u = Stats({t.Ref()});
  EXPECT_EQ(u.nonfinite, 2u);
  EXPECT_EQ(Bits(u.sumsq), stats_order::kCanonicalNanBits);
  EXPECT_EQ(u.amax, 448.0);
  const TensorRef r = t.Ref();
  EXPECT_EQ(u.zeros, cpu::ComputeReferenceStats(&r, 1).zeros);
  // Without the NaNs the sum is finite and canonical.
  t.SetBits(6, 0x00);
  t.SetBits(7000, 0x78);  // 256
  const UnitStats f = Stats({t.Ref()});
  EXPECT_EQ(f.nonfinite, 0u);
  ExpectSame(f, cpu::CanonicalStatsNaive(&r, 1));
}

TEST(Fp8, E5M2InfAndNaN) {
  TestTensor t(DType::kFp8E5M2, 4096 * 3);
  t.FillNormal(2, 100.0f);
  t.SetBits(4096 + 3, 0xfc);  // -Inf
  UnitStats u = Stats({t.Ref()});
  EXPECT_EQ(u.sumsq, std::numeric_limits<double>::infinity());
  EXPECT_EQ(u.nonfinite, 1u);
  EXPECT_LE(u.amax, 57344.0);
  t.SetBits(2 * 4096 + 1, 0x7d);  // NaN
  u = Stats({t.Ref()});
  EXPECT_EQ(Bits(u.sumsq), stats_order::kCanonicalNanBits);
  EXPECT_EQ(u.nonfinite, 2u);
}

TEST(Fp8, AlignmentsAndIsaBuildsGiveIdenticalBits) {
  for (DType dtype : {DType::kFp8E4M3, DType::kFp8E5M2}) {
    TestTensor base(dtype, 70001, 0);
    base.FillNormal(11, 0.01f);
    base.set_scale_inv(1.7f);
    const UnitStats want = Stats({base.Ref()});
    for (size_t off : {1u, 2u, 3u, 7u, 31u, 64u}) {
      SCOPED_TRACE(off);
      ExpectSame(Stats({base.Moved(off).Ref()}), want);
    }
    const TensorRef r = base.Ref();
    for (cpu::Isa isa : {cpu::Isa::kBaseline, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
      if (!cpu::IsaAvailable(isa)) continue;
      SCOPED_TRACE(cpu::IsaName(isa));
      UnitStats got;
      ASSERT_TRUE(cpu::ComputeStatsWithIsa(isa, &r, 1, &got).ok());
      ExpectSame(got, want);
    }
  }
}

// fp32/bf16 items full of subnormals take the fast path's subnormal variant;
// mixed with normals, zeros and a NaN item, across ISA builds.
TEST(CpuStatsSubnormal, DenseSubnormalItemsMatchCanonical) {
  for (DType dtype : {DType::kFp32, DType::kBf16}) {
    for (float scale : {1e-39f, 1e-30f}) {
      TestTensor t(dtype, 4096 * 9 + 17, 3);
      t.FillNormal(9, scale);
      t.SetBits(4096 * 2 + 5, 0);
      const std::vector<TensorRef> refs = {t.Ref()};
      const UnitStats want = cpu::CanonicalStatsNaive(refs.data(), refs.size());
      ExpectSame(Stats(refs), want);
      for (cpu::Isa isa : {cpu::Isa::kBaseline, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
        if (!cpu::IsaAvailable(isa)) continue;
        UnitStats got;
        ASSERT_TRUE(cpu::ComputeStatsWithIsa(isa, refs.data(), 1, &got).ok());
        ExpectSame(got, want);
      }
    }
  }
}

}  // namespace
}  // namespace gnmr
