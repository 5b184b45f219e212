// CPU statistics of fp32 / bf16 / fp16 tensors built from work items chosen
// to hit every path of the kernels (kernels/cpu/item_kernels_avx512.h on
// AVX-512 machines, the generic ones elsewhere): items that qualify for the
// AVX-512 path (zeros + normals; fp32/bf16 zeros + subnormals) right at
// the qualifying boundaries, and items that must be refused (subnormals
// mixed with normals, fp16 subnormals, NaN, Inf).
// Every result is compared bit for bit with the literal canonical order, on
// every ISA build, at unaligned starts and under each FTZ/DAZ combination.
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "kernels/cpu/reference_stats.h"
#include "kernels/cpu_stats.h"
#include "tests/client/stats_test_util.h"

namespace gnmr {
namespace {

using testing::Bits;
using testing::ExpectSame;
using testing::TestTensor;

constexpr uint64_t kItem = 4096;

// Item kinds. Magnitude patterns are drawn from [lo, hi], random sign, with
// ~3% zeros; then `special` (if nonzero) is written at a random position.
struct ItemKind {
  const char* name;
  uint32_t lo, hi, special;
};

// fp32: subnormals 0x1..0x007fffff, normals 0x00800000..0x7f7fffff.
const ItemKind kFp32Items[] = {
    {"normals", 0x3c000000, 0x3f000000, 0},
    {"normals, whole range", 0x00800000, 0x7f7fffff, 0},
    {"normals + min normal", 0x3c000000, 0x3f000000, 0x00800000},
    {"normals + max finite", 0x3c000000, 0x3f000000, 0x7f7fffff},
    {"subnormals only", 0x00000001, 0x007fffff, 0},
    {"subnormals + largest subnormal", 0x00000001, 0x00001000, 0x007fffff},
    {"subnormals + min normal (refused)", 0x00000001, 0x007fffff, 0x00800000},
    {"normals + one subnormal (refused)", 0x3c000000, 0x3f000000, 0x007fffff},
    {"zeros only", 0, 0, 0},
    {"NaN", 0x3c000000, 0x3f000000, 0x7fc00000},
    {"Inf", 0x3c000000, 0x3f000000, 0x7f800000},
    {"subnormals + NaN", 0x00000001, 0x007fffff, 0x7f800001},
};

// bf16: subnormals 0x0001..0x007f, normals 0x0080..0x7f7f, Inf 0x7f80.
const ItemKind kBf16Items[] = {
    {"normals", 0x3a00, 0x3e00, 0},
    {"normals, whole range", 0x0080, 0x7f7f, 0},
    {"normals + min normal", 0x3000, 0x4000, 0x0080},
    {"normals + max finite", 0x3000, 0x4000, 0x7f7f},
    {"subnormals only", 0x0001, 0x007f, 0},
    {"subnormals + largest subnormal", 0x0001, 0x0010, 0x007f},
    {"subnormals + min normal (refused)", 0x0001, 0x007f, 0x0080},
    {"normals + one subnormal (refused)", 0x3a00, 0x3e00, 0x007f},
    {"normals + smallest subnormal (refused)", 0x0080, 0x0100, 0x0001},
    {"zeros only", 0, 0, 0},
    {"NaN", 0x3a00, 0x3e00, 0x7fc0},
    {"Inf", 0x3a00, 0x3e00, 0x7f80},
    {"subnormals + NaN", 0x0001, 0x007f, 0x7f81},
};

// fp16: subnormals 0x0001..0x03ff, normals 0x0400..0x7bff, Inf 0x7c00.
const ItemKind kFp16Items[] = {
    {"normals", 0x2000, 0x2c00, 0},
    {"normals, whole range", 0x0400, 0x7bff, 0},
    {"normals + min normal", 0x2000, 0x3000, 0x0400},
    {"normals + max finite", 0x2000, 0x3000, 0x7bff},
    {"normals + largest subnormal (refused)", 0x2000, 0x3000, 0x03ff},
    {"subnormals only (refused)", 0x0001, 0x03ff, 0},
    {"zeros only", 0, 0, 0},
    {"NaN", 0x2000, 0x3000, 0x7e00},
    {"Inf", 0x2000, 0x3000, 0x7c00},
};

template <size_t N>
TestTensor Build(DType dtype, const ItemKind (&kinds)[N], uint64_t tail, uint64_t seed,
                 size_t offset) {
  const uint64_t n = N * kItem + tail;
  TestTensor t(dtype, n, offset);
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i < n; ++i) {
    const ItemKind& k = kinds[(i / kItem) % N];
    uint32_t a = 0;
    if (k.hi > 0 && rng() % 32 != 0) a = k.lo + static_cast<uint32_t>(rng() % (k.hi - k.lo + 1u));
    const uint32_t sign = dtype == DType::kFp32 ? 0x80000000u : 0x8000u;
    t.SetBits(i, a | (rng() % 2 ? sign : 0u));
  }
  for (uint64_t item = 0; item * kItem < n; ++item) {
    const ItemKind& k = kinds[item % N];
    const uint64_t len = n - item * kItem < kItem ? n - item * kItem : kItem;
    if (k.special != 0) t.SetBits(item * kItem + rng() % len, k.special);
  }
  return t;
}

// MXCSR bits: flush-to-zero (15), denormals-are-zero (6).
constexpr unsigned int kFtz = 0x8000u;
constexpr unsigned int kDaz = 0x0040u;

// ComputeStats with the MXCSR bits `csr` set (and FTZ/DAZ clear otherwise).
UnitStats Fast(const TensorRef& r, unsigned int csr = 0) {
  UnitStats u;
#if defined(__x86_64__)
  // Frameworks may set flush-to-zero / denormals-are-zero; the statistics
  // must not change.
  const unsigned int saved = _mm_getcsr();
  _mm_setcsr((saved & ~(kFtz | kDaz)) | csr);
#endif
  const Status s = cpu::ComputeStats(&r, 1, &u);
#if defined(__x86_64__)
  _mm_setcsr(saved);
#endif
  EXPECT_TRUE(s.ok()) << s.ToString();
  return u;
}

// Each item kind alone (so neither a NaN item nor large values hide an
// item's sum), then all kinds in one tensor with a partial last item.
template <size_t N>
void CheckKinds(DType dtype, const ItemKind (&kinds)[N], unsigned int csr) {
  for (size_t i = 0; i < N; ++i) {
    SCOPED_TRACE(kinds[i].name);
    const ItemKind one[1] = {kinds[i]};
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      const TestTensor t = Build(dtype, one, 0, seed * 31 + i, 0);
      const TensorRef r = t.Ref();
      ExpectSame(Fast(r, csr), cpu::CanonicalStatsNaive(&r, 1));
    }
  }
  for (uint64_t tail : {0u, 1u, 300u}) {
    SCOPED_TRACE(tail);
    const TestTensor t = Build(dtype, kinds, tail, tail + 7, 0);
    const TensorRef r = t.Ref();
    ExpectSame(Fast(r, csr), cpu::CanonicalStatsNaive(&r, 1));
  }
}

TEST(CpuStatsItemKinds, Fp32ItemKindsMatchCanonical) { CheckKinds(DType::kFp32, kFp32Items, 0); }
TEST(CpuStatsItemKinds, Bf16ItemKindsMatchCanonical) { CheckKinds(DType::kBf16, kBf16Items, 0); }
TEST(CpuStatsItemKinds, Fp16ItemKindsMatchCanonical) { CheckKinds(DType::kFp16, kFp16Items, 0); }
// FTZ and DAZ alone and together.
TEST(CpuStatsItemKinds, FtzDazDoNotChangeResults) {
  for (unsigned int csr : {kFtz | kDaz, kDaz, kFtz}) {
    SCOPED_TRACE(csr);
    CheckKinds(DType::kFp32, kFp32Items, csr);
    CheckKinds(DType::kBf16, kBf16Items, csr);
    CheckKinds(DType::kFp16, kFp16Items, csr);
  }
}

// Subnormal-containing items (alone, mixed with normals, the smallest ones
// whose squares are 2^-298 / 2^-266 / 2^-48, next to the largest finite
// value), finite only so the sums are compared, under DAZ clear and set
// with and without FTZ, bit-identical to the reference (and ready for a
// kernel that reads MXCSR and skips the subnormal check when DAZ is clear).
TEST(CpuStatsItemKinds, SubnormalItemsUnderDazClearAndSet) {
  const ItemKind fp32[] = {kFp32Items[4],
                           kFp32Items[5],
                           kFp32Items[6],
                           kFp32Items[7],
                           {"smallest subnormals", 1, 4, 0},
                           {"smallest subnormals + max finite", 1, 4, 0x7f7fffff},
                           kFp32Items[0]};
  const ItemKind bf16[] = {kBf16Items[4],
                           kBf16Items[5],
                           kBf16Items[6],
                           kBf16Items[7],
                           kBf16Items[8],
                           {"smallest subnormals", 1, 2, 0},
                           {"smallest subnormals + max finite", 1, 2, 0x7f7f},
                           kBf16Items[0]};
  const ItemKind fp16[] = {kFp16Items[4],
                           kFp16Items[5],
                           {"smallest subnormals", 1, 2, 0},
                           {"smallest subnormals + max finite", 1, 2, 0x7bff},
                           kFp16Items[0]};
  const TestTensor ts = Build(DType::kFp32, fp32, 300, 21, 0);
  const TestTensor tb = Build(DType::kBf16, bf16, 300, 22, 0);
  const TestTensor tf = Build(DType::kFp16, fp16, 300, 23, 0);
  for (const TestTensor* t : {&ts, &tb, &tf}) {
    const TensorRef r = t->Ref();
    const UnitStats want = cpu::CanonicalStatsNaive(&r, 1);
    ASSERT_GT(want.sumsq, 0.0);
    for (unsigned int csr : {0u, kFtz, kDaz, kFtz | kDaz}) {
      SCOPED_TRACE(csr);
      ExpectSame(Fast(r, csr), want);
      ExpectSame(Fast(t->Moved(2).Ref(), csr), want);
    }
  }
  CheckKinds(DType::kFp32, fp32, 0);
  CheckKinds(DType::kFp32, fp32, kDaz);
  CheckKinds(DType::kBf16, bf16, 0);
  CheckKinds(DType::kBf16, bf16, kDaz);
}

// Finite kinds only, so the sums stay comparable: identical bits at any
// byte offset (the AVX-512 path uses unaligned loads) and on every ISA.
TEST(CpuStatsItemKinds, UnalignedStartsAndAllIsas) {
  const ItemKind bf16[] = {kBf16Items[0], kBf16Items[2], kBf16Items[4],
                           kBf16Items[6], kBf16Items[7], kBf16Items[9]};
  const ItemKind fp16[] = {kFp16Items[0], kFp16Items[2], kFp16Items[4], kFp16Items[5]};
  const ItemKind fp32[] = {kFp32Items[0], kFp32Items[4], kFp32Items[6], kFp32Items[7]};
  const TestTensor tb = Build(DType::kBf16, bf16, 77, 5, 0);
  const TestTensor tf = Build(DType::kFp16, fp16, 77, 6, 0);
  const TestTensor ts = Build(DType::kFp32, fp32, 77, 7, 0);
  for (const TestTensor* t : {&tb, &tf, &ts}) {
    const TensorRef r = t->Ref();
    const UnitStats want = cpu::CanonicalStatsNaive(&r, 1);
    ASSERT_GT(want.sumsq, 0.0);
    for (size_t off : {1u, 2u, 3u, 30u, 62u}) {
      SCOPED_TRACE(off);
      ExpectSame(Fast(t->Moved(off).Ref()), want);
    }
    for (cpu::Isa isa : {cpu::Isa::kBaseline, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
      SCOPED_TRACE(cpu::IsaName(isa));
      if (!cpu::IsaAvailable(isa)) continue;
      UnitStats got;
      ASSERT_TRUE(cpu::ComputeStatsWithIsa(isa, &r, 1, &got).ok());
      ExpectSame(got, want);
    }
  }
}

// The AVX-512 path sums each item in the mode of the last item that took
// one (normals or subnormals) while scanning it, and re-sums it from L1 if
// the guess was wrong: runs of each kind, switches in both directions,
// zeros-only items (fit both modes) and refused items after either guess.
TEST(CpuStatsItemKinds, ModeSwitchesMatchCanonical) {
  for (unsigned int ftz_daz : {0u, kFtz | kDaz}) {
    SCOPED_TRACE(ftz_daz);
    {
      const ItemKind& n = kFp32Items[0];
      const ItemKind& s = kFp32Items[4];
      const ItemKind& z = kFp32Items[8];
      const ItemKind seq[] = {s,
                              s,
                              n,
                              n,
                              s,
                              z,
                              s,
                              z,
                              n,
                              z,
                              z,
                              s,
                              kFp32Items[11],
                              s,
                              kFp32Items[6],
                              s,
                              kFp32Items[10],
                              n,
                              kFp32Items[7],
                              s,
                              n};
      const TestTensor t = Build(DType::kFp32, seq, 0, 11, 0);
      const TensorRef r = t.Ref();
      ExpectSame(Fast(r, ftz_daz), cpu::CanonicalStatsNaive(&r, 1));
    }
    {
      const ItemKind& n = kBf16Items[0];
      const ItemKind& s = kBf16Items[4];
      const ItemKind& z = kBf16Items[9];
      const ItemKind seq[] = {s,
                              s,
                              n,
                              n,
                              s,
                              z,
                              s,
                              z,
                              n,
                              z,
                              z,
                              s,
                              kBf16Items[12],
                              s,
                              kBf16Items[6],
                              s,
                              kBf16Items[11],
                              n,
                              kBf16Items[8],
                              s,
                              n};
      const TestTensor t = Build(DType::kBf16, seq, 0, 12, 0);
      const TensorRef r = t.Ref();
      ExpectSame(Fast(r, ftz_daz), cpu::CanonicalStatsNaive(&r, 1));
    }
    {  // finite only, so the sum is checked too
      const ItemKind seq[] = {kBf16Items[4], kBf16Items[4], kBf16Items[0], kBf16Items[5],
                              kBf16Items[9], kBf16Items[4], kBf16Items[1]};
      const TestTensor t = Build(DType::kBf16, seq, 0, 13, 0);
      const TensorRef r = t.Ref();
      const UnitStats want = cpu::CanonicalStatsNaive(&r, 1);
      ASSERT_GT(want.sumsq, 0.0);
      ExpectSame(Fast(r, ftz_daz), want);
    }
  }
}

}  // namespace
}  // namespace gnmr
