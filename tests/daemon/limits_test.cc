// gnmrd over its real gRPC surface, issue 12's limits: a step far ahead is
// refused, the operator's rewind, the resource caps.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "controller/types/decision.h"
#include "tests/daemon/test_daemon.h"
#include "tests/testing/eventually.h"

namespace gnmr::testing {
namespace {

std::vector<RawRank::Unit> Units(int n) {
  std::vector<RawRank::Unit> out;
  for (int i = 0; i < n; ++i) out.push_back({"u" + std::to_string(i)});
  return out;
}

class LimitsTest : public DaemonTest {
 protected:
  grpc::Status Rewind(const std::string& job, int64_t to, v1::RewindJobResponse* out = nullptr,
                      const std::string& token = "admin-secret") {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-gnmr-admin-token", token);
    v1::RewindJobRequest req;
    req.set_job_id(job);
    req.set_to_step(to);
    v1::RewindJobResponse resp;
    grpc::Status s = v1::Admin::NewStub(Tcp())->RewindJob(&ctx, req, &resp);
    if (out) *out = resp;
    return s;
  }
};

// Issue 12, item 2: rank 1 reporting step 2^61 - 1 used to become the job's
// last closed step (at its deadline), after which every report of every
// rank was late, snapshotted and for good.
TEST_F(LimitsTest, OneRankCannotSwitchAJobOffForGood) {
  StartDaemon();
  const v1::ControllerConfig config = FastConfig();
  RawRank r0(Tcp(), "jump", 0, 2), r1(Tcp(), "jump", 1, 2);
  ASSERT_TRUE(r0.Register(Units(2), nullptr, &config).ok());
  ASSERT_TRUE(r1.Register(Units(2)).ok());
  r0.Open();
  r1.Open();
  v1::Decision d;
  for (int64_t t = 0; t < 3; ++t) {
    r0.SendStats(t, {1.0, 1.0});
    r1.SendStats(t, {1.0, 1.0});
  }
  ASSERT_TRUE(r0.WaitDecision(2, &d));
  r1.SendStats(kMaxStep, {1.0, 1.0});
  const grpc::Status end = r1.WaitEnd();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::OUT_OF_RANGE) << end.error_message();
  EXPECT_NE(end.error_message().find("max_step_jump"), std::string::npos) << end.error_message();
  // The job goes on: rank 1 comes back, both report, steps are decided.
  ASSERT_TRUE(r1.Register(Units(2)).ok());
  r1.Open();
  for (int64_t t = 3; t < 6; ++t) {
    r0.SendStats(t, {1.0, 1.0});
    r1.SendStats(t, {1.0, 1.0});
  }
  EXPECT_TRUE(r0.WaitDecision(5, &d));
  EXPECT_TRUE(r1.WaitDecision(5, &d));
  EXPECT_EQ(listener_.late, 0u);
}

// The way out when a job's steps went wrong anyway (here: an imported state
// at a far step, which the job's trainer is nowhere near).
TEST_F(LimitsTest, RewindJobStartsTheStepsOverInANewGeneration) {
  StartDaemon();
  const v1::ControllerConfig config = FastConfig();
  RawRank r(Tcp(), "stuck", 0, 1);
  v1::RegisterResponse reg;
  ASSERT_TRUE(r.Register(Units(2), &reg, &config).ok());
  r.Open();
  v1::Decision d;
  for (int64_t t = 0; t < 3; ++t) r.SendStats(t, {1.0, 1.0});
  ASSERT_TRUE(r.WaitDecision(2, &d));
  v1::ControllerState state;
  ASSERT_TRUE(ExportState("stuck", &state).ok());
  state.set_last_step(5000000);
  state.set_last_apply(5000001);
  v1::ImportStateResponse imported;
  ASSERT_TRUE(ImportState("stuck", state, &imported).ok());
  ASSERT_TRUE(r.WaitGeneration(imported.generation()));
  r.SendStats(3, {1.0, 1.0});  // late: the job is at step 5000000 now
  Eventually([&] { return listener_.late != 0; });
  EXPECT_EQ(listener_.late, 1u);

  // Refused: no admin token over TCP, a negative step, an unknown job.
  EXPECT_EQ(Rewind("stuck", 0, nullptr, "wrong").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Rewind("stuck", -1).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Rewind("nope", 0).error_code(), grpc::StatusCode::NOT_FOUND);

  v1::RewindJobResponse rewound;
  const grpc::Status s = Rewind("stuck", 0, &rewound);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(rewound.generation(), imported.generation() + 1);
  ASSERT_TRUE(r.WaitGeneration(rewound.generation()));
  r.SendStats(4, {1.0, 1.0});
  ASSERT_TRUE(r.WaitDecisionIn(rewound.generation(), 4, &d));
  EXPECT_EQ(d.apply_step(), 5);  // lag 1 from the resumed step
  EXPECT_EQ(listener_.late, 1u);
  // Live (the rank is attached): the old generation still plans the steps
  // just past the trainer's, not up to the far imported step.
  EXPECT_EQ(listener_.EventsOf("stuck", "generation").back().detail(),
            "generation " + std::to_string(rewound.generation()) +
                ": an operator rewound the job: reports of any step are accepted; live switch: "
                "generation " +
                std::to_string(imported.generation()) + " still plans the steps before 13");

  // --to: reports before the step are late, from it on they count.
  ASSERT_TRUE(Rewind("stuck", 100, &rewound).ok());
  ASSERT_TRUE(r.WaitGeneration(rewound.generation()));
  r.SendStats(50, {1.0, 1.0});
  r.SendStats(100, {1.0, 1.0});
  ASSERT_TRUE(r.WaitDecisionIn(rewound.generation(), 100, &d));
  EXPECT_EQ(listener_.late, 2u);
}

// A rank that reads nothing for a while: its messages back up in gnmrd.
// The 256-message queue used to drop the oldest first, GenerationStart
// included, so the rank could miss the start of a generation and apply a
// void generation's plan. Decisions may go; the GenerationStart may not.
TEST_F(LimitsTest, AStalledRankStillGetsTheGenerationStart) {
  DaemonOptions options;
  options.session_queue.max_bytes = 256u << 10;
  StartDaemon(options);
  v1::ControllerConfig config = FastConfig(/*max_o=*/1000);
  config.set_lock_steps(1000000);  // every decision carries 1000 entries
  RawRank r0(Tcp(), "slow", 0, 2), r1(Tcp(), "slow", 1, 2);
  ASSERT_TRUE(r0.Register(Units(1000), nullptr, &config).ok());
  ASSERT_TRUE(r1.Register(Units(1000)).ok());
  r0.Open();
  r1.Open(0, true, /*read=*/false);
  const std::vector<double> nan(1000, std::nan(""));
  v1::Decision d;
  // Until rank 1's queue overflows: its stream is stalled for sure.
  int64_t t = 0;
  for (; daemon_->stats().decisions_dropped.load() == 0; ++t) {
    ASSERT_LT(t, 5000) << "rank 1's stream never backed up";
    r0.SendStats(t, nan);
    r1.SendStats(t, nan);
    ASSERT_TRUE(r0.WaitDecision(t, &d)) << t;
  }
  v1::RewindJobResponse rewound;
  ASSERT_TRUE(Rewind("slow", 0, &rewound).ok());
  ASSERT_TRUE(r0.WaitGeneration(rewound.generation()));
  for (const int64_t end = t + 300; t < end; ++t) {
    r0.SendStats(t, nan);
    r1.SendStats(t, nan);
    ASSERT_TRUE(r0.WaitDecision(t, &d)) << t;
  }
  r1.StartReading();
  ASSERT_TRUE(r1.WaitDecisionIn(rewound.generation(), t - 1, &d));
  int start = -1, first_decision = -1;
  const std::vector<v1::ServerMessage> got = r1.messages();
  for (int i = 0; i < static_cast<int>(got.size()); ++i) {
    if (got[i].has_generation() && got[i].generation().generation() == rewound.generation()) {
      start = i;
    }
    if (got[i].has_decision() && got[i].decision().generation() == rewound.generation() &&
        first_decision < 0) {
      first_decision = i;
    }
  }
  ASSERT_GE(start, 0) << "the GenerationStart was dropped";
  EXPECT_LT(start, first_decision);
}

// Issue 12, item 8, over the wire: a Register that would allocate past a
// cap or the daemon's memory budget is refused with RESOURCE_EXHAUSTED
// naming the key, and the job stays as it was.
TEST_F(LimitsTest, RegistrationsPastTheCapsOrTheBudgetAreRefused) {
  DaemonOptions options;
  options.registry.job.budget = std::make_shared<MemoryBudget>(32u << 20);
  StartDaemon(options);
  v1::ControllerConfig config = FastConfig();
  config.set_short_window(1024);
  RawRank wide(Tcp(), "wide", 0, 1);
  std::vector<RawRank::Unit> many = Units(20000);  // x 1024 > 2^24 window cells
  grpc::Status s = wide.Register(many, nullptr, &config);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("max_window_cells_per_job"), std::string::npos);
  config.set_short_window(4);
  config.set_max_o(100000);
  RawRank greedy(Tcp(), "greedy", 0, 1);
  s = greedy.Register(Units(2), nullptr, &config);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("max_o_limit"), std::string::npos);
  config.set_max_o(4);
  RawRank big(Tcp(), "big", 0, 1);
  s = big.Register(many, nullptr, &config);  // ~40 MiB of footprint
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("memory_budget"), std::string::npos);
  // What fits is served.
  ASSERT_TRUE(big.Register(Units(2000), nullptr, &config).ok());
  big.Open();
  big.SendStats(0, std::vector<double>(2000, 1.0));
  v1::Decision d;
  EXPECT_TRUE(big.WaitDecision(0, &d));
}

// Issue 12, item 8: a Register costs ~10x its bytes while it is parsed and
// served, before any cap can refuse it; the bytes of requests served at
// once are bounded (max_request_bytes_in_flight), so K clients cannot make
// gnmrd hold K large requests. A request alone always passes.
TEST_F(LimitsTest, RequestsServedAtOnceAreBoundedInBytes) {
  DaemonOptions options;
  options.request_gate = std::make_shared<RequestGate>(64u << 10);
  StartDaemon(options);
  RawRank alone(Tcp(), "alone", 0, 1);
  ASSERT_TRUE(alone.Register(Units(20000)).ok());    // ~200 KiB: over the bound, but alone
  EXPECT_EQ(options.request_gate->in_flight(), 0u);  // given back
  // Another request being served (as a held ticket): what would take the
  // bytes past the bound is refused, naming the key; what fits passes.
  RequestGate::Ticket other;
  ASSERT_TRUE(options.request_gate->Admit(63u << 10, &other).ok());
  RawRank big(Tcp(), "big", 0, 1);
  grpc::Status s = big.Register(Units(1000));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("max_request_bytes_in_flight"), std::string::npos)
      << s.error_message();
  grpc::ClientContext ctx;  // the Admin calls too (refused before the id is checked)
  v1::GetConfigRequest get;
  get.set_job_id(std::string(2u << 10, 'x'));  // else NOT_FOUND
  v1::GetConfigResponse config;
  const grpc::Status got = v1::Admin::NewStub(Unix())->GetConfig(&ctx, get, &config);
  EXPECT_EQ(got.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << got.error_message();
  RawRank small(Tcp(), "small", 0, 1);
  EXPECT_TRUE(small.Register(Units(2)).ok());
  other.Reset();
  EXPECT_TRUE(big.Register(Units(1000)).ok());
  EXPECT_EQ(options.request_gate->in_flight(), 0u);
}

// An answer can be far larger than its request: ExportState or ListUnits of
// a large job. A read's answer is admitted like a request (so K readers
// cannot make gnmrd hold K large answers), and one above max_message_bytes
// is refused with a status naming the key, before it is serialized.
TEST_F(LimitsTest, AnswersAreBoundedToo) {
  DaemonOptions options;
  options.max_message_bytes = 512 << 10;
  options.request_gate = std::make_shared<RequestGate>(64u << 10);
  StartDaemon(options);
  RawRank big(Tcp(), "big", 0, 1);
  ASSERT_TRUE(big.Register(Units(20000)).ok());
  big.Open();  // a decided step gives every unit its statistics: ~1 MiB of state
  big.SendStats(0, std::vector<double>(20000, 1.0));
  v1::Decision d;
  ASSERT_TRUE(big.WaitDecision(0, &d));
  RawRank mid(Tcp(), "mid", 0, 1);
  ASSERT_TRUE(mid.Register(Units(1000)).ok());
  auto admin = v1::Admin::NewStub(Unix());
  const auto list_units = [&](const std::string& job) {
    grpc::ClientContext ctx;
    v1::ListUnitsRequest req;
    req.set_job_id(job);
    v1::ListUnitsResponse resp;
    return admin->ListUnits(&ctx, req, &resp);
  };
  {
    grpc::ClientContext ctx;
    v1::ExportStateRequest req;
    req.set_job_id("big");
    v1::ExportStateResponse resp;
    const grpc::Status s = admin->ExportState(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_NE(s.error_message().find("max_message_bytes 524288"), std::string::npos)
        << s.error_message();
  }
  // Alone, a read's answer passes whatever its size (mid's units: > 1 KiB).
  ASSERT_TRUE(list_units("mid").ok());
  // With 63 KiB of another request being served, the large answer is
  // refused, naming the key; a small one (GetConfig) fits.
  RequestGate::Ticket other;
  ASSERT_TRUE(options.request_gate->Admit(63u << 10, &other).ok());
  const grpc::Status s = list_units("mid");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("this answer of"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("max_request_bytes_in_flight"), std::string::npos);
  {
    grpc::ClientContext ctx;
    v1::GetConfigRequest get;
    get.set_job_id("mid");
    v1::GetConfigResponse config;
    EXPECT_TRUE(admin->GetConfig(&ctx, get, &config).ok());
  }
  other.Reset();
  EXPECT_TRUE(list_units("mid").ok());
  EXPECT_EQ(options.request_gate->in_flight(), 0u);  // every answer's bytes given back
}

TEST(RequestGateTest, AnAnswerJoinsItsRequestsTicket) {
  RequestGate gate(100);
  RequestGate::Ticket a;
  ASSERT_TRUE(gate.Admit(10, &a).ok());
  EXPECT_TRUE(gate.AdmitAnswer(500, &a).ok());  // alone: any size
  EXPECT_EQ(gate.in_flight(), 510u);
  a.Reset();
  EXPECT_EQ(gate.in_flight(), 0u);
  RequestGate::Ticket b;
  ASSERT_TRUE(gate.Admit(10, &a).ok());
  ASSERT_TRUE(gate.Admit(10, &b).ok());
  EXPECT_EQ(gate.AdmitAnswer(81, &a).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(gate.in_flight(), 20u);  // a refused answer leaves the ticket as it was
  EXPECT_TRUE(gate.AdmitAnswer(80, &a).ok());
  EXPECT_EQ(gate.in_flight(), 100u);
  b.Reset();
  EXPECT_EQ(gate.in_flight(), 90u);
  a.Reset();
  EXPECT_EQ(gate.in_flight(), 0u);
}

}  // namespace
}  // namespace gnmr::testing
