// Reporter election with the real client library (docs/scale.md, "Reporter
// election"): two data-parallel replicas against an in-process gnmrd core
// over a Unix socket, `report: one_per_shard`. The standby holds its
// reports back and still gets every decision; when the reporter goes away,
// the standby sends the step the job was waiting for from what it held.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "controller/types/config_codec.h"
#include "gnmr/client.h"
#include "tests/daemon/test_daemon.h"
#include "tests/testing/eventually.h"

namespace gnmr {
namespace {

TensorRef Ref(std::vector<float>& v) {
  TensorRef t;
  t.data = v.data();
  t.numel = v.size();
  return t;
}

struct Replica {
  std::unique_ptr<Client> client;
  std::vector<float> a = std::vector<float>(128), b = std::vector<float>(64);
  void Fill(int64_t step) {  // the same on both replicas, as after all-reduce
    for (size_t i = 0; i < a.size(); ++i) a[i] = 0.01f * static_cast<float>((i + step) % 7 + 1);
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.02f * static_cast<float>((i * 3 + step) % 5 + 1);
  }
};

class ClientStandbyTest : public testing::DaemonTest {
 protected:
  void Make(Replica* r, uint32_t rank) {
    ClientOptions o;
    o.target = "unix:" + socket_path_;
    o.job_id = "dp";
    o.rank = rank;
    o.world_size = 2;
    o.decision_wait = std::chrono::seconds(5);
    ControllerConfig config = ConfigFromProto(testing::FastConfig()).value();
    config.report = ReportMode::kOnePerShard;
    o.config = config;
    auto made = Client::Create(o);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    r->client = std::move(made).value();
    ASSERT_TRUE(r->client->AddUnit("a", {Ref(r->a)}).ok());
    ASSERT_TRUE(r->client->AddUnit("b", {Ref(r->b)}).ok());
    ASSERT_TRUE(r->client->Start().ok());
    ASSERT_EQ(r->client->WaitConnected(std::chrono::seconds(5)).code(), StatusCode::kOk);
  }
  // Observe, plan and ack one step; the plan must carry a decision after
  // the first step (lag 1).
  void Step(Replica* r, int64_t step) {
    r->Fill(step);
    ASSERT_TRUE(r->client->Observe(step).ok());
    const Plan p = r->client->PlanFor(step);
    EXPECT_EQ(p.has_decision, step > 0) << "step " << step;
    ASSERT_TRUE(r->client->Ack(p).ok());
  }
  // A daemon whose steps never close by their deadline (every step must be
  // complete), and two replicas, r1 standing by.
  void StartWithReplicas(Replica* r0, Replica* r1) {
    DaemonOptions opts;
    opts.registry.job.aggregation.deadline = std::chrono::seconds(60);
    StartDaemon(opts);
    Make(r0, 0);
    Make(r1, 1);
    ASSERT_TRUE(testing::Eventually([&] { return r1->client->Counters().standby; }));
  }
};

TEST_F(ClientStandbyTest, TheStandbyHoldsItsReportsAndTakesOverWithoutLosingAStep) {
  Replica r0, r1;
  StartWithReplicas(&r0, &r1);
  EXPECT_FALSE(r0.client->Counters().standby);

  constexpr int64_t kSteps = 6;
  for (int64_t step = 0; step < kSteps; ++step) {
    Step(&r1, step);  // the standby first: its plans come from r0's reports
    Step(&r0, step);
  }
  ASSERT_TRUE(r0.client->Flush(std::chrono::seconds(3)));
  ASSERT_TRUE(r1.client->Flush(std::chrono::seconds(3)));
  ASSERT_TRUE(testing::Eventually(
      [&] { return listener_.decisions.load() >= static_cast<uint64_t>(kSteps); }));
  ClientCounters held = r1.client->Counters();
  EXPECT_EQ(held.reports_sent, 0u);
  EXPECT_EQ(held.reports_held, static_cast<uint64_t>(kSteps));
  EXPECT_EQ(held.missed_decisions, 0u);
  EXPECT_EQ(r0.client->Counters().reports_sent, static_cast<uint64_t>(kSteps));
  // The standby's acks said what it held back, and it matched r0's reports.
  // (Flush returns once the acks are written, before gnmrd has read them.)
  EXPECT_TRUE(testing::Eventually([&] { return listener_.standby_notes.load() > 0; }));
  EXPECT_TRUE(testing::Eventually([&] { return listener_.replica_checks.load() > 0; }));
  EXPECT_EQ(listener_.replica_mismatches.load(), 0u);

  // r1 computes step kSteps and holds it; r0 dies before it reports it.
  r1.Fill(kSteps);
  ASSERT_TRUE(r1.client->Observe(kSteps).ok());
  ASSERT_TRUE(testing::Eventually(
      [&] { return r1.client->Counters().reports_held == static_cast<uint64_t>(kSteps + 1); }));
  r0.client.reset();
  // Elected, r1 sends the held step: the job decides it, complete.
  ASSERT_TRUE(testing::Eventually(
      [&] { return listener_.decisions.load() >= static_cast<uint64_t>(kSteps + 1); },
      std::chrono::seconds(10)));
  EXPECT_FALSE(r1.client->Counters().standby);
  // (Counted once the write returned, which may be after the decision.)
  EXPECT_TRUE(testing::Eventually([&] { return r1.client->Counters().reports_sent == 1u; }));
  ASSERT_TRUE(r1.client->Ack(r1.client->PlanFor(kSteps)).ok());
  // It reports from now on, and its plans come from its own reports.
  Step(&r1, kSteps + 1);
  ASSERT_TRUE(r1.client->Flush(std::chrono::seconds(3)));
  EXPECT_EQ(r1.client->Counters().reports_sent, 2u);
  EXPECT_EQ(listener_.by_deadline.load(), 0u);
  EXPECT_EQ(listener_.incomplete.load(), 0u);
}

// Ranks that registered as replicas but hold different gradients (here: a
// rank whose tensors differ, as FSDP shards registered as whole units do):
// the replica check catches it, the job goes back to every rank reporting
// (report: all), and the standby sends its reports from then on.
TEST_F(ClientStandbyTest, RanksThatAreNotReplicasMakeTheJobGoBackToEveryRankReporting) {
  Replica r0, r1;
  StartWithReplicas(&r0, &r1);
  int64_t step = 0;
  const auto step_both = [&] {
    r1.Fill(step);
    for (float& x : r1.a) x *= 2.0f;  // not what r0 holds
    ASSERT_TRUE(r1.client->Observe(step).ok());
    Step(&r0, step);
    ASSERT_TRUE(r1.client->Ack(r1.client->PlanFor(step)).ok());
    ++step;
  };
  for (int i = 0; i < 30 && listener_.replica_mismatches.load() == 0; ++i) step_both();
  // (The event follows the count, under the job's lock.)
  ASSERT_TRUE(testing::Eventually(
      [&] { return listener_.EventsOf("dp", "replicas_differ").size() == 1u; }));
  EXPECT_EQ(listener_.replica_mismatches.load(), 1u);
  ASSERT_TRUE(testing::Eventually([&] { return !r1.client->Counters().standby; }));
  const uint64_t sent = r1.client->Counters().reports_sent;
  step_both();
  ASSERT_TRUE(r1.client->Flush(std::chrono::seconds(3)));
  EXPECT_GT(r1.client->Counters().reports_sent, sent);
}

}  // namespace
}  // namespace gnmr
