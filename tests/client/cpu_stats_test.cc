// CPU statistics: bit-identity with the literal canonical order, accuracy
// against a long-double reference, alignment and run independence, sizes
// from 0 to ~3M for fp32, bf16 and fp16.
#include "kernels/cpu_stats.h"

#include <cmath>
#include <cstdio>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/reference_stats.h"
#include "tests/client/stats_test_util.h"

namespace gnmr {
namespace {

using cpu::CanonicalStatsNaive;
using cpu::ComputeReferenceStats;
using cpu::ComputeStats;
using testing::Bits;
using testing::ExpectSame;
using testing::TestTensor;

UnitStats Stats(const std::vector<TensorRef>& refs) {
  UnitStats u;
  Status s = ComputeStats(refs.data(), refs.size(), &u);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return u;
}

class RandomSizes : public ::testing::TestWithParam<std::tuple<DType, uint64_t>> {};

TEST_P(RandomSizes, MatchesCanonicalAndReference) {
  const DType dtype = std::get<0>(GetParam());
  const uint64_t n = std::get<1>(GetParam());
  TestTensor t(dtype, n);
  t.FillNormal(n * 7 + static_cast<uint64_t>(dtype), 0.02f);
  const std::vector<TensorRef> refs = {t.Ref()};

  const UnitStats fast = Stats(refs);
  ExpectSame(fast, CanonicalStatsNaive(refs.data(), refs.size()));

  const cpu::ReferenceStats ref = ComputeReferenceStats(refs.data(), refs.size());
  const long double exact = ref.sumsq_finite;
  const long double err = std::fabs(static_cast<long double>(fast.sumsq) - exact);
  // Pairwise summation: error grows like log2(n) * eps; allow a wide margin.
  EXPECT_LE(err, exact * 1e-13L + 1e-300L) << "n=" << n;
  EXPECT_EQ(fast.amax, ref.amax);
  EXPECT_EQ(fast.zeros, ref.zeros);
  EXPECT_EQ(fast.nonfinite, 0u);
  EXPECT_EQ(fast.numel, n);
  if (n == 0) {
    EXPECT_EQ(Bits(fast.sumsq), Bits(0.0));
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllDtypes, RandomSizes,
    ::testing::Combine(::testing::Values(DType::kFp32, DType::kBf16, DType::kFp16, DType::kFp8E4M3,
                                         DType::kFp8E5M2),
                       ::testing::Values(0u, 1u, 7u, 255u, 256u, 257u, 4095u, 4096u, 4097u, 8192u,
                                         12289u, 65553u, 1048576u, 3000001u)));

TEST(CpuStats, UnalignedStartsGiveIdenticalBits) {
  for (DType dtype : {DType::kFp32, DType::kBf16, DType::kFp16}) {
    TestTensor base(dtype, 50001, 0);
    base.FillNormal(11, 3.0f);
    const UnitStats want = Stats({base.Ref()});
    for (size_t off : {1u, 2u, 3u, 5u, 8u, 13u, 64u}) {
      SCOPED_TRACE(off);
      ExpectSame(Stats({base.Moved(off).Ref()}), want);
    }
  }
}

// Every kernel build (baseline SSE2, AVX2, AVX-512) gives the same bits.
TEST(CpuStats, AllIsaBuildsGiveIdenticalBits) {
  std::vector<TestTensor> tensors;
  for (DType dtype : {DType::kFp32, DType::kBf16, DType::kFp16}) {
    for (uint64_t n : {1u, 4097u, 123457u}) {
      tensors.emplace_back(dtype, n, n % 3);
      tensors.back().FillNormal(n, dtype == DType::kFp16 ? 1e-3f : 1e-20f);
      tensors.back().SetBits(0, 0x0001);  // a denormal in every dtype
    }
  }
  std::vector<TensorRef> refs;
  for (const TestTensor& t : tensors) refs.push_back(t.Ref());
  const UnitStats want = CanonicalStatsNaive(refs.data(), refs.size());
  for (cpu::Isa isa : {cpu::Isa::kBaseline, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    SCOPED_TRACE(cpu::IsaName(isa));
    if (!cpu::IsaAvailable(isa)) continue;
    UnitStats got;
    ASSERT_TRUE(cpu::ComputeStatsWithIsa(isa, refs.data(), refs.size(), &got).ok());
    ExpectSame(got, want);
  }
  std::printf("selected ISA: %s\n", cpu::IsaName(cpu::SelectedIsa()));
}

TEST(CpuStats, RepeatedRunsGiveIdenticalBits) {
  TestTensor t(DType::kFp32, 300007);
  t.FillNormal(5, 1.0f);
  const UnitStats first = Stats({t.Ref()});
  for (int i = 0; i < 5; ++i) ExpectSame(Stats({t.Ref()}), first);
}

TEST(CpuStats, UnitSumsTensorsInOrderAcrossDtypes) {
  TestTensor a(DType::kFp32, 10000), b(DType::kBf16, 5000, 1), c(DType::kFp16, 70000, 3),
      empty(DType::kFp32, 0);
  a.FillNormal(1, 1e-3f);
  b.FillNormal(2, 10.0f);
  c.FillNormal(3, 0.5f);
  const std::vector<TensorRef> refs = {a.Ref(), empty.Ref(), b.Ref(), c.Ref()};
  const UnitStats u = Stats(refs);
  ExpectSame(u, CanonicalStatsNaive(refs.data(), refs.size()));
  const double sa = Stats({a.Ref()}).sumsq, sb = Stats({b.Ref()}).sumsq,
               sc = Stats({c.Ref()}).sumsq;
  EXPECT_EQ(Bits(u.sumsq), Bits((sa + sb) + sc));
  EXPECT_EQ(u.numel, 85000u);
  EXPECT_EQ(u.amax,
            std::max({Stats({a.Ref()}).amax, Stats({b.Ref()}).amax, Stats({c.Ref()}).amax}));
}

TEST(CpuStats, EmptyUnit) {
  UnitStats u;
  u.sumsq = 5;
  ASSERT_TRUE(ComputeStats(nullptr, 0, &u).ok());
  EXPECT_EQ(Bits(u.sumsq), Bits(0.0));
  EXPECT_EQ(u.numel, 0u);
  TestTensor e(DType::kBf16, 0);
  ExpectSame(Stats({e.Ref(), e.Ref()}), UnitStats());
}

TEST(CpuStats, RejectsWhatTheCpuPathCannotRead) {
  UnitStats u;
  TensorRef t;
  t.numel = 4;
  t.data = nullptr;
  EXPECT_EQ(ComputeStats(&t, 1, &u).code(), StatusCode::kInvalidArgument);
  float x[4] = {};
  t.data = x;
  t.dtype = DType::kFp8E4M3;  // fp8: supported (tests/kernels/cpu_stats_fp8_test.cc)
  EXPECT_TRUE(ComputeStats(&t, 1, &u).ok());
  t.dtype = static_cast<DType>(99);
  EXPECT_EQ(ComputeStats(&t, 1, &u).code(), StatusCode::kInvalidArgument);
  t.dtype = DType::kFp32;
  t.device = 0;
  EXPECT_EQ(ComputeStats(&t, 1, &u).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(ComputeStats(nullptr, 2, &u).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gnmr
