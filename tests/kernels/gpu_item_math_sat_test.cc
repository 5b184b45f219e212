// The saturation count of the CUDA item kernel (kernels/cuda/item_math.h,
// the kSat instantiations) on a simulated warp (gpu_item_sim.h): every
// item path (vector, scalar, careful rescan; full and partial items) counts
// what the reference counts (kernels/cpu/reference_stats.h, which reads
// TensorRef::saturation_magnitude literally), at the format maximum, at
// rounded-up magnitudes, at subnormal ones and above the maximum, with
// NaN/Inf, negative values and subnormals in the items; and counting
// changes no other figure of an item. Runs without a GPU.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/reference_stats.h"
#include "kernels/cuda/item_math.h"
#include "kernels/saturation.h"
#include "tests/client/stats_test_util.h"
#include "tests/kernels/gpu_item_sim.h"

namespace gnmr {
namespace {

namespace item = cuda::item;
using testing::Bits;
using testing::SimItem;

constexpr float kInf = std::numeric_limits<float>::infinity();

// The (unscaled) value of magnitude pattern a, by the reference.
template <DType D>
double PatternValue(uint32_t a) {
  unsigned char b[4] = {};
  std::memcpy(b, &a, item::Fmt<D>::kSize);
  TensorRef t;
  t.data = b;
  t.numel = 1;
  t.dtype = D;
  return cpu::ElementValue(t, 0);
}

// Items of patterns from [lo, hi] (random sign, ~3% zeros) plus `special`
// at a random position: near the maximum, with NaN/Inf, subnormals only,
// subnormals with the maximum, zeros only, a spread of normals.
template <DType D>
std::vector<unsigned char> Items(uint64_t seed, uint32_t* n_items) {
  using F = item::Fmt<D>;
  const uint32_t max = F::kNonfinite - 1, sign = F::kAbs + 1;
  const uint32_t least_normal = 1u << saturation::BitsOf(D).mant_bits;
  const uint32_t kinds[][3] = {{max / 2, max, 0},
                               {max - 3, max, 0},
                               {max - 3, max, F::kNonfinite},
                               {max / 2, max, F::kNanMin},
                               {1, least_normal - 1, 0},
                               {1, least_normal - 1, max},
                               {0, 0, 0},
                               {least_normal, 3 * max / 4, max | sign}};
  *n_items = static_cast<uint32_t>(std::size(kinds));
  std::vector<unsigned char> bytes(*n_items * item::kItemElems * F::kSize);
  std::mt19937_64 rng(seed);
  for (uint32_t k = 0; k < *n_items; ++k) {
    const uint32_t lo = kinds[k][0], hi = kinds[k][1];
    for (uint32_t i = 0; i < item::kItemElems; ++i) {
      uint32_t a = 0;
      if (hi > 0 && rng() % 32 != 0) a = lo + static_cast<uint32_t>(rng() % (hi - lo + 1u));
      a |= rng() % 2 ? sign : 0u;
      std::memcpy(&bytes[(k * item::kItemElems + i) * F::kSize], &a, F::kSize);
    }
    if (kinds[k][2] != 0) {
      const uint32_t at = k * item::kItemElems + static_cast<uint32_t>(rng() % 300);
      std::memcpy(&bytes[at * F::kSize], &kinds[k][2], F::kSize);
    }
  }
  return bytes;
}

template <DType D>
void CheckDtype() {
  using F = item::Fmt<D>;
  const uint32_t max = F::kNonfinite - 1;
  const float v_mid = static_cast<float>(PatternValue<D>(3 * max / 4));
  const float magnitudes[] = {kSaturationAtFormatMax,
                              static_cast<float>(PatternValue<D>(max - 2)),
                              v_mid,
                              std::nextafter(v_mid, kInf),
                              static_cast<float>(PatternValue<D>(2)),
                              std::numeric_limits<float>::max()};
  uint32_t n_items = 0;
  const std::vector<unsigned char> bytes = Items<D>(static_cast<uint64_t>(D) * 7, &n_items);
  uint64_t counted = 0;
  for (uint32_t k = 0; k < n_items; ++k) {
    const unsigned char* p = bytes.data() + k * item::kItemElems * F::kSize;
    // Full items at an aligned and an unaligned start; partial items.
    for (auto [n, address] : {std::pair<uint32_t, uintptr_t>{item::kItemElems, 0},
                              {item::kItemElems, F::kSize},
                              {300, 0},
                              {1, 0}}) {
      bool vec = false, rescanned = false;
      const item::Result plain = SimItem<D>(p, n, address, &vec, &rescanned);
      EXPECT_EQ(plain.saturated, 0u);
      for (float m : magnitudes) {
        const uint32_t sat = saturation::Threshold(D, m);
        ASSERT_NE(sat, 0u);
        const item::Result got = SimItem<D, true>(p, n, address, &vec, &rescanned, sat);
        TensorRef t;
        t.data = p;
        t.numel = n;
        t.dtype = D;
        t.saturation_magnitude = m;
        const uint64_t want = cpu::ComputeReferenceStats(&t, 1).saturated;
        const std::string where = std::string(DTypeName(D)) + " item " + std::to_string(k) +
                                  " n=" + std::to_string(n) + " m=" + std::to_string(m) +
                                  (vec ? " vector" : " scalar") + (rescanned ? " + careful" : "");
        EXPECT_EQ(got.saturated, want) << where;
        EXPECT_EQ(Bits(got.partial), Bits(plain.partial)) << where;
        EXPECT_EQ(got.amax, plain.amax) << where;
        EXPECT_EQ(got.zeros, plain.zeros) << where;
        EXPECT_EQ(got.nonfinite, plain.nonfinite) << where;
        EXPECT_EQ(got.nans, plain.nans) << where;
        counted += got.saturated;
      }
    }
  }
  EXPECT_GT(counted, 0u);  // the data reach the thresholds
}

TEST(GpuItemMathSaturation, Fp32) { CheckDtype<DType::kFp32>(); }
TEST(GpuItemMathSaturation, Bf16) { CheckDtype<DType::kBf16>(); }
TEST(GpuItemMathSaturation, Fp16) { CheckDtype<DType::kFp16>(); }
TEST(GpuItemMathSaturation, Fp8E4M3) { CheckDtype<DType::kFp8E4M3>(); }
TEST(GpuItemMathSaturation, Fp8E5M2) { CheckDtype<DType::kFp8E5M2>(); }

// The packed compare of the vector path at every threshold and field value
// (16-bit and fp8 fields): a field counts iff it is >= the threshold, and
// nothing carries into the neighbouring field.
TEST(GpuItemMathSaturation, PackedCompareEveryThresholdAndValue) {
  for (uint32_t thr = 1; thr <= 0x7f; ++thr) {
    for (uint32_t a = 0; a <= 0x7f; ++a) {
      item::Fast f;
      double v[4] = {};
      const uint32_t w = a | (0x7fu << 8) | (a << 16);  // neighbours at the top
      item::AccumulateWord<DType::kFp8E5M2, true>(w, v, &f, item::SatAddend<DType::kFp8E5M2>(thr));
      ASSERT_EQ(item::FastSaturated<DType::kFp8E5M2>(f), 2 * (a >= thr ? 1u : 0u) + 1u)
          << thr << " " << a;
    }
  }
  for (uint32_t thr : {1u, 2u, 0x3c00u, 0x7bffu, 0x7c00u, 0x7f7fu, 0x7f80u}) {
    for (uint32_t a = 0; a <= 0x7fff; ++a) {
      item::Fast f;
      double v[2] = {};
      item::AccumulateWord<DType::kBf16, true>(a | (0x7fffu << 16), v, &f,
                                               item::SatAddend<DType::kBf16>(thr));
      ASSERT_EQ(item::FastSaturated<DType::kBf16>(f), (a >= thr ? 1u : 0u) + 1u) << thr << " " << a;
    }
  }
}

}  // namespace
}  // namespace gnmr
