// Forward tensors through the client library (Client::ObserveForward,
// gnmr_observe_forward) to the controller's forward channel
// (docs/controller.md, "Forward channel"): over real gRPC to an in-process
// gnmrd core and with target "local", which must decide identically.
//
// The scenario is the coupled fault the channel exists for: k's quantizer
// saturates (the root), but backpropagation raises q's gradient far more
// than k's. With max_o 1, gradient norms alone admit q; with k's forward
// tensors observed, k is admitted, by the saturation rule.
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "controller/types/config_codec.h"
#include "gnmr/client.h"
#include "gnmr/client_local.h"
#include "gnmr/gnmr_c.h"
#include "tests/client/qk_client.h"
#include "tests/daemon/test_daemon.h"
#include "tests/testing/eventually.h"

namespace gnmr {
namespace {

constexpr int64_t kSteps = 12;
constexpr int64_t kFault = 8;        // after warmup (5)
constexpr float kFormatMax = 448.f;  // E4M3's largest finite magnitude

TensorRef Ref(const std::vector<float>& v, float saturation = 0.f) {
  TensorRef t;
  t.data = v.data();
  t.numel = v.size();
  t.saturation_magnitude = saturation;
  return t;
}

// One rank's tensors at a step: gradients of q and k, and k's forward
// tensor as fake-quantized E4M3 codes in fp32 (current scaling keeps one
// element at the maximum; the fault pushes 300 of 1,000 there).
struct Tensors {
  std::vector<float> grad_q = std::vector<float>(256);
  std::vector<float> grad_k = std::vector<float>(256);
  std::vector<float> fwd_k = std::vector<float>(1000);
  void Fill(int64_t step) {
    for (size_t i = 0; i < grad_q.size(); ++i) {
      grad_q[i] = 0.01f * static_cast<float>((i * 7 + step * 13) % 19 + 1);
      grad_k[i] = 0.01f * static_cast<float>((i * 3 + step * 5) % 17 + 1);
    }
    for (size_t i = 0; i < fwd_k.size(); ++i) {
      fwd_k[i] = static_cast<float>((i * 11 + step * 3) % 97) + 1.f;
    }
    fwd_k[step % fwd_k.size()] = kFormatMax;
    if (step == kFault) {
      for (float& g : grad_q) g *= 20.f;  // coupled: the largest gradient spike
      for (float& g : grad_k) g *= 1.5f;
      for (size_t i = 0; i < 300; ++i) fwd_k[i] = kFormatMax;
    }
  }
};

struct StepsSeen {
  std::vector<uint64_t> digests;      // per step
  std::vector<std::string> in_force;  // per step: unit names, comma separated
};

// Drives one client through the steps; ObserveForward only with `forward`.
StepsSeen Drive(Client* c, UnitHandle q, UnitHandle k, Tensors* t, bool forward) {
  StepsSeen run;
  for (int64_t step = 0; step < kSteps; ++step) {
    t->Fill(step);
    if (forward) {
      // Two calls (two micro-batches) add up to one forward tensor set.
      const TensorRef halves[2] = {
          {t->fwd_k.data(), 500, DType::kFp32, kHostDevice, 1.f, nullptr, kFormatMax},
          {t->fwd_k.data() + 500, 500, DType::kFp32, kHostDevice, 1.f, nullptr, kFormatMax}};
      EXPECT_TRUE(c->ObserveForward(k, &halves[0], 1).ok());
      EXPECT_TRUE(c->ObserveForward(k, &halves[1], 1).ok());
    }
    EXPECT_TRUE(c->Observe(step).ok());
    const Plan p = c->PlanFor(step);
    EXPECT_TRUE(c->Ack(p).ok());
    run.digests.push_back(p.digest);
    std::string names;
    for (const PlanEntry& e : p.entries) names += (e.unit == q ? "q," : e.unit == k ? "k," : "?,");
    run.in_force.push_back(names);
  }
  return run;
}

std::unique_ptr<Client> Make(const std::string& target, const std::string& job, Tensors* t,
                             UnitHandle* q, UnitHandle* k) {
  return testing::MakeQkClient(target, job, t->grad_q, t->grad_k, q, k);
}

class ClientForwardTest : public testing::DaemonTest {};

TEST_F(ClientForwardTest, ForwardTensorsAdmitTheRootOverGrpcAndLocallyAlike) {
  StartDaemon();
  const std::string target = "unix:" + socket_path_;
  StepsSeen daemon_runs[2];
  for (const bool forward : {false, true}) {
    Tensors t;
    UnitHandle q = 0, k = 0;
    const std::string job = forward ? "fwd-on" : "fwd-off";
    std::unique_ptr<Client> c = Make(target, job, &t, &q, &k);
    ASSERT_NE(c, nullptr);
    ASSERT_EQ(c->WaitConnected(std::chrono::seconds(5)).code(), StatusCode::kOk);
    daemon_runs[forward] = Drive(c.get(), q, k, &t, forward);
    EXPECT_EQ(c->Counters().missed_decisions, 0u);
    const std::vector<v1::Event> admissions = listener_.EventsOf(job, "admission");
    ASSERT_EQ(admissions.size(), 1u) << job;
    EXPECT_EQ(admissions[0].observed_step(), kFault);
    if (forward) {
      EXPECT_EQ(admissions[0].unit(), "attn.k");
      EXPECT_EQ(admissions[0].trigger(), v1::TRIGGER_SATURATION);
    } else {
      EXPECT_EQ(admissions[0].unit(), "attn.q");
      EXPECT_EQ(admissions[0].trigger(), v1::TRIGGER_GNMR);
    }
  }
  EXPECT_EQ(daemon_runs[0].in_force[kFault + 1], "q,");
  EXPECT_EQ(daemon_runs[1].in_force[kFault + 1], "k,");

  // The local target: the same statistics, the same plans.
  EnableLocalTarget();
  for (const bool forward : {false, true}) {
    Tensors t;
    UnitHandle q = 0, k = 0;
    std::unique_ptr<Client> c = Make("local", forward ? "fwd-on" : "fwd-off", &t, &q, &k);
    ASSERT_NE(c, nullptr);
    const StepsSeen local = Drive(c.get(), q, k, &t, forward);
    EXPECT_EQ(local.digests, daemon_runs[forward].digests) << "forward " << forward;
    EXPECT_EQ(local.in_force, daemon_runs[forward].in_force) << "forward " << forward;
  }
}

TEST(ClientForward, MisuseIsRefusedWithTheReason) {
  ClientOptions o;
  o.target = "unix:/tmp/gnmr_forward_no_daemon_" + std::to_string(getpid()) + ".sock";
  o.job_id = "fwd-misuse";
  auto made = Client::Create(o);
  ASSERT_TRUE(made.ok());
  std::unique_ptr<Client> c = std::move(made).value();
  std::vector<float> g(16, 1.f), f(16, 1.f);
  const UnitHandle u = *c->AddUnit("u", {Ref(g)});
  EXPECT_EQ(c->ObserveForward(u, {Ref(f)}).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(c->Start().ok());
  EXPECT_TRUE(c->ObserveForward(u, {Ref(f)}).ok());
  EXPECT_TRUE(c->ObserveForward(u, std::vector<TensorRef>{}).ok());  // nothing: no row
  EXPECT_EQ(c->ObserveForward(7, {Ref(f)}).code(), StatusCode::kInvalidArgument);
  TensorRef device = Ref(f);
  device.device = 0;
  const Status d = c->ObserveForward(u, {device});
  EXPECT_EQ(d.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.message().find("has no device units"), std::string::npos) << d.message();
  const Status neg = c->ObserveForward(u, {Ref(f, -1.f)});
  EXPECT_EQ(neg.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(neg.message().find("unit u"), std::string::npos) << neg.message();
  EXPECT_EQ(c->ObserveForward(u, nullptr, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(c->Observe(0).ok());  // the good call's statistics go with it

  // The C API: null checks, and the saturation magnitudes per tensor.
  gnmr_tensor t = {f.data(), f.size(), GNMR_DTYPE_FP32, GNMR_LOCATION_HOST, 0.0f, nullptr};
  EXPECT_EQ(gnmr_observe_forward(nullptr, 0, &t, nullptr, 1), GNMR_EINVALID_ARGUMENT);
}

TEST(ClientForward, TheCApiObservesForwardTensors) {
  gnmr_options co;
  gnmr_options_init(&co);
  co.target = "local";
  co.job_id = "fwd-c";
  EnableLocalTarget();
  gnmr_client* cc = nullptr;
  ASSERT_EQ(gnmr_client_create(&co, &cc), GNMR_OK) << gnmr_last_error();
  std::vector<float> g(16, 1.f), f(16, 1.f);
  gnmr_tensor t = {g.data(), g.size(), GNMR_DTYPE_FP32, GNMR_LOCATION_HOST, 0.0f, nullptr};
  gnmr_tensor ft = {f.data(), f.size(), GNMR_DTYPE_FP32, GNMR_LOCATION_HOST, 0.0f, nullptr};
  uint32_t h = 0;
  ASSERT_EQ(gnmr_add_unit(cc, "u", &t, 1, 0, 1, &h), GNMR_OK);
  ASSERT_EQ(gnmr_start(cc), GNMR_OK);
  const float sat = -2.f;  // refused: the magnitude reached the statistics
  EXPECT_EQ(gnmr_observe_forward(cc, h, &ft, &sat, 1), GNMR_EINVALID_ARGUMENT);
  EXPECT_EQ(gnmr_observe_forward(cc, h, nullptr, nullptr, 1), GNMR_EINVALID_ARGUMENT);
  EXPECT_EQ(gnmr_observe_forward(cc, h, &ft, nullptr, 1), GNMR_OK) << gnmr_last_error();
  EXPECT_EQ(gnmr_observe(cc, 0), GNMR_OK);
  gnmr_client_destroy(cc);
}

}  // namespace
}  // namespace gnmr
