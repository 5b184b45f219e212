// Block-scaled forward tensors through the client library
// (Client::ObserveForwardBlocks, gnmr_observe_forward_blocks) to the
// controller's forward channel and the job's trace (docs/statistics.md,
// "Block columns"): the real gnmrd over a Unix socket, with --trace-dir,
// and target "local", which must decide identically.
//
// The scenario of client_forward_test.cc in MXFP8: k's quantized input is
// e4m3 codes with one E8M0 scale per 32 elements. In a normal step one code
// of the tensor sits at the format's maximum; at the fault 300 do, in 10
// of its 32 blocks, while backpropagation raises q's gradient far more than
// k's. With max_o 1 the saturation rule admits k, the root.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "controller/replay/trace_reader.h"
#include "controller/types/config_codec.h"
#include "daemon/store/trace_recorder.h"
#include "gnmr/client.h"
#include "gnmr/client_local.h"
#include "gnmr/gnmr_c.h"
#include "kernels/block_stats.h"
#include "tests/client/qk_client.h"
#include "tests/daemon/gnmrd_process.h"
#include "tests/daemon/test_daemon.h"
#include "tests/testing/eventually.h"

namespace gnmr {
namespace {

constexpr int64_t kSteps = 12;
constexpr int64_t kFault = 8;  // after warmup (5)
constexpr uint64_t kRows = 8, kCols = 128;
constexpr uint8_t kE4m3Max = 0x7E;  // 448
constexpr uint8_t kScaleOne = 127;  // E8M0 2^0

// One rank's tensors at a step: gradients of q and k, and k's forward
// tensor as MXFP8 (e4m3) codes with their compact [8, 4] E8M0 scales.
struct Tensors {
  std::vector<float> grad_q = std::vector<float>(256);
  std::vector<float> grad_k = std::vector<float>(256);
  std::vector<uint8_t> codes = std::vector<uint8_t>(kRows * kCols);
  std::vector<uint8_t> scales = std::vector<uint8_t>(kRows * kCols / 32, kScaleOne);
  void Fill(int64_t step) {
    for (size_t i = 0; i < grad_q.size(); ++i) {
      grad_q[i] = 0.01f * static_cast<float>((i * 7 + step * 13) % 19 + 1);
      grad_k[i] = 0.01f * static_cast<float>((i * 3 + step * 5) % 17 + 1);
    }
    for (size_t i = 0; i < codes.size(); ++i) {  // finite, below the maximum
      codes[i] = static_cast<uint8_t>(0x30 + (i * 11 + static_cast<size_t>(step) * 3) % 64);
    }
    codes[static_cast<size_t>(step) % codes.size()] = kE4m3Max;
    scales[3] = 0x00;  // one block's scale at the bottom of E8M0's range: a clamp
    if (step == kFault) {
      for (float& g : grad_q) g *= 20.f;  // coupled: the largest gradient spike
      for (float& g : grad_k) g *= 1.5f;
      for (size_t i = 0; i < 300; ++i) codes[i] = kE4m3Max;  // blocks 0-9
    }
    for (size_t i = 640; i < 672; ++i) codes[i] = 0;  // block 20: all zero (dead)
  }
  BlockTensorRef Ref() const {
    BlockTensorRef r;
    r.format = BlockFormat::kMxfp8E4M3;
    r.data = codes.data();
    r.rows = kRows;
    r.cols = kCols;
    r.scales = scales.data();
    r.scale_rows = kRows;
    r.scale_cols = kCols / 32;
    return r;
  }
};

TensorRef Ref(const std::vector<float>& v) {
  TensorRef t;
  t.data = v.data();
  t.numel = v.size();
  return t;
}

struct Seen {
  std::vector<uint64_t> digests;  // per step
  std::vector<UnitHandle> admitted_at_fault;
};

// Drives one client through the steps, k's forward tensor in two calls
// (two micro-batches of the same codes: the figures add up).
Seen Drive(Client* c, UnitHandle k, Tensors* t) {
  Seen run;
  for (int64_t step = 0; step < kSteps; ++step) {
    t->Fill(step);
    const BlockTensorRef b = t->Ref();
    EXPECT_TRUE(c->ObserveForwardBlocks(k, &b, 1).ok());
    EXPECT_TRUE(c->ObserveForwardBlocks(k, &b, 1).ok());
    EXPECT_TRUE(c->Observe(step).ok());
    const Plan p = c->PlanFor(step);
    EXPECT_TRUE(c->Ack(p).ok());
    run.digests.push_back(p.digest);
    if (step == kFault + 1) {
      for (const PlanEntry& e : p.entries) run.admitted_at_fault.push_back(e.unit);
    }
  }
  EXPECT_EQ(c->Counters().missed_decisions, 0u);
  return run;
}

std::unique_ptr<Client> Make(const std::string& target, Tensors* t, UnitHandle* q, UnitHandle* k) {
  return testing::MakeQkClient(target, "blocks", t->grad_q, t->grad_k, q, k);
}

TEST(ClientForwardBlocks, BlockTensorsAdmitTheRootAndTheTraceKeepsTheirBlockFigures) {
  testing::GnmrdProcess gnmrd;
  const std::string traces = gnmrd.dir() + "/traces";
  ASSERT_TRUE(gnmrd.Start({"--trace-dir", traces}));
  Tensors t;
  UnitHandle q = 0, k = 0;
  std::unique_ptr<Client> c = Make(gnmrd.target(), &t, &q, &k);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->WaitConnected(std::chrono::seconds(5)).code(), StatusCode::kOk);
  const Seen live = Drive(c.get(), k, &t);
  EXPECT_EQ(live.admitted_at_fault, std::vector<UnitHandle>{k});
  // The last step's decision (lag 1: no plan waited for it) is recorded
  // once made.
  EXPECT_TRUE(testing::Eventually([&] { return c->Counters().last_decided_step == kSteps - 1; }));
  c.reset();
  EXPECT_EQ(gnmrd.Kill(SIGTERM), 0) << gnmrd.log();

  // The trace: k's rows carry the figures of its two calls, summed, as
  // ComputeBlockStats gives them for one call; q's rows carry none.
  TraceReader reader;
  ASSERT_TRUE(reader.OpenFile(store::TraceRecorder::TracePath(traces, "blocks")).ok());
  TraceStep step;
  int64_t rows_of_k = 0;
  for (bool got = true;;) {
    ASSERT_TRUE(reader.Next(&step, &got).ok());
    if (!got) break;
    t.Fill(step.step);
    const BlockTensorRef b = t.Ref();
    BlockStats want;
    ASSERT_TRUE(cpu::ComputeBlockStats(&b, 1, &want).ok());
    for (const UnitSample& s : step.samples) {
      if (reader.unit_name(s.unit_id) != "attn.k") {
        EXPECT_EQ(s.fwd_numel, 0u);
        EXPECT_EQ(s.fwd_blocks, 0u);
        continue;
      }
      ++rows_of_k;
      EXPECT_EQ(s.fwd_numel, 2 * want.numel);
      EXPECT_EQ(s.fwd_saturated, 2 * want.saturated);
      EXPECT_EQ(s.fwd_zeros, 2 * want.zero_codes);
      EXPECT_DOUBLE_EQ(s.fwd_sumsq, want.sumsq + want.sumsq);
      EXPECT_EQ(s.fwd_blocks, 2u * 32u);
      EXPECT_EQ(s.fwd_saturated_blocks, 2 * want.saturated_blocks);
      EXPECT_EQ(s.fwd_dead_blocks, 2u);   // block 20, twice
      EXPECT_EQ(s.fwd_scale_clamps, 2u);  // block 3's 0x00, twice
      if (step.step == kFault) {
        EXPECT_EQ(s.fwd_saturated_blocks, 2u * 10u);
      }
    }
  }
  EXPECT_EQ(rows_of_k, kSteps);

  // The local target decides the same from the same statistics.
  EnableLocalTarget();
  Tensors lt;
  std::unique_ptr<Client> local = Make("local", &lt, &q, &k);
  ASSERT_NE(local, nullptr);
  EXPECT_EQ(Drive(local.get(), k, &lt).digests, live.digests);
}

TEST(ClientForwardBlocks, MisuseIsRefusedWithTheReasonAndAddsNothing) {
  EnableLocalTarget();
  ClientOptions o;
  o.target = "local";
  o.job_id = "blocks-misuse";
  std::unique_ptr<Client> c = std::move(Client::Create(o)).value();
  Tensors t;
  t.Fill(0);
  const UnitHandle u = *c->AddUnit("u", {Ref(t.grad_q)});
  const BlockTensorRef good = t.Ref();
  EXPECT_EQ(c->ObserveForwardBlocks(u, &good, 1).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(c->Start().ok());
  EXPECT_EQ(c->ObserveForwardBlocks(7, &good, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->ObserveForwardBlocks(u, nullptr, 1).code(), StatusCode::kInvalidArgument);
  BlockTensorRef device = good;
  device.device = 0;
  const Status d = c->ObserveForwardBlocks(u, &device, 1);
  EXPECT_EQ(d.code(), StatusCode::kUnimplemented);
  EXPECT_NE(d.message().find("host memory only"), std::string::npos) << d.message();
  BlockTensorRef short_scales = good;
  short_scales.scale_cols = 3;  // the grid has 4 blocks across
  const Status s = c->ObserveForwardBlocks(u, &short_scales, 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unit u"), std::string::npos) << s.message();
  BlockTensorRef odd = good;
  odd.format = BlockFormat::kMxfp4;  // E2M1: two codes per byte
  odd.cols = 127;
  odd.rows = 1;
  EXPECT_EQ(c->ObserveForwardBlocks(u, &odd, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(c->Observe(0).ok());  // nothing was added: no forward row
  EXPECT_EQ(c->Counters().last_error, "");

  // The C API: null checks, values outside the enums refused before any
  // cast, and a good tensor accepted.
  gnmr_options co;
  gnmr_options_init(&co);
  co.target = "local";
  co.job_id = "blocks-c";
  gnmr_client* cc = nullptr;
  ASSERT_EQ(gnmr_client_create(&co, &cc), GNMR_OK) << gnmr_last_error();
  gnmr_tensor g = {t.grad_q.data(), t.grad_q.size(), GNMR_DTYPE_FP32, GNMR_LOCATION_HOST, 0.0f,
                   nullptr};
  uint32_t h = 0;
  ASSERT_EQ(gnmr_add_unit(cc, "u", &g, 1, 0, 1, &h), GNMR_OK);
  ASSERT_EQ(gnmr_start(cc), GNMR_OK);
  gnmr_block_tensor bt = {};
  bt.format = GNMR_BLOCK_MXFP8_E4M3;
  bt.data = t.codes.data();
  bt.rows = kRows;
  bt.cols = kCols;
  bt.scales = t.scales.data();
  bt.scale_rows = kRows;
  bt.scale_cols = kCols / 32;
  EXPECT_EQ(gnmr_observe_forward_blocks(nullptr, h, &bt, 1), GNMR_EINVALID_ARGUMENT);
  EXPECT_EQ(gnmr_observe_forward_blocks(cc, h, nullptr, 1), GNMR_EINVALID_ARGUMENT);
  gnmr_block_tensor wrapped = bt;
  wrapped.format = 256 + GNMR_BLOCK_MXFP8_E4M3;  // would fold onto a format as a uint8_t
  EXPECT_EQ(gnmr_observe_forward_blocks(cc, h, &wrapped, 1), GNMR_EINVALID_ARGUMENT);
  EXPECT_NE(std::string(gnmr_last_error()).find("format 257"), std::string::npos);
  EXPECT_EQ(gnmr_observe_forward_blocks(cc, h, &bt, 1), GNMR_OK) << gnmr_last_error();
  EXPECT_EQ(gnmr_observe(cc, 0), GNMR_OK);
  gnmr_client_destroy(cc);
}

}  // namespace
}  // namespace gnmr
