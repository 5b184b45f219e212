// GpuStats' saturation count (UnitStats::saturated) against the CPU path:
// every dtype, at the format maximum and at a magnitude inside the range,
// full and partial items, vector and scalar paths (aligned and unaligned
// starts), edge patterns (the maximum, one below, NaN/Inf, negative values,
// subnormals), and units that mix tensors with and without counting (the
// two item kernel instantiations of one dtype). Counts are integers, so
// the GPU must match the CPU exactly, run after run.
// Without a CUDA device every test skips.
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "kernels/cpu_stats.h"
#include "kernels/gpu_stats.h"
#include "tests/client/stats_test_util.h"
#include "tests/kernels/gpu_test_util.h"

namespace gnmr {
namespace {

using testing::CheckUnits;
using testing::DevTensor;
using testing::GpuAvailable;
using testing::TestTensor;

const DType kAll[] = {DType::kFp32, DType::kBf16, DType::kFp16, DType::kFp8E4M3, DType::kFp8E5M2};

uint32_t MaxFinite(DType d) {
  switch (d) {
    case DType::kFp32:
      return 0x7f7fffffu;
    case DType::kBf16:
      return 0x7f7fu;
    case DType::kFp16:
      return 0x7bffu;
    case DType::kFp8E4M3:
      return 0x7eu;
    default:
      return 0x7bu;
  }
}

// n normals with edge patterns sprinkled in (every 61st element: max, -max,
// one below max, NaN/Inf, a subnormal, in turn).
std::unique_ptr<DevTensor> EdgeTensor(DType d, uint64_t n, size_t off, float magnitude,
                                      uint64_t seed) {
  auto t = std::make_unique<DevTensor>(TestTensor(d, n, off), off);
  t->host.FillNormal(seed, DTypeSize(d) == 1 ? 4.0f : 0.5f);
  const uint32_t max = MaxFinite(d);
  const uint32_t sign = DTypeSize(d) == 4 ? 0x80000000u : DTypeSize(d) == 2 ? 0x8000u : 0x80u;
  const uint32_t edge[] = {max, max | sign, max - 1, max + 1, sign | 3u};
  for (uint64_t i = seed % 61; i < n; i += 61) t->host.SetBits(i, edge[(i / 61) % 5]);
  t->host.set_saturation_magnitude(magnitude);
  if (DTypeSize(d) == 1) t->host.set_scale_inv(0.25f);
  return t;
}

TEST(GpuStatsSaturationTest, EveryDtypeSizeAndPathMatchesCpu) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  for (DType d : kAll) {
    const float mid = DTypeSize(d) == 1 ? 4.0f : 0.5f;
    for (float m : {kSaturationAtFormatMax, mid}) {
      for (uint64_t n :
           {uint64_t{1}, uint64_t{4095}, uint64_t{4096}, uint64_t{65536 + 17}, uint64_t{1000003}}) {
        for (size_t off : {size_t{0}, size_t{1}, DTypeSize(d)}) {
          auto t = EdgeTensor(d, n, off, m, n + off);
          CheckUnits({{t.get()}},
                     std::string(DTypeName(d)) + " n=" + std::to_string(n) +
                         " off=" + std::to_string(off) + " m=" + std::to_string(m),
                     2);
        }
      }
    }
  }
}

// Units mixing counting and non-counting tensors of one dtype and of
// several, so both item kernels of a dtype run in one launch.
TEST(GpuStatsSaturationTest, MixedUnitsMatchCpu) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  std::vector<std::unique_ptr<DevTensor>> owned;
  std::vector<std::vector<DevTensor*>> units(5);
  for (size_t i = 0; i < 20; ++i) {
    const DType d = kAll[i % 5];
    const float m = i % 3 == 0 ? 0.0f : i % 3 == 1 ? kSaturationAtFormatMax : 1.0f;
    owned.push_back(EdgeTensor(d, 9000 + 4096 * i, i % 4, m, i));
    units[i % 5 == 0 ? 0 : i % 4 + 1].push_back(owned.back().get());
  }
  CheckUnits(units, "mixed", 2);
}

TEST(GpuStatsSaturationTest, InvalidMagnitudeIsRefused) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  auto g = GpuStats::Create(0);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto t = EdgeTensor(DType::kBf16, 100, 0, -1.0f, 1);
  t->Upload();
  EXPECT_EQ((*g)->SetTable({{t->Ref()}}).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gnmr
