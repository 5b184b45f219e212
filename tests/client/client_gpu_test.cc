// The client's real GPU path against the real gnmrd (skips without a CUDA
// device): device units observed on a stream reach the daemon bit-identical
// to the same data on the CPU path (norm and history mean of every unit, per
// step), including after SetTensors moved a unit to new device memory, and
// the CUDA-event GPU time is counted; with profiling, the CUPTI overhead
// ratio is measured whenever CUPTI can be owned; forward tensors on the
// device give the host path's rows. The CUDA backend itself:
// no context on the I/O thread, timing that survives a failed launch.
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "client/src/device_backend.h"
#include "client/src/forward_stats.h"
#include "client/src/gpu_path.h"
#include "client/src/outbox.h"
#include "gnmr/client.h"
#include "kernels/cpu_stats.h"
#include "kernels/cuda_driver_fns.h"
#include "kernels/gpu_stats.h"
#include "tests/client/unit_figures.h"
#include "tests/daemon/gnmrd_process.h"
#include "tests/kernels/gpu_gate.h"
#include "tests/kernels/gpu_test_util.h"
#if GNMR_TEST_HAVE_CUPTI
#include "client/src/cupti_profiler.h"
#endif

namespace gnmr {
namespace {

using Clock = std::chrono::steady_clock;
using testing::GnmrdProcess;

using testing::GpuAvailable;

std::map<std::string, std::pair<double, double>> Units(GnmrdProcess* d, const std::string& job) {
  return testing::UnitNormsAndMeans(d->Channel(), job);
}

void Fill(std::vector<float>* v, int64_t step, int unit) {
  for (size_t i = 0; i < v->size(); ++i) {
    (*v)[i] = 1e-3f * static_cast<float>((i * 31 + static_cast<size_t>(unit) * 7 +
                                          static_cast<size_t>(step) * 11) %
                                         997) -
              0.4f;
  }
}

TEST(ClientGpuTest, StreamObserveMatchesCpuThroughGnmrd) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  GnmrdProcess gnmrd;
  ASSERT_TRUE(gnmrd.Start());
  constexpr int kUnits = 3;
  const size_t sizes[kUnits] = {1 << 20, 4097, 300000};
  std::vector<std::vector<float>> host(kUnits);
  std::vector<float*> dev(kUnits), dev2(kUnits);
  for (int u = 0; u < kUnits; ++u) {
    host[u].resize(sizes[u]);
    ASSERT_EQ(cudaMalloc(&dev[u], sizes[u] * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dev2[u], sizes[u] * 4), cudaSuccess);
  }
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  auto make = [&](const std::string& job) {
    ClientOptions o;
    o.target = gnmrd.target();
    o.job_id = job;
    ControllerConfig c;
    c.warmup = 3;
    o.config = c;
    return std::move(Client::Create(o)).value();
  };
  auto cpu = make("cpu");
  auto gpu = make("gpu");
  for (int u = 0; u < kUnits; ++u) {
    TensorRef h{host[u].data(), sizes[u], DType::kFp32, kHostDevice, 1.0f};
    TensorRef d{dev[u], sizes[u], DType::kFp32, 0, 1.0f};
    ASSERT_TRUE(cpu->AddUnit("u" + std::to_string(u), {h}).ok());
    ASSERT_TRUE(gpu->AddUnit("u" + std::to_string(u), {d}).ok());
  }
  ASSERT_TRUE(cpu->Start().ok());
  ASSERT_TRUE(gpu->Start().ok());
  for (int64_t step = 0; step < 10; ++step) {
    const bool moved = step >= 5;  // from step 5 the grads live elsewhere
    for (int u = 0; u < kUnits; ++u) {
      Fill(&host[u], step, u);
      float* target = moved ? dev2[u] : dev[u];
      ASSERT_EQ(
          cudaMemcpyAsync(target, host[u].data(), sizes[u] * 4, cudaMemcpyHostToDevice, stream),
          cudaSuccess);
      if (step == 5) {
        TensorRef d{target, sizes[u], DType::kFp32, 0, 1.0f};
        ASSERT_TRUE(gpu->SetTensors(static_cast<UnitHandle>(u), {d}).ok());
      }
    }
    ASSERT_TRUE(gpu->Observe(step, stream).ok());
    ASSERT_TRUE(cpu->Observe(step).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // host buffers reused next step
    ASSERT_TRUE(gpu->Flush(std::chrono::seconds(10)));
    ASSERT_TRUE(cpu->Flush(std::chrono::seconds(10)));
    // Both jobs decided this step: the daemon holds the same statistics.
    const Clock::time_point end = Clock::now() + std::chrono::seconds(10);
    std::map<std::string, std::pair<double, double>> a, b;
    do {
      a = Units(&gnmrd, "cpu");
      b = Units(&gnmrd, "gpu");
    } while ((a != b || a.size() != kUnits) && Clock::now() < end &&
             (std::this_thread::sleep_for(std::chrono::milliseconds(5)), true));
    ASSERT_EQ(a, b) << "step " << step;
  }
  const ClientCounters k = gpu->Counters();
  EXPECT_EQ(k.reports_sent, 10u);
  EXPECT_GT(k.stats_gpu_seconds, 0.0);
  EXPECT_EQ(k.overhead_source, OverheadSource::kUnavailable);
  cudaStreamDestroy(stream);
  for (int u = 0; u < kUnits; ++u) {
    cudaFree(dev[u]);
    cudaFree(dev2[u]);
  }
}

// Forward tensors on the device (client/src/forward_device.h): the rows of
// a step are the host path's, bit for bit, in call order, and read the
// tensors as they were at the call (stream order), even when the memory is
// overwritten on that stream right after; an fp8 tensor's scale_inv is read
// from device memory when the kernels run.
TEST(ClientGpuTest, DeviceForwardRowsMatchTheHostPathInStreamOrder) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  std::vector<float> a(300000), b(4097), g(1024);
  Fill(&a, 1, 0);
  Fill(&b, 2, 1);
  Fill(&g, 3, 2);
  std::vector<uint8_t> q(70001);
  for (size_t i = 0; i < q.size(); ++i) {
    const uint8_t c = static_cast<uint8_t>((i * 37) % 256);
    q[i] = (c & 0x7f) == 0x7f ? 0x7e : c;  // no NaN; 0x7e/0xfe: at the format maximum
  }
  const float scale_inv = 0.5f;
  float *da = nullptr, *db = nullptr, *dg = nullptr, *dscale = nullptr;
  uint8_t* dq = nullptr;
  ASSERT_EQ(cudaMalloc(&da, a.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, b.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dg, g.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dq, q.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dscale, 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dg, g.data(), g.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dq, q.data(), q.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dscale, &scale_inv, 4, cudaMemcpyHostToDevice), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);

  const auto ref = [](const void* p, uint64_t n, DType d, int32_t device, float sat) {
    TensorRef t;
    t.data = p;
    t.numel = n;
    t.dtype = d;
    t.device = device;
    t.saturation_magnitude = sat;
    return t;
  };
  TensorRef fp8 = ref(dq, q.size(), DType::kFp8E4M3, 0, kSaturationAtFormatMax);
  fp8.scale_inv_ptr = dscale;
  TensorRef fp8_host =
      ref(q.data(), q.size(), DType::kFp8E4M3, kHostDevice, kSaturationAtFormatMax);
  fp8_host.scale_inv = scale_inv;
  const std::vector<std::pair<uint32_t, std::vector<TensorRef>>> calls = {
      {0, {ref(da, a.size(), DType::kFp32, 0, 0.3f)}},
      {1, {fp8}},
      {0, {ref(db, b.size(), DType::kFp32, 0, 0.3f), ref(da, a.size(), DType::kFp32, 0, 0.3f)}},
  };
  const std::vector<std::pair<uint32_t, std::vector<TensorRef>>> host_calls = {
      {0, {ref(a.data(), a.size(), DType::kFp32, kHostDevice, 0.3f)}},
      {1, {fp8_host}},
      {0,
       {ref(b.data(), b.size(), DType::kFp32, kHostDevice, 0.3f),
        ref(a.data(), a.size(), DType::kFp32, kHostDevice, 0.3f)}},
  };

  Outbox outbox(16, 2, 16, GpuPath::kMaxParked);
  StatusOr<std::unique_ptr<GpuPath>> made = GpuPath::Create(0);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<GpuPath> gpu = std::move(made).value();
  const TensorRef grad = ref(dg, g.size(), DType::kFp32, 0, 0.0f);
  ASSERT_TRUE(gpu->Start({0, 1}, {{grad}, {grad}}, {1, 1}, false, &outbox).ok());
  for (const auto& [unit, tensors] : calls) {
    ASSERT_TRUE(gpu->ObserveForward(unit, tensors.data(), tensors.size(), stream).ok());
  }
  // Freed and reused on the stream right away, as an activation would be.
  ASSERT_EQ(cudaMemsetAsync(da, 0, a.size() * 4, stream), cudaSuccess);
  Report* r = outbox.Acquire();
  r->step = 0;
  ASSERT_TRUE(gpu->Launch(stream, 0, Clock::now(), r).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  Report* got = nullptr;
  for (int i = 0; i < 500 && got == nullptr; ++i) {
    gpu->Drain(false);
    got = outbox.PopReport();
    if (got == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_NE(got, nullptr);
  ForwardAccumulator want;
  want.Resize(2);
  for (const auto& [unit, tensors] : host_calls) {
    UnitStats st;
    ASSERT_TRUE(cpu::ComputeStats(tensors.data(), tensors.size(), &st).ok());
    want.Add(unit, st);
  }
  Report expected;
  want.MoveInto(&expected);
  EXPECT_EQ(got->fwd_units, 2u);
  for (uint32_t u = 0; u < 2; ++u) {
    SCOPED_TRACE(u);
    EXPECT_EQ(got->fwd_sumsq[u], expected.fwd_sumsq[u]);  // bit for bit
    EXPECT_EQ(got->fwd_amax[u], expected.fwd_amax[u]);
    EXPECT_EQ(got->fwd_saturated[u], expected.fwd_saturated[u]);
    EXPECT_EQ(got->fwd_zeros[u], expected.fwd_zeros[u]);
    EXPECT_EQ(got->fwd_numel[u], expected.fwd_numel[u]);
  }
  EXPECT_GT(expected.fwd_saturated[1], 0u);
  EXPECT_EQ(gpu->forward_dropped(), 0u);
  outbox.Release(got, true);
  gpu.reset();
  cudaStreamDestroy(stream);
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dg),
                  static_cast<void*>(dq), static_cast<void*>(dscale)}) {
    cudaFree(p);
  }
}

// Whether this process can own CUPTI now (then the client's profiler must
// measure: backing off is only for CUPTI owned by another tool).
bool CuptiStarts() {
#if GNMR_TEST_HAVE_CUPTI
  StatusOr<CuptiApi> api = LoadCupti();
  if (!api.ok()) return false;
  CuptiProfiler probe(*api);
  const bool ok = probe.Start().ok();
  probe.Stop();
  return ok;
#else
  return false;
#endif
}

TEST(ClientGpuTest, CuptiOverheadMeasuredWhenCuptiStarts) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  const bool cupti = CuptiStarts();
  GnmrdProcess gnmrd;
  ASSERT_TRUE(gnmrd.Start());
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 1 << 22), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0, 1 << 22), cudaSuccess);
  ClientOptions o;
  o.target = gnmrd.target();
  o.job_id = "prof";
  o.profile_gpu_overhead = true;
  auto c = std::move(Client::Create(o)).value();
  ASSERT_TRUE(c->AddUnit("u", {TensorRef{d, 1 << 20, DType::kFp32, 0, 1.0f}}).ok());
  ASSERT_TRUE(c->Start().ok());
  for (int64_t step = 0; step < 12; ++step) {
    ASSERT_EQ(cudaMemset(d, step & 1, 1 << 22), cudaSuccess);  // "training" work
    ASSERT_TRUE(c->Observe(step).ok());
    ASSERT_TRUE(c->Flush(std::chrono::seconds(10)));
  }
  const ClientCounters k = c->Counters();
  if (cupti) {
    ASSERT_EQ(k.overhead_source, OverheadSource::kCupti) << "CUPTI started but nothing measured";
    EXPECT_GT(k.overhead_ratio, 0.0);
    EXPECT_LE(k.overhead_ratio, 1.0);
    EXPECT_GE(k.overhead_step, 1);
  } else {
    EXPECT_EQ(k.overhead_source, OverheadSource::kUnavailable);  // CUPTI owned elsewhere
  }
  c.reset();
  cudaFree(d);
}

// The CUDA backend on a thread without a CUDA context (the client's I/O
// thread): Poll and WaitOldest leave it without one.
TEST(CudaBackendTest, PollLeavesTheIoThreadWithoutContext) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  const cuda::DriverFns& f = cuda::Driver();
  if (f.ctx_get_current == nullptr) GTEST_SKIP() << "no driver entry points";
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 1 << 20), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0, 1 << 20), cudaSuccess);
  auto b = CreateCudaStatsBackend(0);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->SetTable({{TensorRef{d, 1 << 18, DType::kFp32, 0, 1.0f}}}).ok());
  ASSERT_TRUE((*b)->Launch(nullptr, 5).ok());
  std::thread([&] {
    auto bound = [&] {
      CUcontext now = reinterpret_cast<CUcontext>(1);
      EXPECT_EQ(f.ctx_get_current(&now), CUDA_SUCCESS);
      return now;
    };
    ASSERT_EQ(bound(), nullptr);
    (*b)->WaitOldest();
    EXPECT_EQ(bound(), nullptr) << "WaitOldest";
    int64_t step = 0;
    std::vector<UnitStats> stats;
    double seconds = 0.0;
    EXPECT_TRUE((*b)->Poll(&step, &stats, &seconds));
    EXPECT_EQ(bound(), nullptr) << "Poll";
    EXPECT_EQ(step, 5);
    EXPECT_GT(seconds, 0.0);
  }).join();
  b->reset();
  cudaFree(d);
}

// A launch that fails (here: the device too far behind, held by a gate)
// must not shift the timing pairs against the results: every launch that
// is polled afterwards still has its own GPU time.
TEST(CudaBackendTest, FailedLaunchKeepsTimingWithResults) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 2 << 20), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0, 2 << 20), cudaSuccess);
  auto b = CreateCudaStatsBackend(0);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->SetTable({{TensorRef{d, 1 << 18, DType::kFp32, 0, 1.0f}}}).ok());
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  testing::GpuGate gate;
  ASSERT_EQ(gate.Block(s), cudaSuccess);
  int failed = 0;
  for (int64_t i = 0; i <= GpuStats::kStagingSlots; ++i) {
    // New pointers every launch, as FSDP2 does: each needs a staging slot.
    ASSERT_TRUE((*b)->RefreshPointers({d + ((i + 1) % 2) * (1 << 18)}).ok());
    if (!(*b)->Launch(s, i).ok()) ++failed;
  }
  EXPECT_EQ(failed, 1);
  gate.Open();
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  int64_t step = 0;
  std::vector<UnitStats> stats;
  double seconds = -1.0;
  std::vector<int64_t> steps;
  while ((*b)->Poll(&step, &stats, &seconds)) {
    steps.push_back(step);
    EXPECT_GT(seconds, 0.0) << "step " << step << " lost its timing";
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{12, 13, 14, 15}));
  cudaStreamDestroy(s);
  b->reset();
  cudaFree(d);
}

}  // namespace
}  // namespace gnmr
