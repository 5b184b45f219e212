// CuptiProfiler against a simulated CUPTI (injected entry points, no GPU):
// it backs off when another subscriber owns CUPTI (error 39) or CUPTI fails
// (999, no driver), registering nothing; it never finalizes; the launch
// callback tags exactly the statistics launches with their step; and Stop
// switches kernel records off only while its buffer callbacks are still the
// registered ones (a tool that registered its own later keeps its records).
// Plus the real CUPTI: Start either works or backs off, never crashes; and
// on a GPU, the statistics kernels of real launches are found and give an
// overhead ratio whenever Start succeeded.
#include "client/src/cupti_profiler.h"

#include <cstdlib>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "client/src/overhead_accountant.h"
#include "kernels/gpu_stats.h"

namespace gnmr {
namespace {

// A CUPTI in miniature: one subscriber, registered buffer callbacks that
// a later tool may replace, kernel records written into a requested buffer
// and handed to whichever completion callback is registered at flush time.
struct FakeCupti {
  CUptiResult subscribe_result = CUPTI_SUCCESS;
  CUptiResult enable_result = CUPTI_SUCCESS;
  int subscribe = 0, unsubscribe = 0, register_callbacks = 0, enable = 0, disable = 0, flush = 0;
  CUpti_CallbackFunc callback = nullptr;
  void* userdata = nullptr;
  std::set<std::pair<int, int>> launch_callbacks;  // (domain, cbid) enabled
  std::set<CUpti_ActivityKind> kinds;
  CUpti_BuffersCallbackRequestFunc request = nullptr;
  CUpti_BuffersCallbackCompleteFunc complete = nullptr;
  std::vector<uint8_t*> held;  // buffers CUPTI writes into
  int other_tool_buffers_completed = 0;

  // A kernel runs: its record needs a buffer from the registered callback.
  void Kernel() {
    if (kinds.count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == 0 || request == nullptr) return;
    if (held.empty()) {
      uint8_t* b = nullptr;
      size_t size = 0, max = 0;
      request(&b, &size, &max);
      if (b != nullptr) held.push_back(b);
    }
  }
  // An API call of the launching thread.
  void Api(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, uint32_t correlation) {
    if (launch_callbacks.count({domain, cbid}) == 0) return;
    CUpti_CallbackData d{};
    d.correlationId = correlation;
    d.callbackSite = CUPTI_API_ENTER;
    callback(userdata, domain, cbid, &d);
    d.callbackSite = CUPTI_API_EXIT;
    callback(userdata, domain, cbid, &d);
  }
  void Flush() {
    if (complete == nullptr) return;
    for (uint8_t* b : held) complete(nullptr, 0, b, 0, 0);
    held.clear();
  }
  // torch.profiler / Kineto starting later: its own buffer callbacks.
  static void CUPTIAPI OtherRequest(uint8_t** b, size_t* size, size_t* max) {
    *b = static_cast<uint8_t*>(std::malloc(64));
    *size = 64;
    *max = 0;
  }
  static void CUPTIAPI OtherComplete(CUcontext, uint32_t, uint8_t* b, size_t, size_t);
  void OtherToolRegisters() {
    request = OtherRequest;
    complete = OtherComplete;
    kinds.insert(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  }
};
FakeCupti g;

void CUPTIAPI FakeCupti::OtherComplete(CUcontext, uint32_t, uint8_t* b, size_t, size_t) {
  ++g.other_tool_buffers_completed;
  std::free(b);
}

CuptiApi FakeApi() {
  CuptiApi a;
  a.subscribe = [](CUpti_SubscriberHandle* h, CUpti_CallbackFunc cb, void* user) {
    ++g.subscribe;
    if (g.subscribe_result != CUPTI_SUCCESS) return g.subscribe_result;
    *h = reinterpret_cast<CUpti_SubscriberHandle>(&g);
    g.callback = cb;
    g.userdata = user;
    return CUPTI_SUCCESS;
  };
  a.unsubscribe = [](CUpti_SubscriberHandle) {
    ++g.unsubscribe;
    g.launch_callbacks.clear();
    g.callback = nullptr;
    return CUPTI_SUCCESS;
  };
  a.enable_callback = [](uint32_t on, CUpti_SubscriberHandle, CUpti_CallbackDomain d,
                         CUpti_CallbackId id) {
    if (on) g.launch_callbacks.insert({d, static_cast<int>(id)});
    return CUPTI_SUCCESS;
  };
  a.register_callbacks = [](CUpti_BuffersCallbackRequestFunc r,
                            CUpti_BuffersCallbackCompleteFunc c) {
    ++g.register_callbacks;
    g.request = r;
    g.complete = c;
    return CUPTI_SUCCESS;
  };
  a.enable = [](CUpti_ActivityKind k) {
    ++g.enable;
    if (g.enable_result == CUPTI_SUCCESS) g.kinds.insert(k);
    return g.enable_result;
  };
  a.disable = [](CUpti_ActivityKind k) {
    ++g.disable;
    g.kinds.erase(k);
    return CUPTI_SUCCESS;
  };
  a.flush_all = [](uint32_t) {
    ++g.flush;
    g.Flush();
    return CUPTI_SUCCESS;
  };
  a.get_num_dropped_records = [](CUcontext, uint32_t, size_t* lost) {
    *lost = 0;
    return CUPTI_SUCCESS;
  };
  return a;
}

class CuptiProfilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g.Flush();
    g = FakeCupti();
    CuptiProfiler::ForgetHeldBuffersForTesting();
  }
  void TearDown() override {
    if (g.complete != nullptr) g.Flush();
    CuptiProfiler::ForgetHeldBuffersForTesting();
  }
};

TEST_F(CuptiProfilerTest, AnotherSubscriberMeansBackOff) {
  g.subscribe_result = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  {
    CuptiProfiler p(FakeApi());
    Status s = p.Start();
    EXPECT_EQ(s.code(), StatusCode::kUnavailable);
    EXPECT_NE(s.message().find("another tool"), std::string::npos) << s.message();
    EXPECT_FALSE(p.owns_cupti());
    p.BeginStatsLaunch(3);
    p.EndStatsLaunch();
    std::vector<KernelActivity> k;
    std::vector<StatsCorrelation> c;
    p.Collect(&k, &c, nullptr);
    p.Stop();
  }
  EXPECT_EQ(g.subscribe, 1);
  EXPECT_EQ(g.register_callbacks, 0);  // another tool's buffers stay its own
  EXPECT_EQ(g.enable + g.disable + g.flush, 0);
  EXPECT_TRUE(g.launch_callbacks.empty());
  EXPECT_EQ(g.unsubscribe, 0);
}

TEST_F(CuptiProfilerTest, UnknownErrorBacksOffToo) {
  g.subscribe_result = CUPTI_ERROR_UNKNOWN;  // 999, e.g. no driver
  CuptiProfiler p(FakeApi());
  Status s = p.Start();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("999"), std::string::npos) << s.message();
  p.Stop();
  EXPECT_EQ(g.register_callbacks, 0);
}

// The statistics kernels are found through the launch callback: exactly
// the launches made between BeginStatsLaunch and EndStatsLaunch on this
// thread, runtime or driver, carry the step.
TEST_F(CuptiProfilerTest, LaunchCallbackTagsTheStatisticsLaunches) {
  CuptiProfiler p(FakeApi());
  ASSERT_TRUE(p.Start().ok());
  EXPECT_EQ(g.kinds, (std::set<CUpti_ActivityKind>{CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL}));
  EXPECT_EQ(g.launch_callbacks.count(
                {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000}),
            1u);
  g.Api(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 40);
  p.BeginStatsLaunch(7);
  g.Api(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 41);
  g.Api(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 42);
  g.Api(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, 43);
  p.EndStatsLaunch();
  g.Api(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 44);
  std::vector<KernelActivity> k;
  std::vector<StatsCorrelation> c;
  uint64_t dropped = 1;
  p.Collect(&k, &c, &dropped);
  EXPECT_EQ(dropped, 0u);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].correlation_id, 41u);
  EXPECT_EQ(c[1].correlation_id, 42u);
  EXPECT_EQ(c[0].step, 7);
  EXPECT_EQ(c[1].step, 7);
  p.Stop();
}

TEST_F(CuptiProfilerTest, StopsItsOwnRecordsAndNeverFinalizes) {
  {
    CuptiProfiler p(FakeApi());
    ASSERT_TRUE(p.Start().ok());
    EXPECT_TRUE(p.owns_cupti());
    g.Kernel();  // a buffer of ours is out
    p.Stop();
    EXPECT_FALSE(p.owns_cupti());
    EXPECT_FALSE(p.displaced());
    p.Stop();  // idempotent; the destructor stops nothing more either
  }
  EXPECT_EQ(g.unsubscribe, 1);
  EXPECT_EQ(g.disable, 1);
  EXPECT_TRUE(g.kinds.empty());
  EXPECT_TRUE(g.launch_callbacks.empty());
  // (CuptiApi has no finalize entry: the profiler cannot call it.)
}

TEST_F(CuptiProfilerTest, QuietSinceItsLastBufferStillOurs) {
  CuptiProfiler p(FakeApi());
  ASSERT_TRUE(p.Start().ok());
  p.BeginStatsLaunch(1);
  g.Kernel();
  p.EndStatsLaunch();
  std::vector<KernelActivity> k;
  std::vector<StatsCorrelation> c;
  p.Collect(&k, &c, nullptr);  // our buffer came back
  p.Stop();
  EXPECT_FALSE(p.displaced());
  EXPECT_EQ(g.disable, 1);
}

// torch.profiler started after us registered its own buffer callbacks
// while a buffer of ours was out: that buffer goes to its callback, so ours
// are not registered any more and the records it enabled must stay on.
TEST_F(CuptiProfilerTest, ToolRegisteredLaterKeepsItsRecords) {
  CuptiProfiler p(FakeApi());
  ASSERT_TRUE(p.Start().ok());
  g.Kernel();
  g.OtherToolRegisters();
  p.Stop();
  EXPECT_TRUE(p.displaced());
  EXPECT_EQ(g.disable, 0);
  EXPECT_EQ(g.kinds.count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), 1u);
  EXPECT_EQ(g.unsubscribe, 1);
  EXPECT_EQ(g.other_tool_buffers_completed, 1);
}

// The same with none of our buffers out at that moment: a statistics
// launch after our last buffer came back put its record in the other
// tool's buffer, which the forced flush shows.
TEST_F(CuptiProfilerTest, ToolRegisteredLaterWhileNoBufferWasOut) {
  CuptiProfiler p(FakeApi());
  ASSERT_TRUE(p.Start().ok());
  g.Kernel();
  std::vector<KernelActivity> k;
  std::vector<StatsCorrelation> c;
  p.Collect(&k, &c, nullptr);
  g.OtherToolRegisters();
  p.BeginStatsLaunch(2);
  g.Kernel();
  p.EndStatsLaunch();
  p.Stop();
  EXPECT_TRUE(p.displaced());
  EXPECT_EQ(g.disable, 0);
  EXPECT_EQ(g.kinds.count(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), 1u);
}

TEST_F(CuptiProfilerTest, FailedEnableReleasesWhatItOwns) {
  g.enable_result = CUPTI_ERROR_NOT_INITIALIZED;
  CuptiProfiler p(FakeApi());
  EXPECT_EQ(p.Start().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(p.owns_cupti());
  EXPECT_EQ(g.unsubscribe, 1);
  p.Stop();
  EXPECT_EQ(g.unsubscribe, 1);
}

// CUPTI is found at run time (nothing links it): this build's toolkit has
// one, so the loader must find it, with every entry point.
TEST(CuptiLibraryTest, FindsTheToolkitsCupti) {
  StatusOr<CuptiApi> api = LoadCupti();
  ASSERT_TRUE(api.ok()) << api.status().message();
  EXPECT_NE(api->subscribe, nullptr);
  EXPECT_NE(api->get_next_record, nullptr);
  EXPECT_NE(api->get_result_string, nullptr);
  const char* name = nullptr;
  ASSERT_EQ(api->get_result_string(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, &name),
            CUPTI_SUCCESS);
  EXPECT_NE(std::string(name).find("SUBSCRIBERS"), std::string::npos) << name;
}

TEST(CuptiLibraryTest, RefusesWhatIsNotCupti) {
  StatusOr<CuptiApi> missing = LoadCuptiFrom("/nonexistent/libcupti.so.13");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(missing.status().message().find("/nonexistent/libcupti.so.13"), std::string::npos)
      << missing.status().message();
  StatusOr<CuptiApi> other = LoadCuptiFrom("libm.so.6");  // loads, but is no CUPTI
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("lacks cuptiSubscribe"), std::string::npos)
      << other.status().message();
}

CuptiApi RealApi() {
  StatusOr<CuptiApi> api = LoadCupti();
  return api.ok() ? *api : CuptiApi();
}

TEST(CuptiProfilerRealTest, StartsOrBacksOffCleanly) {
  CuptiProfiler p(RealApi());
  Status s = p.Start();
  if (!s.ok()) {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable);
    EXPECT_FALSE(p.owns_cupti());
    GTEST_SKIP() << "CUPTI not usable here (expected without a GPU): " << s.message();
  }
  std::vector<KernelActivity> k;
  std::vector<StatsCorrelation> c;
  p.Collect(&k, &c, nullptr);
  p.Stop();
}

// On a GPU: whenever Start succeeds, real statistics launches are found
// among the kernel records and every settled step gets a ratio strictly
// between 0 and 1 (other kernels run too). Required, not optional: the
// only excuse is CUPTI owned by another tool, which Start reports.
TEST(CuptiProfilerRealTest, MeasuresTheStatisticsKernelsOnAGpu) {
  auto stats = GpuStats::Create(0);
  if (!stats.ok()) GTEST_SKIP() << "no CUDA device";
  auto work = GpuStats::Create(0);  // stands for the trainer's kernels (untagged)
  ASSERT_TRUE(work.ok());
  CuptiProfiler p(RealApi());
  const Status s = p.Start();
  if (!s.ok()) GTEST_SKIP() << "CUPTI owned by another tool: " << s.message();
  constexpr uint64_t kElems = uint64_t{32} << 20;
  void* grads = nullptr;
  ASSERT_EQ(cudaMalloc(&grads, kElems * 2), cudaSuccess);
  ASSERT_EQ(cudaMemset(grads, 0x3c, kElems * 2), cudaSuccess);
  TensorRef t;
  t.data = grads;
  t.numel = kElems;
  t.dtype = DType::kBf16;
  t.device = 0;
  ASSERT_TRUE((*stats)->SetTable({{t}}).ok());
  ASSERT_TRUE((*work)->SetTable({{t}}).ok());
  cudaStream_t st;
  ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  OverheadAccountant accountant;
  size_t correlations = 0;
  int measured = 0;
  for (int64_t step = 0; step < 10; ++step) {
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*work)->Launch(st).ok());
    p.BeginStatsLaunch(step);
    ASSERT_TRUE((*stats)->Launch(st, step).ok());
    p.EndStatsLaunch();
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    std::vector<KernelActivity> k;
    std::vector<StatsCorrelation> c;
    uint64_t dropped = 0;
    p.Collect(&k, &c, &dropped);
    correlations += c.size();
    accountant.Add(k, c);
    accountant.AddDropped(dropped);
    StepOverhead o;
    while (accountant.Next(&o)) {
      if (!o.valid) continue;
      ++measured;
      EXPECT_GT(o.ratio, 0.0) << "step " << o.step;
      EXPECT_LT(o.ratio, 1.0) << "step " << o.step;
    }
    int64_t polled = 0;
    std::vector<UnitStats> out;
    while ((*stats)->Poll(&polled, &out)) {
    }
    while ((*work)->Poll(&polled, &out)) {
    }
  }
  EXPECT_GE(correlations, 10u) << "no statistics launch was correlated";
  EXPECT_GE(measured, 4) << "overhead_ratio was never measured";
  p.Stop();
  EXPECT_FALSE(p.displaced());
  cudaStreamDestroy(st);
  stats->reset();
  work->reset();
  cudaFree(grads);
}

}  // namespace
}  // namespace gnmr
