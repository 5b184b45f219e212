// Fail-open: with no daemon at the target the training thread never waits,
// plans are empty and the client counts what it should. Also the API's
// argument checks.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "gnmr/client.h"
#include "tests/testing/eventually.h"

namespace gnmr {
namespace {

using Clock = std::chrono::steady_clock;

ClientOptions NoDaemon() {
  ClientOptions o;
  o.target = "unix:/tmp/gnmr_no_daemon_" + std::to_string(getpid()) + ".sock";
  o.job_id = "failopen";
  o.decision_wait = std::chrono::milliseconds(500);  // must not be used
  o.max_queued_reports = 4;
  return o;
}

TEST(ClientFailOpen, NeverWaitsAndReturnsEmptyPlans) {
  std::vector<float> grad(10000, 0.5f);
  auto c = Client::Create(NoDaemon());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Client& client = **c;
  TensorRef t;
  t.data = grad.data();
  t.numel = grad.size();
  ASSERT_TRUE(client.AddUnit("layers.0.mlp.fc1", {t}).ok());
  ASSERT_TRUE(client.Start().ok());
  const Clock::time_point t0 = Clock::now();
  for (int64_t step = 0; step < 50; ++step) {
    ASSERT_TRUE(client.Observe(step).ok());
    Plan p = client.PlanFor(step);
    EXPECT_FALSE(p.has_decision);
    EXPECT_TRUE(p.entries.empty());
    EXPECT_FALSE(p.global_skip);
    EXPECT_FALSE(p.skip_step);
    // Step 0 precedes any decision (lag 1); later ones were due.
    if (step > 0) {
      EXPECT_EQ(p.miss_reason, MissReason::kDisconnected) << step;
    }
    EXPECT_TRUE(client.Ack(p).ok());
  }
  // 50 steps with decision_wait 500 ms: any wait would show. (The missing
  // socket fails the first connection attempt at once.)
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(400));
  const ClientCounters k = client.Counters();
  EXPECT_FALSE(k.connected);
  EXPECT_EQ(k.reports_enqueued, 50u);
  EXPECT_EQ(k.reports_sent, 0u);
  EXPECT_EQ(k.reports_dropped, 46u);   // queue of 4, drop-oldest
  EXPECT_EQ(k.missed_decisions, 49u);  // every due decision, counted
  EXPECT_EQ(k.decisions_received, 0u);
  EXPECT_GT(k.stats_seconds, 0.0);
  EXPECT_FALSE(client.Flush(std::chrono::milliseconds(50)));
}

TEST(ClientFailOpen, CountsFailedAttemptsAndStopsPromptly) {
  ClientOptions o = NoDaemon();
  o.backoff_initial = std::chrono::milliseconds(10);
  o.backoff_max = std::chrono::milliseconds(20);
  auto c = Client::Create(o);
  ASSERT_TRUE(c.ok());
  float x = 1.0f;
  TensorRef t;
  t.data = &x;
  t.numel = 1;
  ASSERT_TRUE((*c)->AddUnit("u", {t}).ok());
  ASSERT_TRUE((*c)->Start().ok());
  // Register waits for the channel up to 1 s per attempt.
  gnmr::testing::Eventually([&] { return (*c)->Counters().connect_failures != 0; });
  const ClientCounters k = (*c)->Counters();
  EXPECT_GE(k.connect_failures, 1u);
  EXPECT_NE(k.last_error, "");
  const Clock::time_point t0 = Clock::now();
  (*c)->Stop();  // cancels the Register in flight
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(500));
  EXPECT_TRUE((*c)->Observe(1).ok());  // still fail-open after Stop
  EXPECT_FALSE((*c)->PlanFor(1).has_decision);
}

TEST(ClientApi, ChecksOptions) {
  ClientOptions o = NoDaemon();
  o.target = "";
  EXPECT_EQ(Client::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = NoDaemon();
  o.job_id = "bad job";
  EXPECT_EQ(Client::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = NoDaemon();
  o.rank = 2;
  o.world_size = 2;
  EXPECT_EQ(Client::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = NoDaemon();
  o.max_queued_reports = 0;
  EXPECT_EQ(Client::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = NoDaemon();
  o.config = ControllerConfig();
  o.config->max_o = -1;
  EXPECT_EQ(Client::Create(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(ClientApi, ChecksUnitsTensorsAndSteps) {
  auto c = Client::Create(NoDaemon());
  ASSERT_TRUE(c.ok());
  Client& client = **c;
  std::vector<float> a(100), b(100);
  TensorRef t;
  t.data = a.data();
  t.numel = a.size();
  EXPECT_EQ(client.Observe(0).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(client.Start().code(), StatusCode::kFailedPrecondition);  // no units
  EXPECT_EQ(client.AddUnit("", {t}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client.AddUnit("u", {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client.AddUnit("u", {t}, 2, 2).status().code(), StatusCode::kInvalidArgument);
  TensorRef fp8 = t;
  fp8.dtype = DType::kFp8E4M3;
  fp8.scale_inv = std::numeric_limits<float>::quiet_NaN();  // fp8 needs a finite scale
  EXPECT_EQ(client.AddUnit("u", {fp8}).status().code(), StatusCode::kInvalidArgument);
  alignas(8) unsigned char scale_bytes[8] = {};
  fp8.scale_inv_ptr = reinterpret_cast<const float*>(scale_bytes + 2);  // read per step: aligned
  EXPECT_EQ(client.AddUnit("u", {fp8}).status().code(), StatusCode::kInvalidArgument);
  auto u = client.AddUnit("u", {t}, 1, 2);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(*u, 0u);
  EXPECT_EQ(client.AddUnit("u", {t}).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(client.unit_name(0), "u");

  TensorRef moved = t;
  moved.data = b.data();
  EXPECT_TRUE(client.SetTensors(0, {moved}).ok());
  TensorRef shorter = moved;
  shorter.numel = 99;
  EXPECT_EQ(client.SetTensors(0, {shorter}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client.SetTensors(5, {moved}).code(), StatusCode::kInvalidArgument);
  float live_scale = 0.5f;
  fp8.scale_inv_ptr = &live_scale;  // a live scale replaces the (NaN) static one
  EXPECT_TRUE(client.AddUnit("fp8", {fp8}).ok());

  ASSERT_TRUE(client.Start().ok());
  EXPECT_EQ(client.Start().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(client.AddUnit("v", {t}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(client.Observe(3).ok());
  EXPECT_EQ(client.Observe(3).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client.Observe(2).code(), StatusCode::kInvalidArgument);
  live_scale = std::numeric_limits<float>::infinity();  // data now, not a caller error
  EXPECT_TRUE(client.Observe(4).ok());
}

}  // namespace
}  // namespace gnmr

namespace gnmr {
namespace {

// The same-step guard works without any daemon: a NaN at step t makes the
// plan of t skip the optimizer step on this rank, at once (docs/safety.md).
TEST(ClientFailOpen, SameStepGuardSkipsANonFiniteStepWithoutADaemon) {
  std::vector<float> a(1000, 0.5f), b(1000, 0.25f);
  auto c = Client::Create(NoDaemon());
  ASSERT_TRUE(c.ok());
  Client& client = **c;
  TensorRef ta, tb;
  ta.data = a.data();
  ta.numel = a.size();
  tb.data = b.data();
  tb.numel = b.size();
  ASSERT_TRUE(client.AddUnit("a", {ta}).ok());
  ASSERT_TRUE(client.AddUnit("b", {tb}).ok());
  ASSERT_TRUE(client.Start().ok());
  for (int64_t step = 0; step < 6; ++step) {
    b[17] = step == 3 ? std::numeric_limits<float>::quiet_NaN()
                      : (step == 4 ? std::numeric_limits<float>::infinity() : 0.25f);
    ASSERT_TRUE(client.Observe(step).ok());
    const Plan p = client.PlanFor(step);
    const bool bad = step == 3 || step == 4;
    EXPECT_EQ(p.nonfinite_observed, bad) << step;
    EXPECT_EQ(p.skip_step, bad) << step;
    EXPECT_FALSE(p.global_skip) << step;  // no decision: the guard alone
  }
  EXPECT_EQ(client.Counters().skipped_steps, 2u);
  // A step that was not observed has no statistics to guard with.
  EXPECT_FALSE(client.PlanFor(7).skip_step);
}

// UnitNorms: the newest observed step's norms as Observe measured them,
// unit order (sqrt(sumsq * shard_count)); NaN for any other step.
TEST(ClientFailOpen, UnitNormsAreTheNewestObservedStepsOnly) {
  std::vector<float> a(100, 3.0f), b(16, -0.5f);
  auto c = Client::Create(NoDaemon());
  ASSERT_TRUE(c.ok());
  Client& client = **c;
  TensorRef ta{a.data(), a.size()}, tb{b.data(), b.size()};
  ASSERT_TRUE(client.AddUnit("a", {ta}).ok());
  ASSERT_TRUE(client.AddUnit("b", {tb}, 1, 4).ok());   // a quarter: scaled by 4
  EXPECT_TRUE(std::isnan(client.UnitNorms(0).at(0)));  // before Start
  ASSERT_TRUE(client.Start().ok());
  ASSERT_TRUE(client.Observe(3).ok());
  std::vector<double> n = client.UnitNorms(3);
  ASSERT_EQ(n.size(), 2u);
  EXPECT_DOUBLE_EQ(n[0], 30.0);  // sqrt(100 * 9)
  EXPECT_DOUBLE_EQ(n[1], std::sqrt(16 * 0.25 * 4));
  a.assign(a.size(), 1.0f);
  ASSERT_TRUE(client.Observe(4).ok());
  EXPECT_DOUBLE_EQ(client.UnitNorms(4)[0], 10.0);
  for (int64_t other : {int64_t{3}, int64_t{5}, int64_t{-1}}) {
    for (double v : client.UnitNorms(other)) EXPECT_TRUE(std::isnan(v)) << other;
  }
}

TEST(ClientFailOpen, WaitConnectedAndProblemsNameAMissingSocket) {
  ClientOptions o = NoDaemon();
  auto c = Client::Create(o);
  ASSERT_TRUE(c.ok());
  float x = 1.0f;
  TensorRef t;
  t.data = &x;
  t.numel = 1;
  ASSERT_TRUE((*c)->AddUnit("u", {t}).ok());
  EXPECT_EQ((*c)->WaitConnected(std::chrono::milliseconds(10)).code(),
            StatusCode::kFailedPrecondition);  // before Start
  ASSERT_TRUE((*c)->Start().ok());
  const Status s = (*c)->WaitConnected(std::chrono::seconds(5));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("ENOENT"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(o.target), std::string::npos) << s.message();
  const std::vector<Problem> problems = (*c)->TakeProblems();
  ASSERT_FALSE(problems.empty());
  EXPECT_EQ(problems[0].kind, ProblemKind::kUnreachable);
  EXPECT_GE(problems[0].count, 1u);
  EXPECT_NE(problems[0].message.find("ENOENT"), std::string::npos);
  EXPECT_STREQ(ProblemKindName(problems[0].kind), "unreachable");
}

}  // namespace
}  // namespace gnmr
