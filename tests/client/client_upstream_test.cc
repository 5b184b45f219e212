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

#include "core/config_codec.h"
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

}  // namespace
}  // namespace gnmr
