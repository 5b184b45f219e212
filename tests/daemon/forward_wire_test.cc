// The forward channel over real gRPC: forward columns of StepStats reach
// the controller (docs/controller.md, "Forward channel"), and a report
// whose forward columns are inconsistent is refused with a precise status.
#include <functional>
#include <string>

#include "controller/types/config_codec.h"
#include "tests/daemon/test_daemon.h"
#include "tests/testing/eventually.h"

namespace gnmr::testing {
namespace {

// Gradient sumsq per unit and, per unit, (fwd_sumsq, fwd_saturated) of a
// 1000-element forward tensor.
v1::ClientMessage StatsWithForward(int64_t step, const std::vector<uint32_t>& ids,
                                   const std::vector<double>& sumsq,
                                   const std::vector<std::pair<double, uint64_t>>& fwd) {
  v1::ClientMessage m;
  v1::StepStats* s = m.mutable_stats();
  s->set_step(step);
  for (size_t i = 0; i < ids.size(); ++i) {
    s->add_unit_id(ids[i]);
    s->add_sumsq(sumsq[i]);
    s->add_fwd_sumsq(fwd[i].first);
    s->add_fwd_amax(1.0);
    s->add_fwd_saturated(fwd[i].second);
    s->add_fwd_zeros(0);
    s->add_fwd_numel(1000);
  }
  return m;
}

TEST_F(DaemonTest, ForwardColumnsReachTheControllerAndTheRootIsAdmittedFirst) {
  StartDaemon();
  RawRank r(Tcp(), "fwd", 0, 1);
  v1::ControllerConfig config;
  ControllerConfig c;
  c.warmup = 3;
  c.max_o = 1;
  ConfigToProto(c, &config);
  v1::RegisterResponse resp;
  ASSERT_TRUE(r.Register({{"attn.q"}, {"attn.k"}}, &resp, &config).ok());
  const std::vector<uint32_t> ids(resp.unit_ids().begin(), resp.unit_ids().end());
  r.Open();
  v1::Decision d;
  for (int64_t t = 0; t < 3; ++t) {
    ASSERT_TRUE(r.Send(StatsWithForward(t, ids, {1.0, 1.0}, {{4.0, 1}, {4.0, 1}})));
    ASSERT_TRUE(r.WaitDecision(t, &d));
  }
  // q's gradient spikes far more (coupled), k's quantizer saturates (the
  // root): with max_o 1, k is admitted.
  ASSERT_TRUE(r.Send(StatsWithForward(3, ids, {400.0, 1.5}, {{4.0, 1}, {4.0, 300}})));
  ASSERT_TRUE(r.WaitDecision(3, &d));
  ASSERT_EQ(d.admitted_size(), 1);
  EXPECT_EQ(d.admitted(0), ids[1]);

  // The job's events carry the forward channel's figures: k's admission
  // shows why saturation fired (S = 0.3 / 0.001 = 300; F = 2 / 2 = 1 with
  // fwd_sumsq 4; no zeros: U = 0), q's denial (gnmr) the figures of its
  // calm forward pass.
  ASSERT_TRUE(Eventually([&] { return listener_.EventsOf("fwd", "denial").size() == 1; }));
  const std::vector<v1::Event> admissions = listener_.EventsOf("fwd", "admission");
  ASSERT_EQ(admissions.size(), 1u);
  const v1::Event& a = admissions[0];
  EXPECT_EQ(a.unit(), "attn.k");
  EXPECT_EQ(a.trigger(), v1::TRIGGER_SATURATION);
  EXPECT_NEAR(a.saturation_ratio(), 300.0, 1e-9);
  EXPECT_DOUBLE_EQ(a.fwd_ratio(), 1.0);
  EXPECT_EQ(a.underflow_ratio(), 0.0);
  const v1::Event denial = listener_.EventsOf("fwd", "denial")[0];
  EXPECT_EQ(denial.unit(), "attn.q");
  EXPECT_EQ(denial.trigger(), v1::TRIGGER_GNMR);
  EXPECT_DOUBLE_EQ(denial.fwd_ratio(), 1.0);
  EXPECT_DOUBLE_EQ(denial.saturation_ratio(), 1.0);
}

TEST_F(DaemonTest, InconsistentForwardColumnsAreRefusedWithTheReason) {
  StartDaemon();
  RawRank r(Tcp(), "fwd", 0, 1);
  v1::RegisterResponse resp;
  ASSERT_TRUE(r.Register({{"a"}, {"b"}}, &resp).ok());
  const std::vector<uint32_t> ids(resp.unit_ids().begin(), resp.unit_ids().end());
  r.Open();
  v1::ClientMessage m = StatsWithForward(0, ids, {1.0, 1.0}, {{4.0, 1}, {4.0, 1}});
  m.mutable_stats()->set_fwd_saturated(1, 1001);  // more than its 1000 elements
  ASSERT_TRUE(r.Send(m));
  const grpc::Status s = r.WaitEnd();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("forward statistics are inconsistent"), std::string::npos)
      << s.error_message();
}

TEST_F(DaemonTest, InconsistentBlockColumnsAreRefusedWithTheReason) {
  StartDaemon();
  struct Case {
    const char* name;
    std::function<void(v1::StepStats*)> spoil;
    const char* reason;
  };
  const Case cases[] = {
      {"more saturated blocks than blocks",
       [](v1::StepStats* s) { s->set_fwd_saturated_blocks(1, 33); },
       "block figures are inconsistent"},
      {"more blocks than elements", [](v1::StepStats* s) { s->set_fwd_blocks(0, 1001); },
       "block figures are inconsistent"},
      {"a block column short", [](v1::StepStats* s) { s->mutable_fwd_dead_blocks()->RemoveLast(); },
       "block columns must all be empty or have the forward columns' length"},
  };
  uint32_t rank = 0;
  for (const Case& c : cases) {
    RawRank r(Tcp(), "blocks", rank++, 3);
    v1::RegisterResponse resp;
    ASSERT_TRUE(r.Register({{"a"}, {"b"}}, &resp).ok());
    const std::vector<uint32_t> ids(resp.unit_ids().begin(), resp.unit_ids().end());
    r.Open();
    v1::ClientMessage m = StatsWithForward(0, ids, {1.0, 1.0}, {{4.0, 1}, {4.0, 1}});
    for (int i = 0; i < 2; ++i) {  // 1000 elements in 32 blocks, consistent
      m.mutable_stats()->add_fwd_blocks(32);
      m.mutable_stats()->add_fwd_saturated_blocks(1);
      m.mutable_stats()->add_fwd_dead_blocks(0);
      m.mutable_stats()->add_fwd_scale_clamps(0);
    }
    c.spoil(m.mutable_stats());
    ASSERT_TRUE(r.Send(m)) << c.name;
    const grpc::Status s = r.WaitEnd();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.name;
    EXPECT_NE(s.error_message().find(c.reason), std::string::npos)
        << c.name << ": " << s.error_message();
  }
}

}  // namespace
}  // namespace gnmr::testing
