// Attach and the slow rule against daemons that misbehave, over real gRPC
// (FakeSessionServer, fake_session_server.h):
// - a Session stream the daemon never attaches (a relay that dropped the
//   lane) is not "connected": the client gives it up after attach_timeout,
//   says why, counts it and registers again;
// - a daemon that keeps sending what cannot answer a due step (stale and
//   duplicate decisions, repeated GenerationStarts) costs one
//   decision_wait, not one per step; waiting resumes with the decisions.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gnmr/client.h"
#include "tests/client/fake_session_server.h"
#include "tests/client/one_unit_client.h"
#include "tests/testing/eventually.h"

namespace gnmr {
namespace {

using Clock = std::chrono::steady_clock;
using testing::Eventually;
using testing::FakeSessionServer;

class ClientAttachTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/tmp/gnmr_attach_test_" + std::to_string(getpid()) + ".sock";
    ::unlink(path_.c_str());
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    ::unlink(path_.c_str());
  }

  void StartServer(bool silent) {
    server_ = std::make_unique<FakeSessionServer>(silent);
    ASSERT_TRUE(server_->Start(path_));
  }

  void StartClient(ClientOptions o) {
    o.target = "unix:" + path_;
    o.job_id = "job";
    client_ = testing::StartOneUnitClient(std::move(o), &grad_);
    ASSERT_NE(client_, nullptr);
  }

  std::string path_;
  std::vector<float> grad_ = std::vector<float>(1000, 0.25f);
  std::unique_ptr<FakeSessionServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientAttachTest, AStreamTheDaemonNeverAttachesIsNotConnectedAndIsRetried) {
  StartServer(/*silent=*/true);
  ClientOptions o;
  o.decision_wait = std::chrono::milliseconds(1000);
  o.attach_timeout = std::chrono::milliseconds(300);
  o.backoff_initial = std::chrono::milliseconds(10);
  o.backoff_max = std::chrono::milliseconds(50);
  StartClient(o);
  ASSERT_TRUE(Eventually([&] { return server_->hellos() >= 1; }));
  // The hello is written and unanswered: never "connected".
  int connected_samples = 0;
  int samples = 0;
  const Clock::time_point t0 = Clock::now();
  while (Clock::now() - t0 < std::chrono::milliseconds(1500)) {
    connected_samples += client_->Counters().connected ? 1 : 0;
    ++samples;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::printf("connected in %d of %d samples; %llu Register calls, %llu hellos in 1.5 s\n",
              connected_samples, samples, static_cast<unsigned long long>(server_->registers()),
              static_cast<unsigned long long>(server_->hellos()));
  EXPECT_EQ(connected_samples, 0);
  EXPECT_GE(server_->registers(), 3u) << "the client did not register again";
  bool named = false;
  for (const Problem& p : client_->TakeProblems()) {
    std::printf("problem %s x%llu: %s\n", ProblemKindName(p.kind),
                static_cast<unsigned long long>(p.count), p.message.c_str());
    named |= p.message.find("did not attach this stream within") != std::string::npos;
  }
  EXPECT_TRUE(named);
  EXPECT_FALSE(client_->WaitConnected(std::chrono::milliseconds(0)).ok());
  // Training never waits longer than one attach attempt for a daemon that
  // does not attach it (decision_wait is 1 s here).
  const Clock::time_point t1 = Clock::now();
  for (int64_t step = 0; step < 20; ++step) {
    ASSERT_TRUE(client_->Observe(step).ok());
    EXPECT_FALSE(client_->PlanFor(step).has_decision);
  }
  const double waited = std::chrono::duration<double>(Clock::now() - t1).count();
  std::printf("20 steps took %.3f s\n", waited);
  EXPECT_LT(waited, 1.0);
  ClientCounters k = client_->Counters();
  std::printf("attach_failures %llu, connect_failures %llu, registrations %llu\n",
              static_cast<unsigned long long>(k.attach_failures),
              static_cast<unsigned long long>(k.connect_failures),
              static_cast<unsigned long long>(k.registrations));
  EXPECT_GE(k.attach_failures, 2u);
  EXPECT_GE(k.connect_failures, k.attach_failures);
  EXPECT_EQ(k.registrations, 0u);  // none attached
  EXPECT_FALSE(k.connected);

  // The daemon attaches the next stream: the client recovers by itself.
  server_->SetSilent(false);
  ASSERT_TRUE(Eventually([&] { return client_->Counters().connected; }));
  EXPECT_TRUE(client_->WaitConnected(std::chrono::milliseconds(0)).ok());
  k = client_->Counters();
  EXPECT_TRUE(k.connected);
  EXPECT_EQ(k.registrations, 1u);
  const uint64_t failures = k.attach_failures;
  for (int64_t step = 20; step < 30; ++step) {
    ASSERT_TRUE(client_->Observe(step).ok());
    const Plan p = client_->PlanFor(step);
    if (step > 20) {
      EXPECT_TRUE(p.has_decision) << "step " << step;  // lag 1
    }
    ASSERT_TRUE(client_->Ack(p).ok());
  }
  EXPECT_EQ(client_->Counters().attach_failures, failures);
  // Steps 0..19 had no decision, but the rank was not attached then: that
  // is said by not_attached, not by no_decisions.
  for (const Problem& p : client_->TakeProblems()) {
    EXPECT_NE(p.kind, ProblemKind::kNoDecisions) << p.message;
  }
}

TEST_F(ClientAttachTest, ADaemonSendingOnlyWhatCannotAnswerCostsOneDecisionWait) {
  StartServer(/*silent=*/false);
  constexpr int64_t kJunkFrom = 5;
  constexpr int64_t kJunkUntil = 35;
  constexpr int64_t kSteps = 45;
  server_->SetJunkWindow(kJunkFrom, kJunkUntil);
  ClientOptions o;
  o.decision_wait = std::chrono::milliseconds(200);
  StartClient(o);
  ASSERT_TRUE(client_->WaitConnected(std::chrono::seconds(5)).ok());
  int long_waits = 0;  // plans that waited out most of decision_wait
  double junk_wait = 0.0;
  std::vector<bool> has(kSteps);
  uint64_t run_at_junk_end = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    if (step == kJunkUntil) server_->SetAnswerDelay(std::chrono::milliseconds(30));
    ASSERT_TRUE(client_->Observe(step).ok());
    const Clock::time_point t = Clock::now();
    const Plan p = client_->PlanFor(step);
    const double s = std::chrono::duration<double>(Clock::now() - t).count();
    ASSERT_TRUE(client_->Ack(p).ok());
    has[step] = p.has_decision;
    if (step == kJunkUntil - 1) run_at_junk_end = client_->Counters().steps_without_decision;
    if (step >= kJunkFrom && step < kJunkUntil) {
      junk_wait += s;
      long_waits += s >= 0.15 ? 1 : 0;
    }
    // The rest of a training step; the junk keeps coming meanwhile.
    if (step >= kJunkFrom && step < kJunkUntil) {
      std::this_thread::sleep_for(3 * FakeSessionServer::kJunkPeriod);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::printf("junk window of %lld steps: %d waits of ~decision_wait, %.3f s waited in all\n",
              static_cast<long long>(kJunkUntil - kJunkFrom), long_waits, junk_wait);
  EXPECT_EQ(long_waits, 1);
  EXPECT_LT(junk_wait, 0.6);
  // The decisions came back, each 30 ms after its report while a step takes
  // 10 ms: a plan has its decision only if the rank waits for it again,
  // which it does once the first of them has arrived.
  for (int64_t step = kJunkUntil + 5; step < kSteps; ++step) {
    EXPECT_TRUE(has[step]) << "step " << step;
  }
  for (int64_t step = 1; step <= kJunkFrom; ++step) EXPECT_TRUE(has[step]) << "step " << step;
  const ClientCounters k = client_->Counters();
  EXPECT_TRUE(k.connected);
  EXPECT_GT(k.decisions_stale, 0u);
  // No decision from step 6 (due: the decision observing 5) to the end of
  // the window: 29 steps in a row, said once while connected.
  EXPECT_EQ(run_at_junk_end, static_cast<uint64_t>(kJunkUntil - kJunkFrom - 1));
  EXPECT_EQ(k.steps_without_decision, 0u);  // the last plan had its decision
  int no_decisions = 0;
  for (const Problem& p : client_->TakeProblems()) {
    std::printf("problem %s x%llu: %s\n", ProblemKindName(p.kind),
                static_cast<unsigned long long>(p.count), p.message.c_str());
    if (p.kind != ProblemKind::kNoDecisions) continue;
    no_decisions += static_cast<int>(p.count);
    EXPECT_NE(p.message.find("no decision for 20 steps in a row"), std::string::npos);
  }
  EXPECT_EQ(no_decisions, 1);
}

}  // namespace
}  // namespace gnmr
