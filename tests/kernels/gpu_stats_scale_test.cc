// GpuStats with fp8 scales read at run time (TensorRef::scale_inv_ptr): the
// kernel reads the scale on the stream, so a changed value (or a graph
// replay after one) is used by the next computation, bit-identical to the
// CPU path with that value; memory the device cannot read is refused.
// Without a CUDA device every test skips.
#include <limits>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "kernels/cpu_stats.h"
#include "kernels/gpu_stats.h"
#include "kernels/stats_order.h"
#include "tests/client/stats_test_util.h"
#include "tests/kernels/gpu_test_util.h"

namespace gnmr {
namespace {

using testing::Bits;
using testing::DevTensor;
using testing::ExpectSame;
using testing::GpuAvailable;
using testing::PageableReadable;
using testing::RunGpu;
using testing::TestTensor;

// The CPU path's statistics of `t` with scale `s`.
UnitStats CpuWithScale(TestTensor* t, float s) {
  t->set_scale_inv(s);
  TensorRef r = t->Ref();
  UnitStats u;
  EXPECT_TRUE(cpu::ComputeStats(&r, 1, &u).ok());
  return u;
}

struct DeviceScale {
  float* p = nullptr;
  DeviceScale() { EXPECT_EQ(cudaMalloc(&p, sizeof(float)), cudaSuccess); }
  ~DeviceScale() { cudaFree(p); }
  void Set(float v, cudaStream_t s = nullptr) {
    ASSERT_EQ(cudaMemcpyAsync(p, &v, sizeof v, cudaMemcpyHostToDevice, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  }
};

TEST(GpuStatsScaleTest, DeviceScaleIsReadAtEachLaunch) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  for (DType d : {DType::kFp8E4M3, DType::kFp8E5M2}) {
    DevTensor t(TestTensor(d, 70000, 1), 1);
    t.host.FillNormal(5, d == DType::kFp8E4M3 ? 2.0f : 0.01f);
    t.Upload();
    DeviceScale scale;
    TensorRef r = t.Ref();
    r.scale_inv = 99.0f;  // ignored
    r.scale_inv_ptr = scale.p;
    auto g = GpuStats::Create(0);
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE((*g)->SetTable({{r}}).ok());
    for (float s : {0.25f, 3.0f, 0.0078125f * 5}) {
      scale.Set(s);
      const std::vector<UnitStats> got = RunGpu(g->get());
      ASSERT_EQ(got.size(), 1u);
      ExpectSame(CpuWithScale(&t.host, s), got[0], DTypeName(d));
    }
    scale.Set(std::numeric_limits<float>::quiet_NaN());
    const std::vector<UnitStats> bad = RunGpu(g->get());
    ASSERT_EQ(bad.size(), 1u);
    EXPECT_EQ(Bits(bad[0].sumsq), stats_order::kCanonicalNanBits);
    EXPECT_EQ(Bits(bad[0].amax), Bits(0.0));
    EXPECT_EQ(bad[0].numel, 70000u);
  }
}

TEST(GpuStatsScaleTest, GraphReplaysSeeTheCurrentScale) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  DevTensor t(TestTensor(DType::kFp8E4M3, 50000), 0);
  t.host.FillNormal(9, 1.0f);
  t.Upload();
  DeviceScale scale;
  TensorRef r = t.Ref();
  r.scale_inv_ptr = scale.p;
  auto g = GpuStats::Create(0);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE((*g)->SetTable({{r}}).ok());
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_TRUE((*g)->Launch(s, 7).ok());
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  int rep = 0;
  for (float v : {0.5f, 0.375f, 6.0f}) {
    scale.Set(v, s);  // as a recipe updates scale_inv between steps
    (*g)->OnGraphReplay(7 + rep);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    int64_t step = 0;
    std::vector<UnitStats> got;
    ASSERT_TRUE((*g)->Poll(&step, &got));
    EXPECT_EQ(step, 7 + rep);
    ExpectSame(CpuWithScale(&t.host, v), got[0], "replay");
    ++rep;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

// A kernel reading pageable host memory would fault and poison the CUDA
// context of the trainer: SetTable refuses such a pointer up front.
TEST(GpuStatsScaleTest, RefusesMemoryTheDeviceCannotRead) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  DevTensor t(TestTensor(DType::kFp8E5M2, 100), 0);
  t.Upload();
  auto g = GpuStats::Create(0);
  ASSERT_TRUE(g.ok());
  TensorRef r = t.Ref();
  std::vector<float> pageable(4, 1.0f);
  r.scale_inv_ptr = pageable.data();
  Status st = (*g)->SetTable({{r}});
  if (!PageableReadable()) {  // else the device reads it (HMM, ATS): accepted
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  }
  float* pinned = nullptr;  // pinned and mapped: readable by the device
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&pinned), sizeof(float), cudaHostAllocMapped),
            cudaSuccess);
  *pinned = 0.5f;
  r.scale_inv_ptr = pinned;
  st = (*g)->SetTable({{r}});
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (st.ok()) {
    const std::vector<UnitStats> got = RunGpu(g->get());
    ASSERT_EQ(got.size(), 1u);
    ExpectSame(CpuWithScale(&t.host, 0.5f), got[0], "pinned scale");
  }
  DeviceScale dev;
  r.scale_inv_ptr = reinterpret_cast<const float*>(reinterpret_cast<char*>(dev.p) + 1);
  EXPECT_EQ((*g)->SetTable({{r}}).code(), StatusCode::kInvalidArgument);  // misaligned
  cudaFreeHost(pinned);
}

}  // namespace
}  // namespace gnmr
