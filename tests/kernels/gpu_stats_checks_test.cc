// GpuStats refuses memory its kernels cannot read (a fault there would be a
// sticky error in the trainer's CUDA context), and a failed SetTable or
// RefreshPointers leaves nothing half-built behind. Without a CUDA device
// every test skips.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "gnmr/gpu_stats.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cpu/cpu_stats.h"
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
// (memory pools, built on the virtual-memory API; PyTorch's expandable
// segments map memory with that API directly, not covered here), managed
// memory and mapped pinned memory.
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
// finalizer) must not be left with one: restoring "device 0" instead would
// create a context on GPU 0 in every rank.
TEST(GpuStatsChecksTest, LeavesAContextlessThreadWithoutContext) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  const cuda::ContextFns& f = cuda::DriverContextFns();
  if (f.get == nullptr) GTEST_SKIP() << "no driver entry points";
  DevTensor t(TestTensor(DType::kFp16, 7000), 0);
  t.host.FillNormal(6, 1.0f);
  t.Upload();
  auto g = GpuStats::Create(0);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE((*g)->SetTable({{t.Ref()}}).ok());
  std::thread([&] {
    CUcontext before = reinterpret_cast<CUcontext>(1), after = reinterpret_cast<CUcontext>(1);
    ASSERT_EQ(f.get(&before), CUDA_SUCCESS);
    EXPECT_EQ(before, nullptr) << "a new thread starts without a context";
    cudaStream_t s;
    {
      cuda::DeviceGuard guard(0);  // the caller's own stream, on its device
      ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    }
    ASSERT_TRUE((*g)->Launch(s).ok());
    ASSERT_EQ(f.get(&after), CUDA_SUCCESS);
    EXPECT_EQ(after, nullptr) << "Launch left a context bound";
    cuda::DeviceGuard guard(0);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    cudaStreamDestroy(s);
  }).join();
}

}  // namespace
}  // namespace gnmr
