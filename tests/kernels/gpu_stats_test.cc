// GpuStats (kernels/cuda) against the CPU reference path: bit-identical
// statistics for every dtype, size, special value and alignment (vector,
// scalar and byte paths of the item kernel, the careful rescan of items
// with NaN/Inf); run-to-run identity, pointer refresh, CUDA graph capture
// and replay, apply kernels.
// Without a CUDA device every test but NoDeviceIsUnavailable skips.
#include "kernels/gpu_stats.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "kernels/cpu_stats.h"
#include "tests/client/stats_test_util.h"
#include "tests/kernels/gpu_test_util.h"

namespace gnmr {
namespace {

using testing::Bits;
using testing::TestTensor;

using testing::CheckUnits;
using testing::DevTensor;
using testing::ExpectSame;
using testing::GpuAvailable;
using testing::RunGpu;

const DType kAll[] = {DType::kFp32, DType::kBf16, DType::kFp16, DType::kFp8E4M3, DType::kFp8E5M2};

TEST(GpuStatsTest, NoDeviceIsUnavailable) {
  if (GpuAvailable()) GTEST_SKIP() << "a CUDA device is present";
  auto g = GpuStats::Create(0);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kUnavailable) << g.status().ToString();
}

TEST(GpuStatsTest, AllDtypesAndSizes) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  const uint64_t sizes[] = {0, 1, 255, 256, 4095, 4096, 4097, 65536 + 17, 1000003, 3000001};
  for (DType d : kAll) {
    for (uint64_t n : sizes) {
      DevTensor t(TestTensor(d, n), 0);
      t.host.FillNormal(n * 31 + static_cast<uint64_t>(d), 0.5f);
      if (DTypeSize(d) == 1) t.host.set_scale_inv(0.0078125f * 3);
      CheckUnits({{&t}}, std::string(DTypeName(d)) + " n=" + std::to_string(n));
    }
  }
}

TEST(GpuStatsTest, SpecialValuesAndUnalignedStarts) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(7);
  for (DType d : kAll) {
    // 0: vector path; 4, 8, 12: element-aligned, not on a vector boundary
    // (scalar path); 1, 2, 3: not even element-aligned (byte loads).
    for (size_t off : {0, 1, 2, 3, 4, 8, 12}) {
      for (int pattern = 0; pattern < 5; ++pattern) {
        const uint64_t n = 3 * 4096 + 123;
        DevTensor t(TestTensor(d, n, off), off);
        t.host.FillNormal(pattern + off, 1e-3f);
        const uint32_t bits_max = DTypeSize(d) == 4   ? 0xffffffffu
                                  : DTypeSize(d) == 2 ? 0xffffu
                                                      : 0xffu;
        for (uint64_t i = 0; i < n; ++i) {
          const uint32_t r = static_cast<uint32_t>(rng());
          if (pattern == 1 && i % 97 == 0) t.host.SetBits(i, r & bits_max);          // any pattern
          if (pattern == 2 && i % 5 == 0) t.host.SetBits(i, (r & 0xff) & bits_max);  // denormals
          if (pattern == 3 && i % 3 == 0)
            t.host.SetBits(i, (i & 1) ? (bits_max / 2 + 1) : 0u);  // +-0
          if (pattern == 4) t.host.SetBits(i, r & bits_max);       // all random (NaN/Inf too)
        }
        CheckUnits({{&t}}, std::string(DTypeName(d)) + " off=" + std::to_string(off) +
                               " pattern=" + std::to_string(pattern));
      }
    }
  }
}

TEST(GpuStatsTest, MixedUnitsRunToRunAndRefresh) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  std::vector<std::unique_ptr<DevTensor>> owned;
  std::vector<std::vector<DevTensor*>> units(7);
  for (int i = 0; i < 40; ++i) {
    const DType d = kAll[i % 5];
    const uint64_t n = (i * 7919u) % 70000u + (i % 3 == 0 ? 0u : 5u);
    owned.push_back(std::make_unique<DevTensor>(TestTensor(d, n, i % 4), i % 4));
    owned.back()->host.FillNormal(i, 0.1f * (i + 1));
    units[i % 7].push_back(owned.back().get());
  }
  CheckUnits(units, "mixed");
  // Run-to-run identity and pointer refresh on one GpuStats.
  auto g = GpuStats::Create(0);
  ASSERT_TRUE(g.ok());
  std::vector<std::vector<TensorRef>> refs(units.size());
  for (size_t u = 0; u < units.size(); ++u)
    for (DevTensor* t : units[u]) refs[u].push_back(t->Ref());
  ASSERT_TRUE((*g)->SetTable(refs).ok());
  const auto first = RunGpu(g->get());
  for (int rep = 0; rep < 5; ++rep) {
    const auto again = RunGpu(g->get());
    for (size_t u = 0; u < first.size(); ++u) ExpectSame(first[u], again[u], "rerun");
  }
  // Move every tensor to a new buffer with new contents.
  std::vector<std::unique_ptr<DevTensor>> moved;
  std::vector<const void*> ptrs;
  std::vector<UnitStats> want(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<TensorRef> host;
    for (DevTensor* t : units[u]) {
      moved.push_back(std::make_unique<DevTensor>(t->host.Moved(0), 0));
      moved.back()->host.FillNormal(u * 1000 + moved.size(), 2.0f);
      moved.back()->Upload();
      ptrs.push_back(moved.back()->Ref().data);
      host.push_back(moved.back()->host.Ref());
    }
    ASSERT_TRUE(cpu::ComputeStats(host.data(), host.size(), &want[u]).ok());
  }
  ASSERT_TRUE((*g)->RefreshPointers(ptrs).ok());
  const auto got = RunGpu(g->get());
  for (size_t u = 0; u < got.size(); ++u) ExpectSame(want[u], got[u], "refreshed");
}

TEST(GpuStatsTest, GraphCaptureAndReplay) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  DevTensor a(TestTensor(DType::kBf16, 100000), 0), b(TestTensor(DType::kFp32, 5000, 4), 4);
  a.host.FillNormal(1, 1.0f);
  b.host.FillNormal(2, 1.0f);
  a.Upload();
  b.Upload();
  DevTensor b_moved(TestTensor(DType::kFp32, 5000, 1), 1);
  b_moved.host.FillNormal(3, 5.0f);
  auto g = GpuStats::Create(0);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE((*g)->SetTable({{a.Ref()}, {b.Ref()}}).ok());
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_TRUE((*g)->Launch(s, 42).ok());
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int rep = 0; rep < 3; ++rep) {
    // New contents each replay: the graph reads the live tensors.
    a.host.FillNormal(10 + rep, 1.0f + rep);
    a.Upload();
    if (rep == 2) {  // pointer refresh between replays
      b_moved.Upload();
      ASSERT_TRUE((*g)->RefreshPointers({a.Ref().data, b_moved.Ref().data}).ok());
    }
    const TestTensor& bh = rep == 2 ? b_moved.host : b.host;
    UnitStats want[2];
    TensorRef ha = a.host.Ref(), hb = bh.Ref();
    ASSERT_TRUE(cpu::ComputeStats(&ha, 1, &want[0]).ok());
    ASSERT_TRUE(cpu::ComputeStats(&hb, 1, &want[1]).ok());
    (*g)->OnGraphReplay(42 + rep);  // before the launch (gpu_stats.h)
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    int64_t step = 0;
    std::vector<UnitStats> got;
    ASSERT_TRUE((*g)->Poll(&step, &got));
    EXPECT_EQ(step, 42 + rep);
    ExpectSame(want[0], got[0], "graph a");
    ExpectSame(want[1], got[1], "graph b");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

// The apply kernels' contract on the host: x * s in fp32, rounded to the
// dtype (cuda_*.h host conversions), 0 -> +0, 1 -> untouched.
uint32_t ScaleRef(DType d, uint32_t b, float s) {
  if (s == 0.0f) return 0;
  float x;
  switch (d) {
    case DType::kBf16: {
      uint32_t w = b << 16;
      std::memcpy(&x, &w, 4);
      __nv_bfloat16 r = __float2bfloat16_rn(x * s);
      uint16_t o;
      std::memcpy(&o, &r, 2);
      return o;
    }
    case DType::kFp16: {
      __half_raw hr;
      hr.x = static_cast<unsigned short>(b);
      const __half h(hr);
      __half r = __float2half_rn(__half2float(h) * s);
      uint16_t o;
      std::memcpy(&o, &r, 2);
      return o;
    }
    case DType::kFp8E4M3:
    case DType::kFp8E5M2: {
      const auto k = d == DType::kFp8E4M3 ? __NV_E4M3 : __NV_E5M2;
      if (d == DType::kFp8E5M2 && (b & 0x7f) == 0x7c) return b;
      __half h(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), k));
      return __nv_cvt_float_to_fp8(__half2float(h) * s, __NV_SATFINITE, k);
    }
    default: {
      std::memcpy(&x, &b, 4);
      const float r = x * s;
      uint32_t o;
      std::memcpy(&o, &r, 4);
      return o;
    }
  }
}

TEST(GpuStatsTest, ApplyScaleExact) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  const float scales[] = {1.0f, 0.0f, 0.37f, 1e-3f};
  std::vector<std::unique_ptr<DevTensor>> ts;
  std::vector<std::vector<TensorRef>> refs(4);
  for (int u = 0; u < 4; ++u) {
    for (DType d : kAll) {
      ts.push_back(std::make_unique<DevTensor>(TestTensor(d, 9000 + u, u % 2), u % 2));
      ts.back()->host.FillNormal(u * 10 + static_cast<int>(d), 3.0f);
      ts.back()->host.SetBits(5, DTypeSize(d) == 4   ? 0x7fc00000u
                                 : DTypeSize(d) == 2 ? 0x7e00u
                                                     : 0x7fu);
      ts.back()->host.SetBits(6, 1u);  // smallest subnormal
      ts.back()->Upload();
      refs[u].push_back(ts.back()->Ref());
    }
  }
  auto g = GpuStats::Create(0);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE((*g)->SetTable(refs).ok());
  ASSERT_TRUE((*g)->ApplyScale({scales[0], scales[1], scales[2], scales[3]}, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (size_t i = 0; i < ts.size(); ++i) {
    const int u = static_cast<int>(i / 5);
    const TensorRef h = ts[i]->host.Ref();
    const size_t es = DTypeSize(h.dtype);
    std::vector<unsigned char> got;
    ts[i]->Download(&got);
    const auto* src = static_cast<const unsigned char*>(h.data);
    for (uint64_t k = 0; k < h.numel; ++k) {
      uint32_t b = 0, o = 0;
      std::memcpy(&b, src + k * es, es);
      std::memcpy(&o, got.data() + k * es, es);
      const uint32_t want = scales[u] == 1.0f ? b : ScaleRef(h.dtype, b, scales[u]);
      ASSERT_EQ(o, want) << DTypeName(h.dtype) << " unit " << u << " element " << k;
    }
  }
}

}  // namespace
}  // namespace gnmr
