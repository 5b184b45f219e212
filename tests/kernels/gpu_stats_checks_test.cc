// GpuStats refuses memory its kernels cannot read (a fault there would be a
// sticky error in the trainer's CUDA context), and a failed SetTable or
// RefreshPointers leaves nothing half-built behind. Without a CUDA device
// every test skips.
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "kernels/cpu_stats.h"
#include "kernels/cuda_util.h"
#include "kernels/gpu_stats.h"
#include "tests/client/stats_test_util.h"
#include "tests/kernels/gpu_test_util.h"

namespace gnmr {
namespace {

using testing::DevTensor;
using testing::ExpectSame;
using testing::GpuAvailable;
using testing::PageableReadable;
using testing::RunGpu;
using testing::TestTensor;

TEST(GpuStatsChecksTest, FailedSetTableLeavesNoTable) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  DevTensor t(TestTensor(DType::kBf16, 9000), 0);
  t.host.FillNormal(1, 1.0f);
  t.Upload();
  auto g = GpuStats::Create(0);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE((*g)->SetTable({{t.Ref()}}).ok());
  ASSERT_EQ(RunGpu(g->get()).size(), 1u);

  TensorRef bad = t.Ref();
  bad.data = nullptr;  // numel > 0: refused on any system
  const Status st = (*g)->SetTable({{bad}});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_EQ((*g)->Launch(nullptr).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*g)->RefreshPointers({t.Ref().data}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*g)->ApplyScale({0.5f}, nullptr).code(), StatusCode::kFailedPrecondition);
  int64_t step = 0;
  std::vector<UnitStats> out;
  EXPECT_FALSE((*g)->Poll(&step, &out));

  ASSERT_TRUE((*g)->SetTable({{t.Ref()}}).ok());  // a good table works again
  const std::vector<UnitStats> got = RunGpu(g->get());
  ASSERT_EQ(got.size(), 1u);
  UnitStats want;
  TensorRef h = t.host.Ref();
  ASSERT_TRUE(cpu::ComputeStats(&h, 1, &want).ok());
  ExpectSame(want, got[0], "after a failed SetTable");
}

TEST(GpuStatsChecksTest, RefreshPointersRefusesUnreadableMemory) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  DevTensor t(TestTensor(DType::kFp32, 5000), 0);
  t.host.FillNormal(2, 1.0f);
  t.Upload();
  auto g = GpuStats::Create(0);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE((*g)->SetTable({{t.Ref()}}).ok());
  const std::vector<UnitStats> before = RunGpu(g->get());
  ASSERT_EQ(before.size(), 1u);
  std::vector<float> pageable(5000, 1.0f);
  if (!PageableReadable()) {  // else the device reads it (HMM, ATS): accepted
    EXPECT_EQ((*g)->RefreshPointers({pageable.data()}).code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ((*g)->RefreshPointers({nullptr}).code(), StatusCode::kInvalidArgument);
  // The old pointer is still in force.
  const std::vector<UnitStats> after = RunGpu(g->get());
  ASSERT_EQ(after.size(), 1u);
  ExpectSame(before[0], after[0], "after refused refreshes");
}

// What frameworks hand over must be accepted: stream-ordered allocations
// (memory pools), managed memory and mapped pinned memory (virtual-memory
// mappings: gpu_stats_memory_test.cc).
TEST(GpuStatsChecksTest, AcceptsPoolManagedAndPinnedMemory) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  TestTensor host(DType::kBf16, 20000);
  host.FillNormal(4, 1.0f);
  const size_t bytes = 20000 * 2;
  void* pool = nullptr;
  void* managed = nullptr;
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocAsync(&pool, bytes, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMallocManaged(&managed, bytes), cudaSuccess);
  ASSERT_EQ(cudaHostAlloc(&pinned, bytes, cudaHostAllocMapped), cudaSuccess);
  for (void* p : {pool, managed, pinned}) {
    ASSERT_EQ(cudaMemcpy(p, host.Ref().data, bytes, cudaMemcpyDefault), cudaSuccess);
  }
  UnitStats want;
  TensorRef h = host.Ref();
  ASSERT_TRUE(cpu::ComputeStats(&h, 1, &want).ok());
  auto g = GpuStats::Create(0);
  ASSERT_TRUE(g.ok());
  const char* names[] = {"stream-ordered", "managed", "pinned"};
  int k = 0;
  for (void* p : {pool, managed, pinned}) {
    TensorRef r = host.Ref();
    r.data = p;
    r.device = 0;
    const Status st = (*g)->SetTable({{r}});
    ASSERT_TRUE(st.ok()) << names[k] << ": " << st.ToString();
    const std::vector<UnitStats> got = RunGpu(g->get());
    ASSERT_EQ(got.size(), 1u);
    ExpectSame(want, got[0], names[k++]);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  g->reset();  // the tables go before the memory they point at
  cudaFreeAsync(pool, nullptr);
  cudaFree(managed);
  cudaFreeHost(pinned);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// The library runs on the trainer's threads: it must leave the thread's
// current device as it found it.
TEST(GpuStatsChecksTest, KeepsTheCallersCurrentDevice) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  if (n < 2) GTEST_SKIP() << "needs two CUDA devices";
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  DevTensor t(TestTensor(DType::kFp32, 100), 0);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  t.Upload();  // on device 0
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  auto g = GpuStats::Create(0);
  ASSERT_TRUE(g.ok());
  int now = -1;
  ASSERT_TRUE((*g)->SetTable({{t.Ref()}}).ok());
  ASSERT_TRUE((*g)->Launch(nullptr).ok());
  ASSERT_EQ(cudaGetDevice(&now), cudaSuccess);
  EXPECT_EQ(now, 1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// A thread without a CUDA context (the client's I/O thread, a Python
// finalizer) must not be left with one after any call: restoring "device
// 0" instead, or letting an event query run without the guard, would
// create a context on GPU 0 in every rank.
TEST(GpuStatsChecksTest, LeavesAContextlessThreadWithoutContext) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  const cuda::DriverFns& f = cuda::Driver();
  if (f.ctx_get_current == nullptr) GTEST_SKIP() << "no driver entry points";
  DevTensor t(TestTensor(DType::kFp16, 7000), 0), t2(TestTensor(DType::kFp16, 7000), 0);
  t.host.FillNormal(6, 1.0f);
  t.Upload();
  t2.Upload();
  auto g = GpuStats::Create(0);
  ASSERT_TRUE(g.ok());
  std::unique_ptr<GpuStats> gpu = std::move(g).value();
  std::thread([&] {
    auto expect_none = [&](const char* after) {
      CUcontext now = reinterpret_cast<CUcontext>(1);
      ASSERT_EQ(f.ctx_get_current(&now), CUDA_SUCCESS);
      EXPECT_EQ(now, nullptr) << after << " left a context bound";
    };
    expect_none("thread start");
    ASSERT_TRUE(gpu->SetTable({{t.Ref()}}).ok());
    expect_none("SetTable");
    cudaStream_t s;
    {
      cuda::DeviceGuard guard(0);  // the caller's own stream, on its device
      ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    }
    expect_none("DeviceGuard");
    ASSERT_TRUE(gpu->RefreshPointers({t2.Ref().data}).ok());
    expect_none("RefreshPointers");
    ASSERT_TRUE(gpu->Launch(s, 1).ok());
    expect_none("Launch");
    int64_t step = 0;
    std::vector<UnitStats> out;
    gpu->Poll(&step, &out);
    expect_none("Poll");
    gpu->WaitOldest();
    expect_none("WaitOldest");
    EXPECT_TRUE(gpu->Poll(&step, &out));
    ASSERT_TRUE(gpu->ApplyScale({0.5f}, s).ok());
    expect_none("ApplyScale");
    gpu.reset();
    expect_none("the destructor");
    cuda::DeviceGuard guard(0);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    cudaStreamDestroy(s);
  }).join();
}

// The trainer's unchecked CUDA error is still there after our calls, and
// our own calls (refusals included) leave a clean error state clean.
TEST(GpuStatsChecksTest, LeavesTheThreadsLastErrorAsItFoundIt) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  DevTensor t(TestTensor(DType::kBf16, 9000), 0);
  t.host.FillNormal(2, 1.0f);
  t.Upload();
  auto g = GpuStats::Create(0);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE((*g)->SetTable({{t.Ref()}}).ok());
  std::vector<float> pageable(9000, 1.0f);
  auto exercise = [&] {
    int64_t step = 0;
    std::vector<UnitStats> out;
    // Only the calls' side effects on the thread's error state matter here.
    (void)(*g)->Launch(nullptr, 3);
    (*g)->WaitOldest();
    (*g)->Poll(&step, &out);
    (*g)->Poll(&step, &out);                         // nothing pending
    (void)(*g)->RefreshPointers({pageable.data()});  // refused unless HMM/ATS
    (void)(*g)->RefreshPointers({t.Ref().data});
    (void)(*g)->ApplyScale({1.0f}, nullptr);
    ASSERT_TRUE((*g)->SetTable({{t.Ref()}}).ok());
  };
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  exercise();
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << "our own errors leaked";
  // A pending (non-sticky) error of the trainer.
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  ASSERT_NE(cudaSetDevice(count + 7), cudaSuccess);
  ASSERT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  exercise();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice) << "the trainer's error was consumed";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// SetTable (and the I/O thread's calls) while another thread of the trainer
// holds a global-mode graph capture open: no device-wide synchronisation,
// no legacy-stream use, so the capture stays valid.
TEST(GpuStatsChecksTest, SetTableBesideAnotherThreadsCapture) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  DevTensor a(TestTensor(DType::kFp32, 20000), 0), b(TestTensor(DType::kBf16, 300000), 0);
  a.host.FillNormal(1, 1.0f);
  b.host.FillNormal(2, 1.0f);
  a.Upload();
  b.Upload();
  auto g = GpuStats::Create(0);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE((*g)->SetTable({{a.Ref()}}).ok());
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  float* scratch = nullptr;
  ASSERT_EQ(cudaMalloc(&scratch, 4096), cudaSuccess);
  std::mutex mu;
  std::condition_variable cv;
  int phase = 0;  // 1: capture open, 2: our calls done
  cudaError_t end_status = cudaErrorUnknown;
  cudaGraph_t graph = nullptr;
  cudaError_t begin_status = cudaErrorUnknown;
  std::thread capturer([&] {
    cudaSetDevice(0);
    begin_status = cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    if (begin_status == cudaSuccess) begin_status = cudaMemsetAsync(scratch, 0, 4096, s);
    {
      std::lock_guard<std::mutex> lock(mu);
      phase = 1;
    }
    cv.notify_all();
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return phase == 2; });
    end_status = cudaStreamEndCapture(s, &graph);
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return phase == 1; });
  }
  // A larger table (allocates), then the same again (reuses).
  const Status s1 = (*g)->SetTable({{a.Ref()}, {b.Ref()}});
  const Status s2 = (*g)->SetTable({{a.Ref()}, {b.Ref()}});
  int64_t step = 0;
  std::vector<UnitStats> out;
  (*g)->Poll(&step, &out);
  {
    std::lock_guard<std::mutex> lock(mu);
    phase = 2;
  }
  cv.notify_all();
  capturer.join();
  ASSERT_EQ(begin_status, cudaSuccess);
  EXPECT_TRUE(s1.ok()) << s1.ToString();
  EXPECT_TRUE(s2.ok()) << s2.ToString();
  EXPECT_EQ(end_status, cudaSuccess) << "the other thread's capture was invalidated";
  if (graph != nullptr) cudaGraphDestroy(graph);
  // And the tables work.
  const std::vector<UnitStats> got = RunGpu(g->get());
  ASSERT_EQ(got.size(), 2u);
  UnitStats want;
  TensorRef hb = b.host.Ref();
  ASSERT_TRUE(cpu::ComputeStats(&hb, 1, &want).ok());
  ExpectSame(want, got[1], "after SetTable beside a capture");
  cudaFree(scratch);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace gnmr
