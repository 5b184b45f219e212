// The forward channel (docs/controller.md, "Forward channel"): one test per
// rule, the attribution order, and the state that carries it.
#include <cmath>
#include <limits>

#include "controller/state_codec.h"
#include "controller/types/config_codec.h"
#include "tests/controller/controller_test_util.h"

namespace gnmr::testing {
namespace {

ControllerConfig ForwardConfig() {
  ControllerConfig c = WorkedExampleConfig();
  c.max_o = 1;
  c.tau_forward = 4.0;
  c.tau_saturation = 8.0;
  c.underflow_fraction = 0.25;
  return c;
}

constexpr uint64_t kNumel = 1000;

// Gradient norm 1 and a forward tensor of kNumel elements with norm
// `fwd_norm`, `saturated` elements at the maximum and `zeros` zeros.
UnitSample Fwd(uint32_t unit, double fwd_norm, uint64_t saturated = 1, uint64_t zeros = 0,
               double grad_norm = 1.0) {
  UnitSample s = Norm(unit, grad_norm);
  s.fwd_sumsq = fwd_norm * fwd_norm;
  s.fwd_amax = fwd_norm;
  s.fwd_saturated = saturated;
  s.fwd_zeros = zeros;
  s.fwd_numel = kNumel;
  return s;
}

// Warms both channels of `units` units up: gradient norm 1, forward norm
// 2, one element saturated, 500 of 1000 zeros (a ReLU output).
int64_t WarmUp(Controller& c, int units) {
  for (int64_t t = 0; t < 3; ++t) {
    std::vector<UnitSample> v;
    for (int u = 0; u < units; ++u) v.push_back(Fwd(u, 2.0, 1, 500));
    Step(c, t, v);
  }
  return 3;
}

TEST(ForwardChannel, WithoutForwardStatisticsNothingChanges) {
  Controller with = MakeController(ForwardConfig(), 2);
  ControllerConfig off = ForwardConfig();
  Controller without = MakeController(off, 2);
  // Gradient-only samples: the forward history stays empty and the
  // decisions are those of a controller that never heard of it.
  for (int64_t t = 0; t < 12; ++t) {
    const double spike = t == 7 ? 9.0 : 1.0;
    const Decision a = Step(with, t, {Norm(0, spike), Norm(1, 1.0)});
    const Decision b = Step(without, t, {Norm(0, spike), Norm(1, 1.0)});
    EXPECT_EQ(DiffDecisions(a, b), "") << "step " << t;
  }
  EXPECT_EQ(with.unit(0).fwd_valid_samples, 0);
  EXPECT_EQ(with.stats().forward_samples, 0u);
  EXPECT_EQ(with.stats().admissions_by_trigger[static_cast<int>(Trigger::kGnmr)], 1u);
}

TEST(ForwardChannel, WarmupBuildsItsOwnHistoryAndNeverTriggers) {
  Controller c = MakeController(ForwardConfig(), 1);
  Step(c, 0, {Fwd(0, 2.0, 1, 500)});
  Step(c, 1, {Fwd(0, 100.0, 900, 0)});  // would trigger every rule
  const Decision d = Step(c, 2, {Fwd(0, 2.0, 1, 500)});
  EXPECT_TRUE(d.admitted.empty());
  EXPECT_EQ(c.unit(0).fwd_valid_samples, 3);
  EXPECT_DOUBLE_EQ(c.unit(0).fwd_mu, (2.0 + 100.0 + 2.0) / 3.0);
  EXPECT_DOUBLE_EQ(c.unit(0).saturation_mu, (0.001 + 0.9 + 0.001) / 3.0);
  EXPECT_DOUBLE_EQ(c.unit(0).zeros_mu, (0.5 + 0.0 + 0.5) / 3.0);
}

TEST(ForwardChannel, ForwardNormRatioTriggersAndEntersClamped) {
  Controller c = MakeController(ForwardConfig(), 1);
  int64_t t = WarmUp(c, 1);  // fwd_mu = 2
  // 6: ratio 3 < 4, no trigger; fwd_mu = 0.5 * 2 + 0.5 * 6 = 4.
  Decision d = Step(c, t++, {Fwd(0, 6.0, 1, 500)});
  EXPECT_TRUE(d.admitted.empty());
  EXPECT_DOUBLE_EQ(c.unit(0).last_forward, 3.0);
  EXPECT_DOUBLE_EQ(c.unit(0).fwd_mu, 4.0);
  // 40: ratio 10 >= 4 while the gradient is flat; enters as min(40, 4 * 4).
  d = Step(c, t++, {Fwd(0, 40.0, 1, 500)});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kForward);
  EXPECT_DOUBLE_EQ(c.unit(0).fwd_mu, 0.5 * 4.0 + 0.5 * 16.0);
  EXPECT_EQ(c.stats().admissions_by_trigger[static_cast<int>(Trigger::kForward)], 1u);
  EXPECT_EQ(c.stats().forward_samples, 5u);
}

TEST(ForwardChannel, SaturationIsJudgedAgainstItsOwnHistoryWithAOneElementFloor) {
  Controller c = MakeController(ForwardConfig(), 1);
  int64_t t = WarmUp(c, 1);  // saturation_mu = 1 / 1000: one element at the maximum
  // 7 saturated: ratio 7 < 8. A forward norm that dropped (an attenuating
  // fault: values clipped at the format's maximum) triggers no forward-norm rule.
  Decision d = Step(c, t++, {Fwd(0, 1.0, 7, 500)});
  EXPECT_TRUE(d.admitted.empty());
  // Saturation mean now 0.5 * 0.001 + 0.5 * 0.007 = 0.004: 40 elements
  // are 0.04 / 0.004 = 10 >= 8.
  d = Step(c, t++, {Fwd(0, 1.0, 40, 500)});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kSaturation);
  // It entered as min(0.04, 8 * 0.004): the fault did not raise its bar to 0.04.
  EXPECT_DOUBLE_EQ(c.unit(0).saturation_mu, 0.5 * 0.004 + 0.5 * 0.032);

  // A tensor whose history has no saturation at all still needs 8
  // elements (the floor is one element), not one.
  for (const uint64_t saturated : {7, 9}) {
    Controller quiet = MakeController(ForwardConfig(), 1);
    for (int64_t k = 0; k < 3; ++k) Step(quiet, k, {Fwd(0, 2.0, 0, 0)});
    EXPECT_EQ(Step(quiet, 3, {Fwd(0, 2.0, saturated, 0)}).admitted.size(), saturated >= 8 ? 1u : 0u)
        << saturated << " saturated";
  }
}

TEST(ForwardChannel, UnderflowCountsOnlyTheUsuallyNonZeroElements) {
  Controller c = MakeController(ForwardConfig(), 1);
  int64_t t = WarmUp(c, 1);  // zeros_mu = 0.5: a ReLU output
  // 600 zeros: 0.1 / 0.5 = 20% of the usual non-zero half flushed (< 25%).
  EXPECT_TRUE(Step(c, t++, {Fwd(0, 2.0, 1, 600)}).admitted.empty());
  // zeros_mu = 0.55; 800 zeros: (0.8 - 0.55) / 0.45 = 0.556 >= 0.25.
  const Decision d = Step(c, t++, {Fwd(0, 2.0, 1, 800)});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kUnderflow);
  // Entered clamped at 0.55 + 0.25 * 0.45.
  EXPECT_DOUBLE_EQ(c.unit(0).zeros_mu, 0.5 * 0.55 + 0.5 * (0.55 + 0.25 * 0.45));
}

// The figures each rule compared with its threshold travel with the
// admission (and the denial), whichever rule fired, so an operator can see
// why a forward trigger fired (docs/controller.md, "Evidence").
TEST(ForwardChannel, AdmissionsAndDenialsCarryTheForwardFigures) {
  Controller c = MakeController(ForwardConfig(), 3);
  int64_t t = WarmUp(c, 3);  // fwd_mu 2, saturation_mu 0.001, zeros_mu 0.5
  // Unit 0: F = 40 / 2 = 20 >= 4 (forward, risk 5), S = 0.004 / 0.001 =
  // 4 < 8, U = (0.6 - 0.5) / 0.5 = 0.2 < 0.25. Unit 1: underflow, U =
  // (0.9 - 0.5) / 0.5 = 0.8 (risk 3.2), F = 1, S = 1; denied (max_o 1).
  // Unit 2: calm, no candidate.
  const Decision d = Step(c, t++, {Fwd(0, 40.0, 4, 600), Fwd(1, 2.0, 1, 900), Fwd(2, 2.0, 1, 500)});
  ASSERT_EQ(d.admitted.size(), 1u);
  const Admission& a = d.admitted[0];
  EXPECT_EQ(a.unit_id, 0u);
  EXPECT_EQ(a.trigger, Trigger::kForward);
  EXPECT_DOUBLE_EQ(a.forward.fwd_ratio, 20.0);
  EXPECT_DOUBLE_EQ(a.forward.saturation_ratio, 4.0);
  EXPECT_NEAR(a.forward.underflow_ratio, 0.2, 1e-12);
  ASSERT_EQ(d.denied.size(), 1u);
  EXPECT_EQ(d.denied[0].unit_id, 1u);
  EXPECT_EQ(d.denied[0].trigger, Trigger::kUnderflow);
  EXPECT_DOUBLE_EQ(d.denied[0].forward.fwd_ratio, 1.0);
  EXPECT_DOUBLE_EQ(d.denied[0].forward.saturation_ratio, 1.0);
  EXPECT_NEAR(d.denied[0].forward.underflow_ratio, 0.8, 1e-12);

  // A gradient trigger still carries the forward figures of its sample
  // (how close its forward pass came); fewer zeros than usual: U < 0.
  Controller g = MakeController(ForwardConfig(), 1);
  t = WarmUp(g, 1);
  const Decision by_gnmr = Step(g, t, {Fwd(0, 3.0, 2, 400, /*grad_norm=*/50.0)});
  ASSERT_EQ(by_gnmr.admitted.size(), 1u);
  EXPECT_EQ(by_gnmr.admitted[0].trigger, Trigger::kGnmr);
  EXPECT_DOUBLE_EQ(by_gnmr.admitted[0].forward.fwd_ratio, 1.5);
  EXPECT_DOUBLE_EQ(by_gnmr.admitted[0].forward.saturation_ratio, 2.0);
  EXPECT_NEAR(by_gnmr.admitted[0].forward.underflow_ratio, -0.2, 1e-12);
}

TEST(ForwardChannel, TheFiguresAreZeroWithoutForwardStatisticsInWarmupOrWhenNonFinite) {
  const ForwardEvidence none;
  auto is_zero = [&](const ForwardEvidence& f) { return SameForward(f, none); };
  // No forward statistics: a gradient spike.
  Controller plain = MakeController(ForwardConfig(), 1);
  for (int64_t t = 0; t < 3; ++t) Step(plain, t, {Norm(0, 1.0)});
  Decision d = Step(plain, 3, {Norm(0, 50.0)});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_TRUE(is_zero(d.admitted[0].forward));
  // Forward statistics that start after the gradients: the channel's
  // warmup evaluates nothing, so a gradient spike then carries 0.
  Controller late = MakeController(ForwardConfig(), 1);
  for (int64_t t = 0; t < 3; ++t) Step(late, t, {Norm(0, 1.0)});
  d = Step(late, 3, {Fwd(0, 2.0, 1, 500, /*grad_norm=*/50.0)});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kGnmr);
  EXPECT_TRUE(is_zero(d.admitted[0].forward));
  // A non-finite gradient is not evaluated, forward channel included.
  Controller broken = MakeController(ForwardConfig(), 1);
  WarmUp(broken, 1);
  UnitSample bad = NonFinite(0);
  bad.fwd_sumsq = 400.0;
  bad.fwd_numel = kNumel;
  d = Step(broken, 3, {bad});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kNonFinite);
  EXPECT_TRUE(is_zero(d.admitted[0].forward));
}

TEST(ForwardChannel, AForwardTriggerRanksAboveAStrongerGradientOnlyTrigger) {
  // Unit 1's gradient spikes hard (a neighbour coupled to the fault), unit
  // 2's forward channel shows the root; max_o 1 admits the root.
  Controller c = MakeController(ForwardConfig(), 3);
  int64_t t = WarmUp(c, 3);
  const Decision d = Step(c, t,
                          {Fwd(0, 2.0, 1, 500), Fwd(1, 2.0, 1, 500, /*grad_norm=*/50.0),
                           Fwd(2, 2.0, 100, 500, /*grad_norm=*/3.0)});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].unit_id, 2u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kSaturation);
  ASSERT_EQ(d.denied.size(), 1u);
  EXPECT_EQ(d.denied[0].unit_id, 1u);
  EXPECT_EQ(d.denied[0].trigger, Trigger::kGnmr);
  // The risk of a unit is the maximum over its channels: unit 1's GNMR 50
  // / 2.5 = 20.
  EXPECT_DOUBLE_EQ(d.denied[0].risk, 20.0);
}

TEST(ForwardChannel, NonFiniteStillRanksFirst) {
  Controller c = MakeController(ForwardConfig(), 2);
  int64_t t = WarmUp(c, 2);
  UnitSample bad = NonFinite(1);
  const Decision d = Step(c, t, {Fwd(0, 2.0, 500, 500), bad});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].unit_id, 1u);
  EXPECT_TRUE(d.global_skip);
}

// attribution: exclusive (docs/controller.md, "Attribution"): the root's
// step admits no gradient-only neighbour, even with budget to spare.
TEST(ForwardChannel, ExclusiveAttributionKeepsCoupledNeighboursOutOfTheBudget) {
  for (Attribution mode : {Attribution::kRank, Attribution::kExclusive}) {
    SCOPED_TRACE(AttributionName(mode));
    ControllerConfig cfg = ForwardConfig();
    cfg.max_o = 3;
    cfg.attribution = mode;
    Controller c = MakeController(cfg, 3);
    int64_t t = WarmUp(c, 3);
    const Decision d = Step(c, t++,
                            {Fwd(0, 2.0, 1, 500), Fwd(1, 2.0, 1, 500, /*grad_norm=*/50.0),
                             Fwd(2, 2.0, 100, 500, /*grad_norm=*/3.0)});
    ASSERT_GE(d.admitted.size(), 1u);
    EXPECT_EQ(d.admitted[0].unit_id, 2u);
    if (mode == Attribution::kRank) {
      ASSERT_EQ(d.admitted.size(), 2u);  // budget left: the neighbour too
      EXPECT_TRUE(d.denied.empty());
      continue;
    }
    ASSERT_EQ(d.admitted.size(), 1u);
    ASSERT_EQ(d.denied.size(), 1u);
    EXPECT_EQ(d.denied[0].unit_id, 1u);
    EXPECT_TRUE(d.denied[0].coupled);
    EXPECT_FALSE(d.denied[0].clipped);  // denied: none
    EXPECT_EQ(c.stats().denials, 1u);
    // The next step has no forward trigger outside recovery (the root is
    // in it): a gradient-only spike is admitted as under rank.
    const Decision e = Step(c, t++,
                            {Fwd(0, 2.0, 1, 500), Fwd(1, 2.0, 1, 500, /*grad_norm=*/50.0),
                             Fwd(2, 2.0, 100, 500, /*grad_norm=*/3.0)});
    ASSERT_EQ(e.admitted.size(), 1u);
    EXPECT_EQ(e.admitted[0].unit_id, 1u);
    EXPECT_TRUE(e.denied.empty());
  }
}

TEST(ForwardChannel, ExclusiveAttributionClipsCoupledDenialsAndAdmitsNonFinite) {
  ControllerConfig cfg = ForwardConfig();
  cfg.max_o = 3;
  cfg.lag = 0;
  cfg.denied = DeniedTreatment::kClip;
  cfg.attribution = Attribution::kExclusive;
  Controller c = MakeController(cfg, 4);
  const int64_t t = WarmUp(c, 4);
  const Decision d = Step(c, t,
                          {Fwd(0, 2.0, 1, 500), Fwd(1, 2.0, 1, 500, /*grad_norm=*/50.0),
                           Fwd(2, 9.0, 1, 500), NonFinite(3)});
  // Non-finite first, then the forward root; the neighbour is clipped for
  // the observed step and holds no budget.
  ASSERT_EQ(d.admitted.size(), 2u);
  EXPECT_EQ(d.admitted[0].unit_id, 3u);
  EXPECT_EQ(d.admitted[1].unit_id, 2u);
  EXPECT_EQ(d.admitted[1].trigger, Trigger::kForward);
  ASSERT_EQ(d.denied.size(), 1u);
  EXPECT_TRUE(d.denied[0].coupled);
  EXPECT_TRUE(d.denied[0].clipped);
  int clips = 0;
  for (const RecoveryEntry& e : d.recovery) {
    if (!e.denied_clip) continue;
    ++clips;
    EXPECT_EQ(e.unit_id, 1u);
    EXPECT_EQ(e.action, Action::kClip);
    EXPECT_EQ(e.since, t);
    EXPECT_EQ(e.until, t + 1);
  }
  EXPECT_EQ(clips, 1);
  EXPECT_EQ(c.recovery().size(), 2u);
}

TEST(ForwardChannel, AttributionKeyRoundTripsAndAnOlderPeerMeansRank) {
  ControllerConfig cfg = ForwardConfig();
  cfg.attribution = Attribution::kExclusive;
  v1::ControllerConfig wire;
  ConfigToProto(cfg, &wire);
  EXPECT_EQ(wire.attribution(), v1::ATTRIBUTION_EXCLUSIVE);
  StatusOr<ControllerConfig> back = ConfigFromProto(wire);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->attribution, Attribution::kExclusive);
  wire.clear_attribution();
  back = ConfigFromProto(wire);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->attribution, Attribution::kRank);
  wire.set_attribution(static_cast<v1::Attribution>(7));
  back = ConfigFromProto(wire);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("attribution"), std::string::npos)
      << back.status().message();
}

TEST(ForwardChannel, InconsistentForwardStatisticsAreRefusedAndChangeNothing) {
  Controller c = MakeController(ForwardConfig(), 1);
  WarmUp(c, 1);
  Decision d;
  UnitSample s = Fwd(0, 2.0, kNumel + 1, 0);
  EXPECT_EQ(c.Observe(3, {s}, &d).code(), StatusCode::kInvalidArgument);
  s = Fwd(0, 2.0, 1, kNumel + 1);
  EXPECT_EQ(c.Observe(3, {s}, &d).code(), StatusCode::kInvalidArgument);
  s = Fwd(0, 2.0);
  s.fwd_sumsq = -1.0;
  EXPECT_EQ(c.Observe(3, {s}, &d).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.unit(0).fwd_valid_samples, 3);
  EXPECT_EQ(*c.last_step(), 2);
  // A non-finite forward sum is not evaluated (the gradient's own rule
  // sees a NaN forward pass).
  s = Fwd(0, 2.0);
  s.fwd_sumsq = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(Step(c, 3, {s}).admitted.empty());
  EXPECT_EQ(c.unit(0).fwd_valid_samples, 3);
}

TEST(ForwardChannel, StateRoundTripsAndContinuesIdentically) {
  Controller a = MakeController(ForwardConfig(), 2);
  int64_t t = WarmUp(a, 2);
  Step(a, t++, {Fwd(0, 2.0, 100, 500), Fwd(1, 3.0, 1, 700)});
  StatusOr<Controller> b =
      ControllerStateCodec::RestoreFromString(ControllerStateCodec::SaveToString(a));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->unit(1).zeros_mu, a.unit(1).zeros_mu);
  EXPECT_EQ(b->stats().forward_samples, a.stats().forward_samples);
  EXPECT_EQ(b->stats().admissions_by_trigger[static_cast<int>(Trigger::kSaturation)], 1u);
  for (int k = 0; k < 8; ++k, ++t) {
    const std::vector<UnitSample> v = {Fwd(0, 2.0 + k, 1 + k, 500), Fwd(1, 2.0, 1, 500 + 40 * k)};
    EXPECT_EQ(DiffDecisions(Step(a, t, v), Step(*b, t, v)), "") << "step " << t;
  }
}

TEST(ForwardChannel, ConfigFromAPeerBeforeTheForwardKeysTakesTheirDefaults) {
  ControllerConfig c = ForwardConfig();
  v1::ControllerConfig wire;
  ConfigToProto(c, &wire);
  wire.clear_tau_forward();
  wire.clear_tau_saturation();
  wire.clear_underflow_fraction();
  StatusOr<ControllerConfig> read = ConfigFromProto(wire);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->tau_forward, ControllerConfig{}.tau_forward);
  EXPECT_EQ(read->tau_saturation, ControllerConfig{}.tau_saturation);
  EXPECT_EQ(read->underflow_fraction, ControllerConfig{}.underflow_fraction);
  EXPECT_EQ(read->tau, c.tau);
  // Out of range is still refused.
  ControllerConfig bad = c;
  bad.underflow_fraction = 1.5;
  EXPECT_FALSE(bad.Validate().ok());
  bad = c;
  bad.tau_saturation = 1.0;
  EXPECT_FALSE(bad.Validate().ok());
}

}  // namespace
}  // namespace gnmr::testing
