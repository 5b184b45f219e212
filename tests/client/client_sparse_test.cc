// Units marked inactive (Client::MarkInactive, gnmr_mark_inactive) over real
// gRPC to an in-process gnmrd core, and with target "local": the unit is
// left out of the step's report, so the controller sees it inactive (no
// history, no warmup progress, no trigger even on a NaN in its stale
// buffer), the daemon counts it neither incomplete nor missing, and every
// step is still decided (docs/statistics.md).
#include <unistd.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "controller/types/config_codec.h"
#include "gnmr/client.h"
#include "gnmr/gnmr_c.h"
#include "tests/daemon/test_daemon.h"
#include "tests/testing/eventually.h"

namespace gnmr {
namespace {

constexpr int64_t kSteps = 12;
constexpr int64_t kInactiveFrom = 3;  // "moe.e1" gets no tokens from here on
constexpr int64_t kStaleNan = 8;      // its stale buffer holds a NaN then
constexpr int64_t kActiveNan = 10;    // control: a NaN in an active unit

// warmup 5, lock_steps 5, max_o 2, lag 1 (test_daemon.h).
ControllerConfig Fast() { return ConfigFromProto(testing::FastConfig()).value(); }

// The gradients of one rank: two experts, the same on every replica.
struct Grads {
  std::vector<float> e0 = std::vector<float>(256);
  std::vector<float> e1 = std::vector<float>(256);
  void Fill(int64_t step) {
    for (size_t i = 0; i < e0.size(); ++i) {
      e0[i] = 0.01f * static_cast<float>((i * 7 + step * 13) % 19 + 1);
      e1[i] = 0.02f * static_cast<float>((i * 3 + step * 5) % 17 + 1);
    }
    if (step == kStaleNan) e1[5] = std::numeric_limits<float>::quiet_NaN();
    if (step == kActiveNan) e0[9] = std::numeric_limits<float>::quiet_NaN();
  }
};

TensorRef Ref(std::vector<float>& v) {
  TensorRef t;
  t.data = v.data();
  t.numel = v.size();
  return t;
}

// Drives one C++ client through the steps; checks what only the client sees.
void RunSteps(Client* c, Grads* g, UnitHandle e1) {
  for (int64_t step = 0; step < kSteps; ++step) {
    g->Fill(step);
    if (step >= kInactiveFrom) {
      ASSERT_TRUE(c->MarkInactive(e1).ok());
    }
    ASSERT_TRUE(c->Observe(step).ok());
    if (step >= kInactiveFrom) {
      EXPECT_EQ(c->UnitNorms(step)[e1], 0.0) << step;
    }
    const Plan p = c->PlanFor(step);
    // The stale NaN is never read; the active one trips the same-step guard.
    EXPECT_EQ(p.nonfinite_observed, step == kActiveNan) << "step " << step;
    EXPECT_EQ(p.Find(e1), nullptr) << "step " << step;
    ASSERT_TRUE(c->Ack(p).ok());
  }
}

class ClientSparseTest : public testing::DaemonTest {};

TEST_F(ClientSparseTest, InactiveUnitsAreLeftOutOverGrpc) {
  // Rank 1 reports every step before rank 0 starts: no step may close by
  // its deadline meanwhile (the test daemon's 300 ms was too short under
  // TSan), since the test counts steps closed by deadline.
  DaemonOptions opts;
  opts.registry.job.aggregation.deadline = std::chrono::seconds(60);
  StartDaemon(opts);
  const std::string target = "unix:" + socket_path_;
  // Rank 0: the C++ API.
  ClientOptions o;
  o.target = target;
  o.job_id = "moe";
  o.rank = 0;
  o.world_size = 2;
  o.decision_wait = std::chrono::seconds(3);
  o.config = Fast();
  auto made = Client::Create(o);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<Client> c = std::move(made).value();
  Grads g0, g1;
  ASSERT_TRUE(c->AddUnit("moe.e0", {Ref(g0.e0)}).ok());
  const UnitHandle e1 = *c->AddUnit("moe.e1", {Ref(g0.e1)});
  EXPECT_EQ(c->MarkInactive(7).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(c->Start().ok());
  // Connected first: its Register creates the job with Fast().
  ASSERT_EQ(c->WaitConnected(std::chrono::seconds(5)).code(), StatusCode::kOk);
  // Rank 1: the C API.
  gnmr_options co;
  gnmr_options_init(&co);
  co.target = target.c_str();
  co.job_id = "moe";
  co.rank = 1;
  co.world_size = 2;
  co.decision_wait_ms = 3000;
  gnmr_client* cc = nullptr;
  ASSERT_EQ(gnmr_client_create(&co, &cc), GNMR_OK) << gnmr_last_error();
  gnmr_tensor t[2] = {};
  t[0] = {g1.e0.data(), g1.e0.size(), GNMR_DTYPE_FP32, GNMR_LOCATION_HOST, 0.0f, nullptr};
  t[1] = {g1.e1.data(), g1.e1.size(), GNMR_DTYPE_FP32, GNMR_LOCATION_HOST, 0.0f, nullptr};
  uint32_t h = 0;
  ASSERT_EQ(gnmr_add_unit(cc, "moe.e0", &t[0], 1, 0, 1, &h), GNMR_OK);
  ASSERT_EQ(gnmr_add_unit(cc, "moe.e1", &t[1], 1, 0, 1, &h), GNMR_OK);
  EXPECT_EQ(gnmr_mark_inactive(cc, 2), GNMR_EINVALID_ARGUMENT);
  EXPECT_EQ(gnmr_mark_inactive(nullptr, 0), GNMR_EINVALID_ARGUMENT);
  ASSERT_EQ(gnmr_start(cc), GNMR_OK);
  ASSERT_EQ(gnmr_wait_connected(cc, 5000), GNMR_OK) << gnmr_last_error();

  // Rank 1 reports first, each step (the daemon decides once both did).
  gnmr_plan* plan = gnmr_plan_new();
  for (int64_t step = 0; step < kSteps; ++step) {
    g1.Fill(step);
    if (step >= kInactiveFrom) {
      ASSERT_EQ(gnmr_mark_inactive(cc, h), GNMR_OK);
    }
    ASSERT_EQ(gnmr_observe(cc, step), GNMR_OK) << gnmr_last_error();
  }
  RunSteps(c.get(), &g0, e1);
  for (int64_t step = 0; step < kSteps; ++step) {
    ASSERT_EQ(gnmr_plan_for(cc, step, plan), GNMR_OK);
    gnmr_plan_info info;
    ASSERT_EQ(gnmr_plan_info_get(plan, &info), GNMR_OK);
    EXPECT_EQ(info.has_decision, step == 0 ? 0 : 1) << step;
  }
  gnmr_plan_free(plan);
  ASSERT_TRUE(c->Flush(std::chrono::seconds(3)));
  ASSERT_TRUE(gnmr::testing::Eventually(
      [&] { return listener_.decisions.load() >= static_cast<uint64_t>(kSteps); }));

  // Every step decided with both ranks; "moe.e1" never incomplete.
  EXPECT_EQ(listener_.decisions.load(), static_cast<uint64_t>(kSteps));
  EXPECT_EQ(listener_.incomplete.load(), 0u);
  EXPECT_EQ(listener_.by_deadline.load(), 0u);
  EXPECT_EQ(listener_.omitted.load(), static_cast<uint64_t>(kSteps - kInactiveFrom));
  EXPECT_EQ(c->Counters().missed_decisions, 0u);
  // The controller saw "moe.e1" only while it was active: still in warmup
  // (3 of 5 samples), last seen at step 2; the NaN in its stale buffer
  // admitted nothing and skipped no step. The active NaN did both.
  auto job = daemon_->registry().Find("moe");
  ASSERT_TRUE(job.ok());
  bool seen = false;
  for (const v1::UnitInfo& u : (*job)->Units(UnitQuery{}).units) {
    if (u.name() == "moe.e1") {
      seen = true;
      EXPECT_EQ(u.last_step(), kInactiveFrom - 1);
      EXPECT_EQ(u.state(), v1::UNIT_STATE_WARMUP);
    } else {
      EXPECT_EQ(u.last_step(), kSteps - 1);
    }
  }
  EXPECT_TRUE(seen);
  const std::vector<v1::Event> admissions = listener_.EventsOf("moe", "admission");
  ASSERT_EQ(admissions.size(), 1u);
  EXPECT_EQ(admissions[0].unit(), "moe.e0");
  EXPECT_EQ(admissions[0].observed_step(), kActiveNan);
  gnmr_client_destroy(cc);
}

TEST(ClientSparseLocal, TheLocalTargetLeavesInactiveUnitsOut) {
  ClientOptions o;
  o.target = "local";
  o.job_id = "moe-local";
  o.config = Fast();
  auto made = Client::Create(o);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<Client> c = std::move(made).value();
  Grads g;
  const UnitHandle e0 = *c->AddUnit("moe.e0", {Ref(g.e0)});
  const UnitHandle e1 = *c->AddUnit("moe.e1", {Ref(g.e1)});
  ASSERT_TRUE(c->Start().ok());
  RunSteps(c.get(), &g, e1);
  // The active NaN at step 10 admitted e0 (in force from step 11).
  const Plan p = c->PlanFor(kSteps - 1);
  ASSERT_TRUE(p.has_decision);
  EXPECT_NE(p.Find(e0), nullptr);
  EXPECT_EQ(c->Counters().missed_decisions, 0u);
}

// Reports are recycled from a bounded pool: a report that carried marks must
// not carry them into a later step. No daemon here, so every report is
// dropped and its slot reused; marks alternate across many pool cycles.
TEST(ClientSparseMarks, ARecycledReportCarriesNoOldMarks) {
  ClientOptions o;
  o.target = "unix:/tmp/gnmr_sparse_no_daemon_" + std::to_string(getpid()) + ".sock";
  o.job_id = "marks";
  o.max_queued_reports = 4;
  auto made = Client::Create(o);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<Client> c = std::move(made).value();
  Grads g;
  g.Fill(0);
  const UnitHandle e0 = *c->AddUnit("moe.e0", {Ref(g.e0)});
  const UnitHandle e1 = *c->AddUnit("moe.e1", {Ref(g.e1)});
  ASSERT_TRUE(c->Start().ok());
  for (int64_t step = 0; step < 40; ++step) {
    const bool mark = step % 3 == 0;
    if (mark) {
      ASSERT_TRUE(c->MarkInactive(e1).ok());
    }
    ASSERT_TRUE(c->Observe(step).ok());
    const std::vector<double> norms = c->UnitNorms(step);
    ASSERT_EQ(norms.size(), 2u);
    EXPECT_GT(norms[e0], 0.0) << "step " << step;
    if (mark) {
      EXPECT_EQ(norms[e1], 0.0) << "step " << step;
    } else {
      EXPECT_GT(norms[e1], 0.0) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace gnmr
