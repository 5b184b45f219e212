// attribution: upstream through the client library (docs/controller.md,
// "Attribution"): the client counts each unit's first forward call of a
// step (fwd_order), gnmrd keeps the earliest, and the controller admits the
// unit that ran first when several units' forward rules trigger together.
//
// The scenario is the coupling the rule exists for: v's quantizer scale is
// off, so v's input and, through attention, o's input are both x16-x20. The
// units are registered o first, so unit ids say nothing about the forward
// pass; only the call order does. Over real gRPC and with target "local",
// which must decide identically.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "controller/types/config_codec.h"
#include "gnmr/client.h"
#include "gnmr/client_local.h"
#include "tests/daemon/test_daemon.h"

namespace gnmr {
namespace {

constexpr int64_t kSteps = 10;
constexpr int64_t kFault = 7;  // after warmup (5)

ControllerConfig Upstream(Attribution a) {
  ControllerConfig c = ConfigFromProto(testing::FastConfig(/*max_o=*/2)).value();
  c.attribution = a;
  return c;
}

struct Tensors {
  std::vector<float> grad_o = std::vector<float>(128, 0.01f);
  std::vector<float> grad_v = std::vector<float>(128, 0.01f);
  std::vector<float> fwd_v = std::vector<float>(512);
  std::vector<float> fwd_o = std::vector<float>(512);
  void Fill(int64_t step) {
    for (size_t i = 0; i < fwd_v.size(); ++i) {
      fwd_v[i] = 0.1f * static_cast<float>((i * 7 + static_cast<size_t>(step) * 3) % 23 + 1);
      fwd_o[i] = 0.1f * static_cast<float>((i * 5 + static_cast<size_t>(step) * 11) % 19 + 1);
    }
    if (step == kFault) {
      for (float& x : fwd_v) x *= 16.f;  // the root
      for (float& x : fwd_o) x *= 20.f;  // fed by it: a higher ratio
    }
  }
};

struct Decisions {
  std::vector<uint64_t> digests;
  std::vector<std::string> admitted_at_fault;  // from the plan after the fault
};

Decisions Drive(const std::string& target, const std::string& job, Attribution a) {
  Decisions run;
  Tensors t;
  ClientOptions o;
  o.target = target;
  o.job_id = job;
  o.decision_wait = std::chrono::seconds(3);
  o.config = Upstream(a);
  auto made = Client::Create(o);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  if (!made.ok()) return run;
  std::unique_ptr<Client> c = std::move(made).value();
  const UnitHandle unit_o = *c->AddUnit("attn.o", {TensorRef{t.grad_o.data(), t.grad_o.size()}});
  const UnitHandle unit_v = *c->AddUnit("attn.v", {TensorRef{t.grad_v.data(), t.grad_v.size()}});
  EXPECT_TRUE(c->Start().ok());
  if (target != "local") {
    EXPECT_TRUE(c->WaitConnected(std::chrono::seconds(5)).ok());
  }
  for (int64_t step = 0; step < kSteps; ++step) {
    t.Fill(step);
    const TensorRef v{t.fwd_v.data(), t.fwd_v.size()};
    const TensorRef out{t.fwd_o.data(), t.fwd_o.size()};
    EXPECT_TRUE(c->ObserveForward(unit_v, &v, 1).ok());  // v runs before o
    EXPECT_TRUE(c->ObserveForward(unit_o, &out, 1).ok());
    EXPECT_TRUE(c->Observe(step).ok());
    const Plan p = c->PlanFor(step);
    EXPECT_TRUE(c->Ack(p).ok());
    run.digests.push_back(p.digest);
    if (step == kFault + 1) {
      for (const PlanEntry& e : p.entries) {
        run.admitted_at_fault.push_back(e.unit == unit_v ? "v" : e.unit == unit_o ? "o" : "?");
      }
    }
  }
  EXPECT_EQ(c->Counters().missed_decisions, 0u);
  return run;
}

class ClientUpstreamTest : public testing::DaemonTest {};

TEST_F(ClientUpstreamTest, TheUnitThatRanFirstIsTheRootOverGrpcAndLocallyAlike) {
  StartDaemon();
  const std::string target = "unix:" + socket_path_;
  // exclusive: both forward triggers fit max_o 2, so both are admitted.
  const Decisions exclusive = Drive(target, "excl", Attribution::kExclusive);
  EXPECT_EQ(exclusive.admitted_at_fault, (std::vector<std::string>{"o", "v"}));
  // upstream: v ran first; o is coupled to it (denied, no budget held).
  const Decisions upstream = Drive(target, "up", Attribution::kUpstream);
  EXPECT_EQ(upstream.admitted_at_fault, (std::vector<std::string>{"v"}));
  const std::vector<v1::Event> denials = listener_.EventsOf("up", "denial");
  ASSERT_EQ(denials.size(), 1u);
  EXPECT_EQ(denials[0].unit(), "attn.o");
  EXPECT_EQ(denials[0].observed_step(), kFault);

  EnableLocalTarget();
  const Decisions local = Drive("local", "up", Attribution::kUpstream);
  EXPECT_EQ(local.digests, upstream.digests);
  EXPECT_EQ(local.admitted_at_fault, upstream.admitted_at_fault);
}

// Pipeline parallelism: stage 0's last unit feeds stage 1's first, and each
// stage's client counts its own positions from 1. ClientOptions::
// pipeline_stage puts stage 0's root first. Stage 1 registers first, so its
// unit has the lower unit id and wins the tie of two position-1 units
// without stages: the control run shows the wrong root that stages fix.
// The ranks hold different units, so each decision names a unit the other
// rank does not hold: both must take it (docs/safety.md, section 2), with
// the same digest, and miss nothing.
struct PipelineRun {
  std::vector<std::string> admitted_at_fault;
  bool same_plans = true;
  int64_t decided = 0;  // steps both ranks had a decision for
};

PipelineRun DrivePipeline(const std::string& target, const std::string& job, bool stages) {
  PipelineRun run;
  Tensors t;
  std::unique_ptr<Client> clients[2];
  UnitHandle units[2] = {0, 0};  // each client's own handle
  const char* names[2] = {"blk0.fc2", "blk1.v"};
  for (int rank : {1, 0}) {  // stage 1 registers first: the lower unit id
    ClientOptions o;
    o.target = target;
    o.job_id = job;
    o.rank = static_cast<uint32_t>(rank);
    o.world_size = 2;
    o.pipeline_stage = stages ? static_cast<uint32_t>(rank) : 0;
    o.decision_wait = std::chrono::seconds(3);
    o.config = Upstream(Attribution::kUpstream);
    auto made = Client::Create(o);
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    if (!made.ok()) return run;
    clients[rank] = std::move(made).value();
    std::vector<float>& grad = rank == 0 ? t.grad_v : t.grad_o;
    units[rank] = *clients[rank]->AddUnit(names[rank], {TensorRef{grad.data(), grad.size()}});
    EXPECT_TRUE(clients[rank]->Start().ok());
    EXPECT_TRUE(clients[rank]->WaitConnected(std::chrono::seconds(5)).ok());
  }
  for (int64_t step = 0; step < kSteps; ++step) {
    t.Fill(step);  // fwd_v: stage 0's faulty input; fwd_o: what stage 1 gets from it
    const TensorRef in0{t.fwd_v.data(), t.fwd_v.size()};
    const TensorRef in1{t.fwd_o.data(), t.fwd_o.size()};
    EXPECT_TRUE(clients[0]->ObserveForward(units[0], &in0, 1).ok());
    EXPECT_TRUE(clients[1]->ObserveForward(units[1], &in1, 1).ok());
    for (auto& c : clients) EXPECT_TRUE(c->Observe(step).ok());
    const Plan p0 = clients[0]->PlanFor(step);
    const Plan p1 = clients[1]->PlanFor(step);
    for (auto& c : clients) EXPECT_TRUE(c->Ack(c == clients[0] ? p0 : p1).ok());
    EXPECT_EQ(p0.has_decision, p1.has_decision) << "step " << step;
    EXPECT_EQ(p0.digest, p1.digest) << "step " << step;
    run.same_plans = run.same_plans && p0.digest == p1.digest;
    run.decided += p0.has_decision && p1.has_decision ? 1 : 0;
    if (step == kFault + 1) {  // each rank's plan lists its own units
      for (size_t i = 0; i < p0.entries.size(); ++i) run.admitted_at_fault.push_back(names[0]);
      for (size_t i = 0; i < p1.entries.size(); ++i) run.admitted_at_fault.push_back(names[1]);
    }
  }
  for (auto& c : clients) {
    const ClientCounters k = c->Counters();
    EXPECT_EQ(k.decisions_rejected, 0u) << k.last_error;
    EXPECT_EQ(k.missed_decisions, 0u);
  }
  return run;
}

TEST_F(ClientUpstreamTest, AnEarlierPipelineStageIsTheRoot) {
  StartDaemon();
  const std::string target = "unix:" + socket_path_;
  const PipelineRun without = DrivePipeline(target, "pp-none", /*stages=*/false);
  EXPECT_TRUE(without.same_plans);
  EXPECT_GE(without.decided, kSteps - 1);  // step 0 may come before the first decision
  EXPECT_EQ(without.admitted_at_fault, (std::vector<std::string>{"blk1.v"}));  // the wrong root
  const PipelineRun with = DrivePipeline(target, "pp-stages", /*stages=*/true);
  EXPECT_TRUE(with.same_plans);
  EXPECT_GE(with.decided, kSteps - 1);
  EXPECT_EQ(with.admitted_at_fault, (std::vector<std::string>{"blk0.fc2"}));
  const std::vector<v1::Event> denials = listener_.EventsOf("pp-stages", "denial");
  ASSERT_EQ(denials.size(), 1u);
  EXPECT_EQ(denials[0].unit(), "blk1.v");
}

TEST(ClientOptionsTest, APipelineStageNeedsARank) {
  ClientOptions o;
  o.target = "unix:/nonexistent/gnmrd.sock";
  o.job_id = "pp";
  o.world_size = 4;
  o.pipeline_stage = 4;
  auto made = Client::Create(o);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(made.status().message().find("pipeline_stage 4 must be < world_size 4"),
            std::string::npos)
      << made.status().message();
  o.pipeline_stage = 3;
  EXPECT_TRUE(Client::Create(o).ok());
}

}  // namespace
}  // namespace gnmr
