// CPU statistics on special values: NaN, Inf, denormals, signed zeros,
// extreme magnitudes, FTZ/DAZ modes, the item tree, and a tensor with more
// than 2^31 elements.
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#if defined(__x86_64__) || defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include "kernels/cpu/reference_stats.h"
#include "kernels/cpu_stats.h"
#include "kernels/stats_order.h"
#include "tests/client/stats_test_util.h"

namespace gnmr {
namespace {

using testing::Bits;
using testing::TestTensor;

UnitStats Stats(const TensorRef& r) {
  UnitStats u;
  Status s = cpu::ComputeStats(&r, 1, &u);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return u;
}

struct Special {
  DType dtype;
  uint32_t nan, pos_inf, neg_inf, min_denormal, neg_zero, max_finite;
  double min_denormal_value, max_finite_value;
};

const Special kSpecials[] = {
    {DType::kFp32, 0x7fc00001u, 0x7f800000u, 0xff800000u, 0x00000001u, 0x80000000u, 0x7f7fffffu,
     std::ldexp(1.0, -149), static_cast<double>(std::numeric_limits<float>::max())},
    {DType::kBf16, 0xffc1u, 0x7f80u, 0xff80u, 0x0001u, 0x8000u, 0x7f7fu, std::ldexp(1.0, -133),
     std::ldexp(255.0, 120)},
    {DType::kFp16, 0x7e01u, 0x7c00u, 0xfc00u, 0x0001u, 0x8000u, 0x7bffu, std::ldexp(1.0, -24),
     65504.0},
};

class Specials : public ::testing::TestWithParam<Special> {};

TEST_P(Specials, CountsAndCanonicalNan) {
  const Special& sp = GetParam();
  TestTensor t(sp.dtype, 9000, 1);
  t.FillNormal(3, 1.0f);
  t.SetBits(10, sp.nan);
  t.SetBits(4500, sp.pos_inf);
  t.SetBits(8999, sp.neg_inf);
  t.SetBits(20, 0);
  t.SetBits(21, sp.neg_zero);
  const UnitStats u = Stats(t.Ref());
  EXPECT_EQ(Bits(u.sumsq), stats_order::kCanonicalNanBits);
  EXPECT_EQ(u.nonfinite, 3u);
  const TensorRef r = t.Ref();
  const cpu::ReferenceStats ref = cpu::ComputeReferenceStats(&r, 1);
  EXPECT_EQ(u.zeros, ref.zeros);
  EXPECT_GE(u.zeros, 2u);
  EXPECT_EQ(u.amax, ref.amax);  // infinities do not poison amax
  EXPECT_TRUE(std::isfinite(u.amax));
  const UnitStats naive = cpu::CanonicalStatsNaive(&r, 1);
  EXPECT_EQ(Bits(naive.sumsq), stats_order::kCanonicalNanBits);
}

TEST_P(Specials, InfWithoutNanGivesInf) {
  const Special& sp = GetParam();
  TestTensor t(sp.dtype, 5000);
  t.FillNormal(4, 1.0f);
  t.SetBits(4999, sp.neg_inf);
  const UnitStats u = Stats(t.Ref());
  EXPECT_EQ(u.sumsq, std::numeric_limits<double>::infinity());
  EXPECT_EQ(u.nonfinite, 1u);
}

TEST_P(Specials, DenormalsAndExtremesAreExact) {
  const Special& sp = GetParam();
  TestTensor t(sp.dtype, 300);
  for (uint64_t i = 0; i < 300; ++i) t.SetBits(i, i % 3 == 0 ? sp.neg_zero : 0);
  t.SetBits(7, sp.min_denormal);
  t.SetBits(8, sp.min_denormal | (sp.dtype == DType::kFp32 ? 0x80000000u : 0x8000u));
  UnitStats u = Stats(t.Ref());
  const double d = sp.min_denormal_value;
  EXPECT_EQ(u.sumsq, 2 * d * d);
  EXPECT_EQ(u.amax, d);
  EXPECT_EQ(u.zeros, 298u);
  t.SetBits(100, sp.max_finite);
  u = Stats(t.Ref());
  EXPECT_EQ(u.amax, sp.max_finite_value);
  EXPECT_EQ(u.sumsq, sp.max_finite_value * sp.max_finite_value + 2 * d * d);
  const TensorRef r = t.Ref();
  EXPECT_EQ(Bits(u.sumsq), Bits(cpu::CanonicalStatsNaive(&r, 1).sumsq));
}

TEST_P(Specials, AllNonFinite) {
  const Special& sp = GetParam();
  TestTensor t(sp.dtype, 4096);
  for (uint64_t i = 0; i < 4096; ++i) t.SetBits(i, i % 2 ? sp.pos_inf : sp.nan);
  const UnitStats u = Stats(t.Ref());
  EXPECT_EQ(u.nonfinite, 4096u);
  EXPECT_EQ(u.amax, 0.0);
  EXPECT_EQ(u.zeros, 0u);
  EXPECT_EQ(Bits(u.sumsq), stats_order::kCanonicalNanBits);
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, Specials, ::testing::ValuesIn(kSpecials));

#if defined(__x86_64__)
// Frameworks may set flush-to-zero / denormals-are-zero; the statistics
// must not change (the GPU computes in IEEE mode).
TEST(CpuStatsModes, FtzDazDoNotChangeResults) {
  TestTensor t(DType::kFp32, 20000, 2);
  t.FillNormal(9, 1e-38f);  // many fp32 denormals
  TestTensor h(DType::kFp16, 20000);
  h.FillNormal(10, 1e-5f);  // many fp16 subnormals
  const UnitStats want32 = Stats(t.Ref()), want16 = Stats(h.Ref());
  ASSERT_GT(want32.sumsq, 0.0);
  const unsigned int saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ
  const UnitStats got32 = Stats(t.Ref()), got16 = Stats(h.Ref());
  _mm_setcsr(saved);
  EXPECT_EQ(Bits(got32.sumsq), Bits(want32.sumsq));
  EXPECT_EQ(Bits(got32.amax), Bits(want32.amax));
  EXPECT_EQ(Bits(got16.sumsq), Bits(want16.sumsq));
  EXPECT_EQ(Bits(got16.amax), Bits(want16.amax));
}
#endif

// T(lo, c) written recursively, as in stats_order.h.
double Tree(const std::vector<double>& p, size_t lo, size_t c) {
  if (c == 1) return p[lo];
  size_t h = 1;
  while (h * 2 < c) h *= 2;
  return Tree(p, lo, h) + Tree(p, lo + h, c - h);
}

// Zero-padded adjacent-pair reduction, level by level (the GPU form).
double PaddedPairs(std::vector<double> p) {
  while (p.size() > 1) {
    if (p.size() % 2) p.push_back(0.0);
    std::vector<double> next(p.size() / 2);
    for (size_t i = 0; i < next.size(); ++i) next[i] = p[2 * i] + p[2 * i + 1];
    p.swap(next);
  }
  return p[0];
}

TEST(StatsOrder, ItemTreeMatchesBothDefinitions) {
  std::mt19937_64 rng(1);
  std::lognormal_distribution<double> dist(0.0, 3.0);
  for (size_t m = 1; m <= 600; ++m) {
    std::vector<double> p(m);
    for (double& v : p) v = dist(rng);
    stats_order::ItemTree tree;
    for (double v : p) tree.Push(v);
    const double want = Tree(p, 0, m);
    ASSERT_EQ(Bits(tree.Finish()), Bits(want)) << "m=" << m;
    ASSERT_EQ(Bits(PaddedPairs(p)), Bits(want)) << "m=" << m;
  }
  EXPECT_EQ(stats_order::ItemTree().Finish(), 0.0);
}

// The CUDA kernels' decomposition of step 5 (kernels/cuda/stats_kernels.cu):
// segments of 4096 items, each 256 aligned 16-item subtrees (ItemTree per
// thread) combined as adjacent pairs level by level (PairTree), segment sums
// folded by an ItemTree. It must equal T(0, m). (The first version combined
// the subtrees in the lane-tree order s = 128..1, which this catches.)
double GpuSegmentedTree(const std::vector<double>& p) {
  constexpr size_t kSeg = 4096, kPer = 16, kThreads = 256;
  stats_order::ItemTree unit;
  for (size_t first = 0; first < p.size(); first += kSeg) {
    const size_t n = std::min(kSeg, p.size() - first);
    std::vector<double> sh(kThreads, 0.0);
    for (size_t j = 0; j < kThreads; ++j) {
      stats_order::ItemTree t;
      for (size_t i = j * kPer; i < (j + 1) * kPer && i < n; ++i) t.Push(p[first + i]);
      sh[j] = t.Finish();
    }
    for (size_t s = 1; s < kThreads; s <<= 1) {
      for (size_t j = 0; j < kThreads; j += 2 * s) sh[j] = sh[j] + sh[j + s];
    }
    unit.Push(sh[0]);
  }
  return unit.Finish();
}

TEST(StatsOrder, GpuSegmentDecompositionMatches) {
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (size_t m : {1, 2, 17, 255, 4095, 4096, 4097, 8193, 12289, 20480, 36865, 135167}) {
    for (int rep = 0; rep < 3; ++rep) {
      std::vector<double> p(m);
      for (double& v : p) v = std::ldexp(u(rng), static_cast<int>(rng() % 80) - 40);
      ASSERT_EQ(Bits(GpuSegmentedTree(p)), Bits(Tree(p, 0, m))) << "m=" << m;
    }
  }
}

// More than 2^31 elements: an untouched anonymous mapping reads as zeros, so
// only the pages written below use memory.
TEST(CpuStatsLarge, MoreThan2To31Elements) {
  const uint64_t n = (uint64_t{1} << 31) + 4097;
  const size_t bytes = n * 2;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) GTEST_SKIP() << "cannot map " << bytes << " bytes";
  uint16_t* x = static_cast<uint16_t*>(mem);
  x[5] = testing::ToBf16(3.0f);
  x[(uint64_t{1} << 31) + 1] = testing::ToBf16(-4.0f);  // index > 2^31
  x[n - 1] = testing::ToBf16(12.0f);                    // in the partial item
  TensorRef r;
  r.data = x;
  r.numel = n;
  r.dtype = DType::kBf16;
  const UnitStats u = Stats(r);
  munmap(mem, bytes);
  EXPECT_EQ(u.sumsq, 9.0 + 16.0 + 144.0);
  EXPECT_EQ(u.amax, 12.0);
  EXPECT_EQ(u.zeros, n - 3);
  EXPECT_EQ(u.numel, n);
}

}  // namespace
}  // namespace gnmr
