// CuptiProfiler's ownership rules with injected CUPTI entry points (no GPU
// needed): it backs off when another subscriber owns CUPTI (error 39) or
// CUPTI fails (999, no driver), registering nothing and never calling
// cuptiFinalize; it finalizes only what it owns, once. Plus the real CUPTI
// on this machine: Start either works or backs off, never crashes.
#include "client/src/cupti_profiler.h"

#include <gtest/gtest.h>

#include <string>

namespace gnmr {
namespace {

struct Calls {
  CUptiResult subscribe_result = CUPTI_SUCCESS;
  CUptiResult enable_result = CUPTI_SUCCESS;
  int subscribe = 0, unsubscribe = 0, finalize = 0, register_callbacks = 0, enable = 0,
      disable = 0, flush = 0, push = 0, pop = 0;
};
Calls g;

CuptiApi FakeApi() {
  CuptiApi a;
  a.subscribe = [](CUpti_SubscriberHandle* h, CUpti_CallbackFunc, void*) {
    ++g.subscribe;
    if (g.subscribe_result == CUPTI_SUCCESS) *h = reinterpret_cast<CUpti_SubscriberHandle>(&g);
    return g.subscribe_result;
  };
  a.unsubscribe = [](CUpti_SubscriberHandle) { ++g.unsubscribe; return CUPTI_SUCCESS; };
  a.finalize = [] { ++g.finalize; return CUPTI_SUCCESS; };
  a.register_callbacks = [](CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) {
    ++g.register_callbacks;
    return CUPTI_SUCCESS;
  };
  a.enable = [](CUpti_ActivityKind) { ++g.enable; return g.enable_result; };
  a.disable = [](CUpti_ActivityKind) { ++g.disable; return CUPTI_SUCCESS; };
  a.flush_all = [](uint32_t) { ++g.flush; return CUPTI_SUCCESS; };
  a.push_external = [](CUpti_ExternalCorrelationKind, uint64_t) { ++g.push; return CUPTI_SUCCESS; };
  a.pop_external = [](CUpti_ExternalCorrelationKind, uint64_t*) { ++g.pop; return CUPTI_SUCCESS; };
  return a;
}

class CuptiProfilerTest : public ::testing::Test {
 protected:
  void SetUp() override { g = Calls(); }
};

TEST_F(CuptiProfilerTest, AnotherSubscriberMeansBackOffWithoutFinalize) {
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
  EXPECT_EQ(g.enable, 0);
  EXPECT_EQ(g.push + g.pop + g.flush, 0);
  EXPECT_EQ(g.unsubscribe, 0);
  EXPECT_EQ(g.finalize, 0);
}

TEST_F(CuptiProfilerTest, UnknownErrorBacksOffToo) {
  g.subscribe_result = CUPTI_ERROR_UNKNOWN;  // 999, e.g. no driver
  CuptiProfiler p(FakeApi());
  Status s = p.Start();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("999"), std::string::npos) << s.message();
  p.Stop();
  EXPECT_EQ(g.finalize, 0);
}

TEST_F(CuptiProfilerTest, OwnedCuptiIsFinalizedOnceOnStop) {
  {
    CuptiProfiler p(FakeApi());
    ASSERT_TRUE(p.Start().ok());
    EXPECT_TRUE(p.owns_cupti());
    EXPECT_EQ(g.register_callbacks, 1);
    EXPECT_EQ(g.enable, 2);  // kernels and external correlation
    p.BeginStatsLaunch(7);
    p.EndStatsLaunch();
    EXPECT_EQ(g.push, 1);
    EXPECT_EQ(g.pop, 1);
    std::vector<KernelActivity> k;
    std::vector<StatsCorrelation> c;
    uint64_t dropped = 1;
    p.Collect(&k, &c, &dropped);
    EXPECT_EQ(dropped, 0u);
    p.Stop();
    EXPECT_FALSE(p.owns_cupti());
    p.Stop();  // idempotent; the destructor stops nothing more either
  }
  EXPECT_EQ(g.unsubscribe, 1);
  EXPECT_EQ(g.finalize, 1);
  EXPECT_EQ(g.disable, 2);
}

TEST_F(CuptiProfilerTest, FailedEnableReleasesWhatItOwns) {
  g.enable_result = CUPTI_ERROR_NOT_INITIALIZED;
  CuptiProfiler p(FakeApi());
  EXPECT_EQ(p.Start().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(p.owns_cupti());
  EXPECT_EQ(g.unsubscribe, 1);
  EXPECT_EQ(g.finalize, 1);  // it had subscribed: CUPTI was its own
  p.Stop();
  EXPECT_EQ(g.finalize, 1);
}

TEST(CuptiProfilerRealTest, StartsOrBacksOffCleanly) {
  CuptiProfiler p;
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

}  // namespace
}  // namespace gnmr
