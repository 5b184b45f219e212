// The CUDA item kernel's arithmetic on the CPU (kernels/cuda/item_math.h is
// __host__ __device__): a simulated warp runs the kernel's own per-thread
// functions (vector and scalar layouts, the careful rescan, the lane-tree
// steps) over work items of every dtype, and every result is compared bit
// for bit with the literal canonical order of kernels/stats_order.h
// (kernels/cpu/reference_stats.h, which shares no code with item_math.h).
// The element decoder is checked on every 8- and 16-bit pattern, and the
// fp8 scale step against the CPU path. Runs without a GPU.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/reference_stats.h"
#include "kernels/cpu_stats.h"
#include "kernels/cuda/item_math.h"
#include "tests/client/stats_test_util.h"
#include "tests/kernels/gpu_item_sim.h"

namespace gnmr {
namespace {

namespace item = cuda::item;
using testing::Bits;
using testing::SimItem;

// --------------------------------------------------------- the reference

struct Expected {
  double partial;
  double amax;
  uint64_t zeros, nonfinite, nans;
};

// stats_order.h steps 1-4 for one item, by the naive reference: non-finite
// elements zeroed for the partial (they add +0.0), counted from the data.
template <DType D>
Expected Reference(const unsigned char* p, uint32_t n) {
  TensorRef t;
  t.data = p;
  t.numel = n;
  t.dtype = D;
  const cpu::ReferenceStats ref = cpu::ComputeReferenceStats(&t, 1);
  std::vector<unsigned char> finite(p, p + n * item::Fmt<D>::kSize);
  for (uint32_t i = 0; i < n; ++i) {
    if (!std::isfinite(cpu::ElementValue(t, i))) {
      std::memset(&finite[i * item::Fmt<D>::kSize], 0, item::Fmt<D>::kSize);
    }
  }
  TensorRef f = t;
  f.data = finite.data();
  return Expected{cpu::CanonicalStatsNaive(&f, 1).sumsq, ref.amax, ref.zeros, ref.nans + ref.infs,
                  ref.nans};
}

template <DType D>
void ExpectItem(const unsigned char* p, uint32_t n, uintptr_t address, const std::string& what) {
  bool vec = false, rescanned = false;
  const item::Result got = SimItem<D>(p, n, address, &vec, &rescanned);
  const Expected want = Reference<D>(p, n);
  const std::string where = what + " (" + (vec ? "vector" : "scalar") +
                            (rescanned ? " + careful" : "") + " path, n=" + std::to_string(n) + ")";
  EXPECT_EQ(Bits(got.partial), Bits(want.partial))
      << where << ": " << got.partial << " vs " << want.partial;
  EXPECT_EQ(Bits(item::Decode<D>(got.amax)), Bits(want.amax)) << where;
  EXPECT_EQ(got.zeros, want.zeros) << where;
  EXPECT_EQ(got.nonfinite, want.nonfinite) << where;
  EXPECT_EQ(got.nans, want.nans) << where;
}

// ------------------------------------------------------------------ data

template <DType D>
uint32_t MaxBits() {
  return item::Fmt<D>::kSize == 4 ? 0xffffffffu : item::Fmt<D>::kSize == 2 ? 0xffffu : 0xffu;
}

// Item patterns: normals of gradient size, subnormals only, zeros mixed in,
// every bit pattern (NaN/Inf included), wide-range finite, one NaN or Inf
// in a finite item.
enum class Pattern { kNormal, kSubnormal, kZeros, kAnyBits, kWideFinite, kOneNaN, kOneInf };
const Pattern kPatterns[] = {Pattern::kNormal,  Pattern::kSubnormal,  Pattern::kZeros,
                             Pattern::kAnyBits, Pattern::kWideFinite, Pattern::kOneNaN,
                             Pattern::kOneInf};

template <DType D>
std::vector<unsigned char> MakeItem(Pattern pat, uint32_t n, uint64_t seed) {
  constexpr uint32_t kSize = item::Fmt<D>::kSize;
  std::vector<unsigned char> b(n * kSize + 16, 0);
  std::mt19937_64 rng(seed);
  const uint32_t nonfin = item::Fmt<D>::kNonfinite;
  const uint32_t sign = (MaxBits<D>() >> 1) + 1;
  // The smallest normal magnitude pattern: one exponent step.
  const uint32_t min_normal = kSize == 4             ? 0x00800000u
                              : D == DType::kBf16    ? 0x80u
                              : D == DType::kFp16    ? 0x400u
                              : D == DType::kFp8E4M3 ? 0x08u
                                                     : 0x04u;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t r = static_cast<uint32_t>(rng());
    uint32_t bits = 0;
    switch (pat) {
      case Pattern::kNormal: {  // magnitudes in the upper middle of the range
        const uint32_t lo = nonfin / 2, span = nonfin / 4;
        bits = lo + r % span;
        break;
      }
      case Pattern::kSubnormal:
        bits = 1 + r % (min_normal - 1);
        break;
      case Pattern::kZeros:
        bits = r % 3 == 0 ? 0u : 1 + r % (nonfin - 1);
        break;
      case Pattern::kAnyBits:
        bits = r & MaxBits<D>();
        break;
      case Pattern::kWideFinite:
      case Pattern::kOneNaN:
      case Pattern::kOneInf:
        bits = r % nonfin;
        break;
    }
    if (pat != Pattern::kAnyBits && (rng() & 1)) bits |= sign;
    std::memcpy(&b[i * kSize], &bits, kSize);
  }
  if (pat == Pattern::kOneNaN || pat == Pattern::kOneInf) {
    uint32_t special = pat == Pattern::kOneNaN ? item::Fmt<D>::kNanMin : nonfin;
    if (D == DType::kFp8E4M3 && pat == Pattern::kOneInf) special = 0x7e;  // no Inf: max finite
    std::memcpy(&b[(rng() % n) * kSize], &special, kSize);
  }
  return b;
}

template <DType D>
void CheckAllPaths() {
  constexpr uint32_t kSize = item::Fmt<D>::kSize;
  uint64_t seed = 1;
  for (Pattern pat : kPatterns) {
    for (uint32_t n : {4096u, 4095u, 1u, 255u, 2049u}) {
      const std::vector<unsigned char> b = MakeItem<D>(pat, n, seed++);
      const std::string what =
          std::string(DTypeName(D)) + " pattern " + std::to_string(static_cast<int>(pat));
      ExpectItem<D>(b.data(), n, 0, what);  // aligned tensor
      if (n == 4096) {
        // Element-aligned and (for multi-byte dtypes) byte-misaligned starts.
        ExpectItem<D>(b.data(), n, kSize, what + " unaligned");
        ExpectItem<D>(b.data(), n, 1, what + " odd address");
      }
    }
  }
}

TEST(GpuItemMathTest, Fp32AllPaths) { CheckAllPaths<DType::kFp32>(); }
TEST(GpuItemMathTest, Bf16AllPaths) { CheckAllPaths<DType::kBf16>(); }
TEST(GpuItemMathTest, Fp16AllPaths) { CheckAllPaths<DType::kFp16>(); }
TEST(GpuItemMathTest, Fp8E4M3AllPaths) { CheckAllPaths<DType::kFp8E4M3>(); }
TEST(GpuItemMathTest, Fp8E5M2AllPaths) { CheckAllPaths<DType::kFp8E5M2>(); }

// Every bit pattern of the 8- and 16-bit dtypes, in whole items (16-bit:
// 16 items; fp8: the 256 patterns repeated), through the vector path.
template <DType D>
void CheckEveryPattern() {
  constexpr uint32_t kSize = item::Fmt<D>::kSize;
  const uint32_t patterns = MaxBits<D>() + 1;
  for (uint32_t first = 0; first < patterns; first += item::kItemElems) {
    std::vector<unsigned char> b(item::kItemElems * kSize);
    for (uint32_t i = 0; i < item::kItemElems; ++i) {
      const uint32_t bits = (first + i) % patterns;
      std::memcpy(&b[i * kSize], &bits, kSize);
    }
    ExpectItem<D>(b.data(), item::kItemElems, 0,
                  std::string(DTypeName(D)) + " patterns from " + std::to_string(first));
  }
}

TEST(GpuItemMathTest, EveryPatternInItems) {
  CheckEveryPattern<DType::kBf16>();
  CheckEveryPattern<DType::kFp16>();
  CheckEveryPattern<DType::kFp8E4M3>();
  CheckEveryPattern<DType::kFp8E5M2>();
}

// The decoder alone: every finite pattern of the small dtypes and a sweep of
// fp32 (subnormals, normals, the extremes) equal the textbook value.
template <DType D>
void CheckDecode(uint32_t bits) {
  TensorRef t;
  unsigned char b[4] = {};
  std::memcpy(b, &bits, item::Fmt<D>::kSize);
  t.data = b;
  t.numel = 1;
  t.dtype = D;
  const double want = cpu::ElementValue(t, 0);
  if (!std::isfinite(want)) return;  // the careful path never decodes those
  ASSERT_EQ(Bits(item::Decode<D>(bits)), Bits(want)) << DTypeName(D) << " bits " << bits;
}

TEST(GpuItemMathTest, DecodeIsExactForEveryFinitePattern) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    CheckDecode<DType::kBf16>(b);
    CheckDecode<DType::kFp16>(b);
  }
  for (uint32_t b = 0; b <= 0xff; ++b) {
    CheckDecode<DType::kFp8E4M3>(b);
    CheckDecode<DType::kFp8E5M2>(b);
  }
  std::mt19937 rng(3);
  for (uint32_t b : {0x0u, 0x1u, 0x7fffffu, 0x800000u, 0x7f7fffffu, 0x80000001u, 0xff7fffffu}) {
    CheckDecode<DType::kFp32>(b);
  }
  for (int i = 0; i < 200000; ++i) CheckDecode<DType::kFp32>(static_cast<uint32_t>(rng()));
}

// The packed counters never carry between fields, whatever the magnitudes.
TEST(GpuItemMathTest, PackedCountersOfExtremeWords) {
  for (uint32_t w : {0x00000000u, 0x7fff7fffu, 0xffffffffu, 0x80008000u, 0x00017fffu, 0x7fff0001u,
                     0x80000000u, 0x00008000u}) {
    double v[8] = {};
    item::Fast f;
    for (int k = 0; k < 64; ++k) item::AccumulateWord<DType::kBf16>(w, v, &f);
    const uint32_t lo = w & 0x7fffu, hi = (w >> 16) & 0x7fffu;
    EXPECT_EQ(item::FastNonzero<DType::kBf16>(f), 64u * ((lo != 0) + (hi != 0))) << w;
    EXPECT_EQ(item::FastAmax<DType::kBf16>(f), std::max(lo, hi)) << w;
  }
  for (uint32_t w : {0x00000000u, 0x7f7f7f7fu, 0xffffffffu, 0x80808080u, 0x01000001u, 0x7f00007fu,
                     0x00800100u}) {
    double v[8] = {};
    item::Fast f;
    for (int k = 0; k < 32; ++k) item::AccumulateWord<DType::kFp8E5M2>(w, v, &f);
    uint32_t nz = 0, amax = 0;
    for (int byte = 0; byte < 4; ++byte) {
      const uint32_t a = (w >> (8 * byte)) & 0x7fu;
      nz += a != 0;
      amax = std::max(amax, a);
    }
    EXPECT_EQ(item::FastNonzero<DType::kFp8E5M2>(f), 32u * nz) << w;
    EXPECT_EQ(item::FastAmax<DType::kFp8E5M2>(f), amax) << w;
  }
}

// Step 5a as the unit kernel runs it, against the CPU path, for one-item
// fp8 tensors and scales of every kind (subnormal, huge, negative, NaN).
TEST(GpuItemMathTest, Fp8ScaleMatchesCpuPath) {
  const float scales[] = {1.0f,
                          0.0078125f * 3,
                          448.0f,
                          -0.375f,
                          1e-40f,
                          3.0e38f,
                          std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity()};
  for (DType d : {DType::kFp8E4M3, DType::kFp8E5M2}) {
    for (Pattern pat : {Pattern::kNormal, Pattern::kSubnormal, Pattern::kWideFinite}) {
      const std::vector<unsigned char> b = d == DType::kFp8E4M3
                                               ? MakeItem<DType::kFp8E4M3>(pat, 4096, 9)
                                               : MakeItem<DType::kFp8E5M2>(pat, 4096, 9);
      bool vec = false, rescanned = false;
      const item::Result r = d == DType::kFp8E4M3
                                 ? SimItem<DType::kFp8E4M3>(b.data(), 4096, 0, &vec, &rescanned)
                                 : SimItem<DType::kFp8E5M2>(b.data(), 4096, 0, &vec, &rescanned);
      for (float s : scales) {
        double sum = r.partial;
        double amax = d == DType::kFp8E4M3 ? item::Decode<DType::kFp8E4M3>(r.amax)
                                           : item::Decode<DType::kFp8E5M2>(r.amax);
        const bool defined = item::ApplyFp8Scale(s, &sum, &amax);
        TensorRef t;
        t.data = b.data();
        t.numel = 4096;
        t.dtype = d;
        t.scale_inv_ptr = &s;  // the CPU path's rule for a scale read at run time
        UnitStats want;
        ASSERT_TRUE(cpu::ComputeStats(&t, 1, &want).ok());
        const std::string what = std::string(DTypeName(d)) + " scale " + std::to_string(s);
        if (!defined) {
          EXPECT_TRUE(std::isnan(want.sumsq)) << what;
          continue;
        }
        EXPECT_EQ(Bits(sum), Bits(want.sumsq)) << what;
        EXPECT_EQ(Bits(amax), Bits(want.amax)) << what;
      }
    }
  }
}

// The layout: every lane of every row is loaded exactly once, by the
// thread that owns it, and the tree's cross-thread partners are that lane
// plus s.
TEST(GpuItemMathTest, LayoutCoversEveryElementOnce) {
  auto check = [](auto tag, const char* name) {
    constexpr DType D = decltype(tag)::value;
    constexpr uint32_t P = item::Fmt<D>::kP;
    std::vector<int> seen(item::kItemElems, 0);
    for (uint32_t t = 0; t < item::kWarp; ++t) {
      for (uint32_t L = 0; L < item::kVecLoads<D>; ++L) {
        for (uint32_t k = 0; k < P; ++k) {
          const uint32_t e = item::VecOffset<D>(t, L) + k;
          ASSERT_LT(e, item::kItemElems);
          ++seen[e];
          // Element e's lane is owned by thread t, slot (L % parts) * P + k.
          EXPECT_EQ(e % item::kLanes, item::Lane<P>(t, (L % (item::kSlots / P)) * P + k)) << name;
        }
      }
    }
    for (uint32_t e = 0; e < item::kItemElems; ++e) ASSERT_EQ(seen[e], 1) << name << " " << e;
  };
  check(std::integral_constant<DType, DType::kFp32>(), "fp32");
  check(std::integral_constant<DType, DType::kBf16>(), "bf16");
  check(std::integral_constant<DType, DType::kFp8E4M3>(), "fp8");
}

}  // namespace
}  // namespace gnmr
