// Quantized gradients through the client library (Client::ObserveBackward,
// gnmr_observe_backward) to the controller's backward channel
// (docs/controller.md, "Backward channel"): over real gRPC to an in-process
// gnmrd core and with target "local", which must decide identically.
//
// The scenario is the fault the channel exists for: k's backward quantizer
// stores its gradient with a scale 16x too large, so k's gradient and the
// gradient backpropagation passes on to q rise (q's the most). With max_o
// 1, gradient norms alone admit q; with k's quantized gradient observed, k
// is admitted by the backward rule.
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gnmr/client.h"
#include "gnmr/client_local.h"
#include "gnmr/gnmr_c.h"
#include "tests/client/qk_client.h"
#include "tests/daemon/test_daemon.h"

namespace gnmr {
namespace {

constexpr int64_t kSteps = 12;
constexpr int64_t kFault = 8;  // after warmup (5)

// One rank's tensors at a step: gradients of q and k, and k's quantized
// gradient dequantized into fp32 (E5M2 codes times their scale_inv).
struct Tensors {
  std::vector<float> grad_q = std::vector<float>(256);
  std::vector<float> grad_k = std::vector<float>(256);
  std::vector<float> quantized_k = std::vector<float>(512);
  void Fill(int64_t step) {
    for (size_t i = 0; i < grad_q.size(); ++i) {
      grad_q[i] = 0.01f * static_cast<float>((i * 7 + step * 13) % 19 + 1);
      grad_k[i] = 0.01f * static_cast<float>((i * 3 + step * 5) % 17 + 1);
    }
    // The desynchronised scale_inv at the fault: 16x.
    const float scale_inv = step == kFault ? 16.f / 1024.f : 1.f / 1024.f;
    for (size_t i = 0; i < quantized_k.size(); ++i) {
      quantized_k[i] = static_cast<float>((i * 11 + step * 3) % 61) * 64.f * scale_inv;
    }
    if (step == kFault) {
      for (float& g : grad_q) g *= 20.f;
      for (float& g : grad_k) g *= 16.f;
    }
  }
};

struct StepsSeen {
  std::vector<uint64_t> digests;      // per step
  std::vector<std::string> in_force;  // per step: unit names, comma separated
};

StepsSeen Drive(Client* c, UnitHandle q, UnitHandle k, Tensors* t, bool backward) {
  StepsSeen run;
  for (int64_t step = 0; step < kSteps; ++step) {
    t->Fill(step);
    if (backward) {
      // Two calls (two micro-batches) add up to one row.
      for (size_t half : {size_t{0}, size_t{256}}) {
        TensorRef r;
        r.data = t->quantized_k.data() + half;
        r.numel = 256;
        EXPECT_TRUE(c->ObserveBackward(k, &r, 1).ok());
      }
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

class ClientBackwardTest : public testing::DaemonTest {};

TEST_F(ClientBackwardTest, QuantizedGradientsAdmitTheRootOverGrpcAndLocallyAlike) {
  StartDaemon();
  const std::string target = "unix:" + socket_path_;
  StepsSeen daemon_runs[2];
  for (const bool backward : {false, true}) {
    Tensors t;
    UnitHandle q = 0, k = 0;
    const std::string job = backward ? "bwd-on" : "bwd-off";
    std::unique_ptr<Client> c = testing::MakeQkClient(target, job, t.grad_q, t.grad_k, &q, &k);
    ASSERT_NE(c, nullptr);
    ASSERT_EQ(c->WaitConnected(std::chrono::seconds(5)).code(), StatusCode::kOk);
    daemon_runs[backward] = Drive(c.get(), q, k, &t, backward);
    EXPECT_EQ(c->Counters().missed_decisions, 0u);
    const std::vector<v1::Event> admissions = listener_.EventsOf(job, "admission");
    ASSERT_EQ(admissions.size(), 1u) << job;
    EXPECT_EQ(admissions[0].observed_step(), kFault);
    EXPECT_EQ(admissions[0].unit(), backward ? "attn.k" : "attn.q");
    EXPECT_EQ(admissions[0].trigger(), backward ? v1::TRIGGER_BACKWARD : v1::TRIGGER_GNMR);
  }
  EXPECT_EQ(daemon_runs[0].in_force[kFault + 1], "q,");
  EXPECT_EQ(daemon_runs[1].in_force[kFault + 1], "k,");

  EnableLocalTarget();
  for (const bool backward : {false, true}) {
    Tensors t;
    UnitHandle q = 0, k = 0;
    std::unique_ptr<Client> c =
        testing::MakeQkClient("local", backward ? "bwd-on" : "bwd-off", t.grad_q, t.grad_k, &q, &k);
    ASSERT_NE(c, nullptr);
    const StepsSeen local = Drive(c.get(), q, k, &t, backward);
    EXPECT_EQ(local.digests, daemon_runs[backward].digests) << "backward " << backward;
    EXPECT_EQ(local.in_force, daemon_runs[backward].in_force) << "backward " << backward;
  }
}

TEST(ClientBackward, MisuseIsRefusedWithTheReason) {
  ClientOptions o;
  o.target = "unix:/tmp/gnmr_backward_no_daemon_" + std::to_string(getpid()) + ".sock";
  o.job_id = "bwd-misuse";
  auto made = Client::Create(o);
  ASSERT_TRUE(made.ok());
  std::unique_ptr<Client> c = std::move(made).value();
  std::vector<float> g(16, 1.f), b(16, 1.f);
  TensorRef gr;
  gr.data = g.data();
  gr.numel = g.size();
  TensorRef br = gr;
  br.data = b.data();
  const UnitHandle u = *c->AddUnit("u", {gr});
  EXPECT_EQ(c->ObserveBackward(u, &br, 1).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(c->Start().ok());
  EXPECT_TRUE(c->ObserveBackward(u, &br, 1).ok());
  EXPECT_TRUE(c->ObserveBackward(u, nullptr, 0).ok());  // nothing: no row
  EXPECT_EQ(c->ObserveBackward(7, &br, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->ObserveBackward(u, nullptr, 2).code(), StatusCode::kInvalidArgument);
  TensorRef device = br;
  device.device = 0;
  const Status d = c->ObserveBackward(u, &device, 1);
  EXPECT_EQ(d.code(), StatusCode::kUnimplemented);
  EXPECT_NE(d.message().find("host memory only"), std::string::npos) << d.message();
  TensorRef negative = br;
  negative.saturation_magnitude = -1.f;
  const Status n = c->ObserveBackward(u, &negative, 1);
  EXPECT_EQ(n.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(n.message().find("ObserveBackward: unit u"), std::string::npos) << n.message();
  EXPECT_TRUE(c->Observe(0).ok());

  // The C API: null checks, a device tensor, and a good call.
  gnmr_tensor t = {b.data(), b.size(), GNMR_DTYPE_FP32, GNMR_LOCATION_HOST, 0.0f, nullptr};
  EXPECT_EQ(gnmr_observe_backward(nullptr, 0, &t, nullptr, 1), GNMR_EINVALID_ARGUMENT);
  EXPECT_EQ(gnmr_observe_backward_blocks(nullptr, 0, nullptr, 0), GNMR_EINVALID_ARGUMENT);
}

TEST(ClientBackward, TheCApiObservesQuantizedGradients) {
  gnmr_options co;
  gnmr_options_init(&co);
  co.target = "local";
  co.job_id = "bwd-c";
  EnableLocalTarget();
  gnmr_client* cc = nullptr;
  ASSERT_EQ(gnmr_client_create(&co, &cc), GNMR_OK) << gnmr_last_error();
  std::vector<float> g(16, 1.f), b(16, 1.f);
  gnmr_tensor t = {g.data(), g.size(), GNMR_DTYPE_FP32, GNMR_LOCATION_HOST, 0.0f, nullptr};
  gnmr_tensor bt = {b.data(), b.size(), GNMR_DTYPE_FP32, GNMR_LOCATION_HOST, 0.0f, nullptr};
  uint32_t h = 0;
  ASSERT_EQ(gnmr_add_unit(cc, "u", &t, 1, 0, 1, &h), GNMR_OK);
  ASSERT_EQ(gnmr_start(cc), GNMR_OK);
  const float sat = -2.f;  // refused: the magnitude reached the statistics
  EXPECT_EQ(gnmr_observe_backward(cc, h, &bt, &sat, 1), GNMR_EINVALID_ARGUMENT);
  EXPECT_EQ(gnmr_observe_backward(cc, h, nullptr, nullptr, 1), GNMR_EINVALID_ARGUMENT);
  gnmr_tensor device = bt;
  device.location = GNMR_LOCATION_HOST + 1;
  EXPECT_EQ(gnmr_observe_backward(cc, h, &device, nullptr, 1), GNMR_EUNIMPLEMENTED);
  gnmr_block_tensor wrong = {};
  wrong.format = 99;
  EXPECT_EQ(gnmr_observe_backward_blocks(cc, h, &wrong, 1), GNMR_EINVALID_ARGUMENT);
  EXPECT_NE(std::string(gnmr_last_error()).find("format 99"), std::string::npos);
  EXPECT_EQ(gnmr_observe_backward(cc, h, &bt, nullptr, 1), GNMR_OK) << gnmr_last_error();
  EXPECT_EQ(gnmr_observe(cc, 0), GNMR_OK);
  gnmr_client_destroy(cc);
}

}  // namespace
}  // namespace gnmr
