// GpuStats orders its own operations on the GPU and never waits on the
// host: a launch on stream B queued behind one on stream A (held back by a
// gate kernel) waits for it on the device, RefreshPointers and ApplyScale
// return while the device is busy, a device too far behind gets
// Unavailable rather than a wait, and graph replays are labelled with the
// step registered before their launch. Results equal the CPU path. The
// gate makes every check deterministic (no timing). Without a CUDA device
// every test skips.
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "kernels/cpu_stats.h"
#include "kernels/gpu_stats.h"
#include "tests/client/stats_test_util.h"
#include "tests/kernels/gpu_gate.h"
#include "tests/kernels/gpu_test_util.h"

namespace gnmr {
namespace {

using testing::DevTensor;
using testing::ExpectSame;
using testing::GpuAvailable;
using testing::GpuGate;
using testing::TestTensor;

UnitStats Cpu(const DevTensor& t) {
  TensorRef h = t.host.Ref();
  UnitStats u;
  EXPECT_TRUE(cpu::ComputeStats(&h, 1, &u).ok());
  return u;
}

// Whether `s` still has work queued, given a chance to drain (a
// stream that may finish does so well within the pause; one held back by
// the gate never does, whatever the pause).
bool StillBusy(cudaStream_t s) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  return cudaStreamQuery(s) == cudaErrorNotReady;
}

// Two streams, a gate, and a GpuStats over x (y: the same shape, other
// data, for pointer refreshes).
class GpuStatsOrderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
    ASSERT_EQ(cudaStreamCreateWithFlags(&a_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&b_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_TRUE(gate_.ok());
  }
  void TearDown() override {
    gate_.Open();
    if (a_ != nullptr) cudaStreamDestroy(a_);
    if (b_ != nullptr) cudaStreamDestroy(b_);
  }
  void Start(DType d, uint64_t n) {
    x_ = std::make_unique<DevTensor>(TestTensor(d, n), 0);
    y_ = std::make_unique<DevTensor>(TestTensor(d, n), 0);
    x_->host.FillNormal(1, 1.0f);
    y_->host.FillNormal(2, 3.0f);
    x_->Upload();
    y_->Upload();
    auto g = GpuStats::Create(0);
    ASSERT_TRUE(g.ok());
    g_ = std::move(g).value();
    ASSERT_TRUE(g_->SetTable({{x_->Ref()}}).ok());
  }
  cudaStream_t a_ = nullptr, b_ = nullptr;
  GpuGate gate_;
  std::unique_ptr<DevTensor> x_, y_;
  std::unique_ptr<GpuStats> g_;
};

TEST_F(GpuStatsOrderTest, LaunchesOnTwoStreamsAreOrdered) {
  Start(DType::kBf16, 3000000);
  DevTensor& x = *x_;
  DevTensor& y = *y_;
  ASSERT_EQ(gate_.Block(a_), cudaSuccess);
  ASSERT_TRUE(g_->Launch(a_, 1).ok());  // held back by the gate
  ASSERT_TRUE(g_->RefreshPointers({y.Ref().data}).ok());
  EXPECT_EQ(cudaStreamQuery(a_), cudaErrorNotReady) << "RefreshPointers waited for the launch";
  ASSERT_TRUE(g_->Launch(b_, 2).ok());
  // Stream B's launch shares the tables and output buffers with A's: it
  // must wait for it on the device.
  EXPECT_TRUE(StillBusy(b_)) << "the launch on B ran before the one on A";
  gate_.Open();
  ASSERT_EQ(cudaStreamSynchronize(a_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(b_), cudaSuccess);
  int64_t step = 0;
  std::vector<UnitStats> got;
  ASSERT_TRUE(g_->Poll(&step, &got));
  EXPECT_EQ(step, 1);
  ExpectSame(Cpu(x), got[0], "launch on A (old pointers)");
  ASSERT_TRUE(g_->Poll(&step, &got));
  EXPECT_EQ(step, 2);
  ExpectSame(Cpu(y), got[0], "launch on B (refreshed pointers)");
}

TEST_F(GpuStatsOrderTest, ApplyScaleNeverWaitsAndFollowsTheLaunch) {
  Start(DType::kFp32, 100000);
  DevTensor& x = *x_;
  ASSERT_EQ(gate_.Block(a_), cudaSuccess);
  ASSERT_TRUE(g_->Launch(a_, 1).ok());
  ASSERT_TRUE(g_->ApplyScale({0.5f}, b_).ok());
  ASSERT_TRUE(g_->ApplyScale({0.25f}, b_).ok());  // its own staging slot
  EXPECT_EQ(cudaStreamQuery(a_), cudaErrorNotReady) << "ApplyScale waited";
  EXPECT_TRUE(StillBusy(b_)) << "the apply ran before the launch it follows";
  gate_.Open();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  int64_t step = 0;
  std::vector<UnitStats> got;
  ASSERT_TRUE(g_->Poll(&step, &got));
  ExpectSame(Cpu(x), got[0], "statistics before the applies");
  std::vector<unsigned char> after;
  x.Download(&after);
  const auto* src = static_cast<const float*>(x.host.Ref().data);
  for (size_t i = 0; i < 100000; ++i) {
    const float want = (src[i] * 0.5f) * 0.25f;
    float have;
    std::memcpy(&have, after.data() + 4 * i, 4);
    ASSERT_EQ(std::memcmp(&want, &have, 4), 0) << i;
  }
}

// A device kStagingSlots uploads behind: the next launch that needs a
// staging slot is refused at once; every launch that was accepted reports
// its own data.
TEST_F(GpuStatsOrderTest, TooFarBehindIsUnavailableNotAWait) {
  Start(DType::kFp16, 50000);
  DevTensor& x = *x_;
  DevTensor& y = *y_;
  ASSERT_EQ(gate_.Block(a_), cudaSuccess);
  int accepted = 0;
  Status refused;
  for (int i = 0; i <= GpuStats::kStagingSlots; ++i) {
    const DevTensor& t = i % 2 == 0 ? y : x;  // new pointers every launch (FSDP-like)
    ASSERT_TRUE(g_->RefreshPointers({t.Ref().data}).ok());
    const Status s = g_->Launch(a_, i);
    if (s.ok()) {
      ++accepted;
    } else {
      refused = s;
    }
  }
  EXPECT_EQ(accepted, GpuStats::kStagingSlots);
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable) << refused.ToString();
  EXPECT_EQ(cudaStreamQuery(a_), cudaErrorNotReady) << "a launch waited for the device";
  gate_.Open();
  ASSERT_EQ(cudaStreamSynchronize(a_), cudaSuccess);
  int64_t step = 0;
  std::vector<UnitStats> got;
  int polled = 0;
  while (g_->Poll(&step, &got)) {
    ++polled;
    ExpectSame(Cpu(step % 2 == 0 ? y : x), got[0], "launch " + std::to_string(step));
  }
  EXPECT_EQ(polled, GpuStats::kRingSlots);  // the newest four
  EXPECT_EQ(step, GpuStats::kStagingSlots - 1);
}

// OnGraphReplay before cudaGraphLaunch: a Poll in between (the replay not
// yet run) must not hand out the previous replay's results under the new
// step; regular launches on another stream wait for the replay.
TEST_F(GpuStatsOrderTest, GraphReplaysAreLabelledAndOrdered) {
  Start(DType::kFp8E4M3, 200000);
  DevTensor& x = *x_;
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(a_, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_TRUE(g_->Launch(a_, 0).ok());
  ASSERT_EQ(cudaStreamEndCapture(a_, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  int64_t step = 0;
  std::vector<UnitStats> got;
  for (int rep = 0; rep < 3; ++rep) {
    x.host.FillNormal(10 + rep, 1.0f + rep);
    x.Upload();
    const UnitStats want = Cpu(x);
    ASSERT_EQ(gate_.Block(a_), cudaSuccess);
    g_->OnGraphReplay(100 + rep);
    EXPECT_FALSE(g_->Poll(&step, &got)) << "replay " << rep << " labelled before it ran";
    ASSERT_EQ(cudaGraphLaunch(exec, a_), cudaSuccess);
    EXPECT_FALSE(g_->Poll(&step, &got)) << "replay " << rep << " labelled before it ran";
    ASSERT_TRUE(g_->Launch(b_, 200 + rep).ok());  // a regular launch after the replay
    EXPECT_TRUE(StillBusy(b_)) << "the regular launch ran before the replay";
    gate_.Open();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_TRUE(g_->Poll(&step, &got));
    EXPECT_EQ(step, 200 + rep);  // regular launches first
    ExpectSame(want, got[0], "regular launch");
    ASSERT_TRUE(g_->Poll(&step, &got));
    EXPECT_EQ(step, 100 + rep);
    ExpectSame(want, got[0], "replay");
    EXPECT_FALSE(g_->Poll(&step, &got));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace gnmr
