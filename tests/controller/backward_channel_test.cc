// The backward channel (docs/controller.md, "Backward channel"): the
// forward channel's element rules on the gradient as the unit's backward
// quantizer stored it, with their own history; a sample without backward
// figures decides as before; attribution finds the root of a backward fault
// (the first unit backward reached) among the units upstream of it whose
// gradients it raised; the state carries the history.
#include <cmath>
#include <vector>

#include "controller/state_codec.h"
#include "controller/types/config_codec.h"
#include "tests/controller/controller_test_util.h"

namespace gnmr::testing {
namespace {

constexpr uint64_t kNumel = 1000;

ControllerConfig BackwardConfig() {
  ControllerConfig c = WorkedExampleConfig();
  c.max_o = 3;
  c.lag = 0;
  c.tau_backward = 4.0;
  c.tau_saturation = 8.0;
  c.underflow_fraction = 0.25;
  return c;
}

// Gradient norm `grad_norm`; a quantized gradient of norm `bwd_norm` over
// kNumel elements (one saturated, 200 zeros), first backward call at
// position `order`.
UnitSample Bwd(uint32_t unit, double bwd_norm, uint64_t order, double grad_norm = 1.0) {
  UnitSample s = Norm(unit, grad_norm);
  s.bwd_sumsq = bwd_norm * bwd_norm;
  s.bwd_saturated = 1;
  s.bwd_zeros = 200;
  s.bwd_numel = kNumel;
  s.bwd_order = order;
  return s;
}

// A chain 0 -> 1 -> 2 -> 3 in the forward pass: backward reaches 3 first.
uint64_t BackwardPosition(uint32_t unit) { return 4 - unit; }

int64_t WarmUp(Controller& c, uint32_t units) {
  for (int64_t t = 0; t < 3; ++t) {
    std::vector<UnitSample> v;
    for (uint32_t u = 0; u < units; ++u) v.push_back(Bwd(u, 2.0, BackwardPosition(u)));
    Step(c, t, v);
  }
  return 3;
}

TEST(BackwardChannel, TheNormRuleTriggersAndEntersItsMeanClamped) {
  Controller c = MakeController(BackwardConfig(), 1);
  int64_t t = WarmUp(c, 1);
  EXPECT_EQ(c.unit(0).bwd_valid_samples, 3);
  EXPECT_TRUE(Step(c, t++, {Bwd(0, 7.9, 1)}).admitted.empty());  // 3.95 < 4
  const double mu = c.unit(0).bwd_mu;
  const Decision d = Step(c, t++, {Bwd(0, 100.0 * mu, 1)});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kBackward);
  EXPECT_NEAR(d.admitted[0].forward.bwd_ratio, 100.0, 1e-9);  // B, in the events
  EXPECT_EQ(d.admitted[0].forward.fwd_ratio, 0.0);            // no forward figures
  EXPECT_EQ(ReasonOf(d.admitted[0]).forward.bwd_ratio, 0.0);  // not in the plans' reason
  EXPECT_EQ(c.stats().backward_samples, 5u);
  // The x100 sample entered clamped at tau_backward x the mean.
  EXPECT_DOUBLE_EQ(c.unit(0).bwd_mu, 0.5 * mu + 0.5 * 4.0 * mu);
  EXPECT_NEAR(c.unit(0).last_backward, 100.0, 1e-9);
}

TEST(BackwardChannel, SaturationAndUnderflowTriggerAsTheirForwardForms) {
  Controller c = MakeController(BackwardConfig(), 2);
  const int64_t t = WarmUp(c, 2);
  UnitSample saturated = Bwd(0, 2.0, 2);
  saturated.bwd_saturated = 10;  // 10 / max(1/1000, 1/1000) >= 8
  UnitSample flushed = Bwd(1, 2.0, 1);
  flushed.bwd_zeros = 500;  // of the 80% usually non-zero, 37.5% flushed
  const Decision d = Step(c, t, {saturated, flushed});
  ASSERT_EQ(d.admitted.size(), 2u);
  for (const Admission& a : d.admitted) {
    EXPECT_EQ(a.trigger,
              a.unit_id == 0 ? Trigger::kBackwardSaturation : Trigger::kBackwardUnderflow);
  }
}

TEST(BackwardChannel, WithoutBackwardFiguresItDecidesAsBefore) {
  // The same gradient spikes with and without a quiet backward channel:
  // the same decisions, and no backward sample counted without one.
  Controller plain = MakeController(BackwardConfig(), 2);
  Controller quiet = MakeController(BackwardConfig(), 2);
  for (int64_t t = 0; t < 12; ++t) {
    const double g = t == 5 || t == 9 ? 40.0 : 1.0;
    const std::vector<UnitSample> a = {Norm(0, g), Norm(1, 1.0)};
    const std::vector<UnitSample> b = {Bwd(0, 2.0, 2, g), Bwd(1, 2.0, 1)};
    EXPECT_EQ(DiffDecisions(Step(plain, t, a), Step(quiet, t, b)), "") << "step " << t;
  }
  EXPECT_EQ(plain.stats().backward_samples, 0u);
  EXPECT_EQ(quiet.stats().backward_samples, 24u);
}

TEST(BackwardChannel, ABackwardTriggerRanksAboveTheGradientRules) {
  ControllerConfig cfg = BackwardConfig();
  cfg.max_o = 1;
  Controller c = MakeController(cfg, 2);
  const int64_t t = WarmUp(c, 2);
  // Unit 0's gradient is far above its mean; unit 1's quantized gradient
  // only just passes its threshold.
  const Decision d = Step(c, t, {Bwd(0, 2.0, 2, 100.0), Bwd(1, 9.0, 1)});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].unit_id, 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kBackward);
}

TEST(BackwardChannel, BothChannelsFiredTheRuleOfHigherRiskNamesIt) {
  ControllerConfig cfg = BackwardConfig();
  cfg.tau_forward = 4.0;
  Controller c = MakeController(cfg, 2);
  auto both = [](uint32_t unit, double fwd_norm, double bwd_norm) {
    UnitSample s = Bwd(unit, bwd_norm, 2 - unit);
    s.fwd_sumsq = fwd_norm * fwd_norm;
    s.fwd_numel = kNumel;
    s.fwd_saturated = 1;
    s.fwd_zeros = 200;
    return s;
  };
  int64_t t = 0;
  for (; t < 3; ++t) Step(c, t, {both(0, 2.0, 2.0), both(1, 2.0, 2.0)});
  const Decision d = Step(c, t, {both(0, 20.0, 80.0), both(1, 80.0, 20.0)});
  ASSERT_EQ(d.admitted.size(), 2u);
  for (const Admission& a : d.admitted) {
    EXPECT_EQ(a.trigger, a.unit_id == 0 ? Trigger::kBackward : Trigger::kForward);
  }
}

// The step of the fault below: unit 0's figures are the highest (upstream
// of the root, the most coupled).
std::vector<UnitSample> ChainFault() {
  return {Bwd(0, 64.0, BackwardPosition(0), 20.0), Bwd(1, 40.0, BackwardPosition(1), 16.0),
          Bwd(2, 32.0, BackwardPosition(2), 16.0), Bwd(3, 2.0, BackwardPosition(3))};
}

// The evaluation's gradient-quantizer fault: unit 2's backward quantizer
// scales its gradient x16, so 2 and every unit upstream (1, 0: backward
// reaches them after 2) see x16 quantized gradients and gradients; 3 does
// not. With upstream attribution the root is the one backward reached
// first.
TEST(BackwardChannel, UpstreamAttributionAdmitsTheFirstUnitBackwardReached) {
  ControllerConfig cfg = BackwardConfig();
  cfg.attribution = Attribution::kUpstream;
  cfg.denied = DeniedTreatment::kClip;
  Controller c = MakeController(cfg, 4);
  const int64_t t = WarmUp(c, 4);
  const Decision d = Step(c, t, ChainFault());
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].unit_id, 2u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kBackward);
  ASSERT_EQ(d.denied.size(), 2u);
  for (const Denial& n : d.denied) {
    EXPECT_TRUE(n.unit_id == 0u || n.unit_id == 1u) << n.unit_id;
    EXPECT_TRUE(n.coupled);
    EXPECT_TRUE(n.clipped);
  }
  // Without attribution the budget goes by risk: the root is not first.
  ControllerConfig ranked = cfg;
  ranked.attribution = Attribution::kRank;
  ranked.denied = DeniedTreatment::kNone;
  ranked.max_o = 1;
  Controller r = MakeController(ranked, 4);
  const int64_t u = WarmUp(r, 4);
  const Decision e = Step(r, u, ChainFault());
  ASSERT_EQ(e.admitted.size(), 1u);
  EXPECT_EQ(e.admitted[0].unit_id, 0u);
}

TEST(BackwardChannel, ALaterPipelineStageRunsBackwardFirst) {
  EXPECT_LT(BackwardOrderKey(1, 7), BackwardOrderKey(0, 1));
  EXPECT_LT(BackwardOrderKey(0, 1), BackwardOrderKey(0, 2));
  EXPECT_EQ(BackwardOrderKey(3, 0), 0u);  // unknown stays unknown
  ControllerConfig cfg = BackwardConfig();
  cfg.attribution = Attribution::kUpstream;
  Controller c = MakeController(cfg, 2);
  int64_t t = 0;
  for (; t < 3; ++t) {
    Step(c, t, {Bwd(0, 2.0, BackwardOrderKey(0, 1)), Bwd(1, 2.0, BackwardOrderKey(1, 5))});
  }
  const Decision d =
      Step(c, t, {Bwd(0, 80.0, BackwardOrderKey(0, 1)), Bwd(1, 40.0, BackwardOrderKey(1, 5))});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].unit_id, 1u);
}

TEST(BackwardChannel, InconsistentFiguresAreRefusedAndChangeNothing) {
  Controller c = MakeController(BackwardConfig(), 1);
  UnitSample s = Bwd(0, 2.0, 1);
  s.bwd_zeros = kNumel + 1;
  Decision d;
  EXPECT_EQ(c.Observe(0, &s, 1, &d).code(), StatusCode::kInvalidArgument);
  s = Bwd(0, 2.0, 1);
  s.bwd_sumsq = -1.0;
  EXPECT_EQ(c.Observe(0, &s, 1, &d).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(c.last_step().has_value());
  s = Bwd(0, 2.0, 1);
  s.bwd_sumsq = std::nan("");  // a signal: not evaluated, not an error
  EXPECT_TRUE(c.Observe(0, &s, 1, &d).ok());
  EXPECT_EQ(c.unit(0).bwd_valid_samples, 0);
}

TEST(BackwardChannel, StateRoundTripsAndContinuesIdentically) {
  Controller a = MakeController(BackwardConfig(), 2);
  int64_t t = WarmUp(a, 2);
  Step(a, t++, {Bwd(0, 30.0, 2), Bwd(1, 2.0, 1)});
  StatusOr<Controller> b =
      ControllerStateCodec::RestoreFromString(ControllerStateCodec::SaveToString(a));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (uint32_t u = 0; u < 2; ++u) {
    EXPECT_EQ(b->unit(u).bwd_valid_samples, a.unit(u).bwd_valid_samples);
    EXPECT_EQ(b->unit(u).bwd_mu, a.unit(u).bwd_mu);
    EXPECT_EQ(b->unit(u).bwd_saturation_mu, a.unit(u).bwd_saturation_mu);
    EXPECT_EQ(b->unit(u).bwd_zeros_mu, a.unit(u).bwd_zeros_mu);
  }
  EXPECT_EQ(b->stats().backward_samples, a.stats().backward_samples);
  EXPECT_EQ(b->stats().admissions_by_trigger[static_cast<int>(Trigger::kBackward)], 1u);
  for (int k = 0; k < 8; ++k, ++t) {
    const std::vector<UnitSample> v = {Bwd(0, 2.0 + 5.0 * k, 2), Bwd(1, 2.0, 1, 1.0 + k)};
    EXPECT_EQ(DiffDecisions(Step(a, t, v), Step(*b, t, v)), "") << "step " << t;
  }
}

TEST(BackwardChannel, ARestoredHistoryOutOfRangeIsRefused) {
  Controller a = MakeController(BackwardConfig(), 1);
  WarmUp(a, 1);
  v1::ControllerState state;
  ControllerStateCodec::Save(a, &state);
  ASSERT_TRUE(ControllerStateCodec::Restore(state).ok());
  state.mutable_units(0)->set_bwd_zeros_mu(1.5);
  EXPECT_FALSE(ControllerStateCodec::Restore(state).ok());
  state.mutable_units(0)->set_bwd_zeros_mu(0.2);
  state.mutable_units(0)->set_bwd_mu(-1.0);
  EXPECT_FALSE(ControllerStateCodec::Restore(state).ok());
}

TEST(BackwardChannel, TheKeyDefaultsForAPeerBeforeItAndRefusesOutOfRange) {
  v1::ControllerConfig wire;
  ConfigToProto(ControllerConfig{}, &wire);
  EXPECT_EQ(wire.tau_backward(), 6.0);
  wire.clear_tau_backward();  // what a peer before the key sends
  StatusOr<ControllerConfig> back = ConfigFromProto(wire);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tau_backward, 6.0);
  ControllerConfig bad;
  bad.tau_backward = 1.0;
  EXPECT_FALSE(bad.Validate().ok());
  bad.tau_backward = std::nan("");
  EXPECT_FALSE(bad.Validate().ok());
}

}  // namespace
}  // namespace gnmr::testing
