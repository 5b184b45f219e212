// attribution: upstream (docs/controller.md, "Attribution"): when several
// units' forward rules trigger in one step, the one whose forward call came
// first is the root; the others (fed by its output: v into o, fc1 into fc2)
// are coupled, like the gradient-only neighbours under exclusive.
#include <vector>

#include "controller/types/config_codec.h"
#include "tests/controller/controller_test_util.h"

namespace gnmr::testing {
namespace {

constexpr uint64_t kNumel = 1000;

// Gradient norm `grad_norm`, forward norm `fwd_norm` over kNumel elements
// (one saturated, 500 zeros), first forward call at position `order`.
UnitSample Fwd(uint32_t unit, double fwd_norm, uint64_t order, double grad_norm = 1.0) {
  UnitSample s = Norm(unit, grad_norm);
  s.fwd_sumsq = fwd_norm * fwd_norm;
  s.fwd_amax = fwd_norm;
  s.fwd_saturated = 1;
  s.fwd_zeros = 500;
  s.fwd_numel = kNumel;
  s.fwd_order = order;
  return s;
}

ControllerConfig UpstreamConfig() {
  ControllerConfig c = WorkedExampleConfig();
  c.max_o = 3;
  c.lag = 0;
  c.tau_forward = 4.0;
  c.denied = DeniedTreatment::kClip;
  c.attribution = Attribution::kUpstream;
  return c;
}

// Forward order of units 0..3 in the tests: 3 runs first, then 1, 0, 2 (the
// unit ids need not follow the forward pass).
constexpr uint32_t kOrder[] = {3, 2, 4, 1};

int64_t WarmUp(Controller& c) {
  for (int64_t t = 0; t < 3; ++t) {
    std::vector<UnitSample> v;
    for (uint32_t u = 0; u < 4; ++u) v.push_back(Fwd(u, 2.0, kOrder[u]));
    Step(c, t, v);
  }
  return 3;
}

TEST(UpstreamAttribution, TheFirstForwardTriggerIsAdmittedAndItsDownstreamClipped) {
  Controller c = MakeController(UpstreamConfig(), 4);
  int64_t t = WarmUp(c);
  // Units 0 and 2 both see a x20 forward input; 0 ran first (order 3 < 4),
  // though 2's ratio is higher. Unit 1 spikes on its gradient only.
  const Decision d = Step(c, t,
                          {Fwd(0, 40.0, kOrder[0]), Fwd(1, 2.0, kOrder[1], /*grad_norm=*/50.0),
                           Fwd(2, 80.0, kOrder[2]), Fwd(3, 2.0, kOrder[3])});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].unit_id, 0u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kForward);
  ASSERT_EQ(d.denied.size(), 2u);
  for (const Denial& n : d.denied) {
    EXPECT_TRUE(n.unit_id == 1u || n.unit_id == 2u) << n.unit_id;
    EXPECT_TRUE(n.coupled);
    EXPECT_TRUE(n.clipped);
  }
  EXPECT_EQ(c.recovery().size(), 1u);  // clips hold no budget
  // Next step: the root is in recovery, its downstream still triggers (an
  // independent fault, not coupling): now it is the root and admitted.
  const Decision e = Step(c, ++t,
                          {Fwd(0, 2.0, kOrder[0]), Fwd(1, 2.0, kOrder[1]), Fwd(2, 80.0, kOrder[2]),
                           Fwd(3, 2.0, kOrder[3])});
  ASSERT_EQ(e.admitted.size(), 1u);
  EXPECT_EQ(e.admitted[0].unit_id, 2u);
}

TEST(UpstreamAttribution, ExclusiveAdmitsEveryForwardTriggerTheBudgetAllows) {
  ControllerConfig cfg = UpstreamConfig();
  cfg.attribution = Attribution::kExclusive;
  Controller c = MakeController(cfg, 4);
  const int64_t t = WarmUp(c);
  const Decision d = Step(c, t,
                          {Fwd(0, 40.0, kOrder[0]), Fwd(1, 2.0, kOrder[1]), Fwd(2, 80.0, kOrder[2]),
                           Fwd(3, 2.0, kOrder[3])});
  ASSERT_EQ(d.admitted.size(), 2u);
  EXPECT_EQ(d.admitted[0].unit_id, 2u);  // risk order
  EXPECT_EQ(d.admitted[1].unit_id, 0u);
  EXPECT_TRUE(d.denied.empty());
}

// Pipeline stages: the order key compares the stage first, in all 64 bits
// (a key truncated to its low 32 would make stage 1's position 1 the root).
TEST(UpstreamAttribution, AnEarlierStageRunsFirstWhateverItsPosition) {
  Controller c = MakeController(UpstreamConfig(), 4);
  const int64_t t = WarmUp(c);
  const uint64_t stage1_first = ForwardOrderKey(1, 1);
  const uint64_t stage0_fifth = ForwardOrderKey(0, 5);
  const Decision d = Step(c, t,
                          {Fwd(0, 2.0, kOrder[0]), Fwd(1, 80.0, stage1_first),
                           Fwd(2, 40.0, stage0_fifth), Fwd(3, 2.0, kOrder[3])});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].unit_id, 2u);
  ASSERT_EQ(d.denied.size(), 1u);
  EXPECT_EQ(d.denied[0].unit_id, 1u);
  EXPECT_TRUE(d.denied[0].coupled);
}

TEST(UpstreamAttribution, UnknownOrderIsNeverTheRootNorCoupledByIt) {
  Controller c = MakeController(UpstreamConfig(), 4);
  const int64_t t = WarmUp(c);
  // Unit 0's client sent no order (an older client): it is admitted as
  // under exclusive; among the known ones, 3 (order 1) is the root and 2
  // is coupled to it.
  const Decision d = Step(
      c, t,
      {Fwd(0, 40.0, 0), Fwd(1, 2.0, kOrder[1]), Fwd(2, 80.0, kOrder[2]), Fwd(3, 30.0, kOrder[3])});
  ASSERT_EQ(d.admitted.size(), 2u);
  EXPECT_EQ(d.admitted[0].unit_id, 0u);
  EXPECT_EQ(d.admitted[1].unit_id, 3u);
  ASSERT_EQ(d.denied.size(), 1u);
  EXPECT_EQ(d.denied[0].unit_id, 2u);
  EXPECT_TRUE(d.denied[0].coupled);
}

TEST(UpstreamAttribution, WithoutAnyOrderItIsExclusive) {
  ControllerConfig excl = UpstreamConfig();
  excl.attribution = Attribution::kExclusive;
  Controller up = MakeController(UpstreamConfig(), 3);
  Controller ex = MakeController(excl, 3);
  for (int64_t t = 0; t < 12; ++t) {
    const double f = t == 5 ? 40.0 : 2.0;
    const double g = t == 5 || t == 8 ? 50.0 : 1.0;
    const std::vector<UnitSample> v = {Fwd(0, f, 0), Fwd(1, 2.0, 0, g), Fwd(2, f * 2.0, 0)};
    EXPECT_EQ(DiffDecisions(Step(up, t, v), Step(ex, t, v)), "") << "step " << t;
  }
}

TEST(UpstreamAttribution, TheKeyRoundTrips) {
  v1::ControllerConfig wire;
  ConfigToProto(UpstreamConfig(), &wire);
  EXPECT_EQ(wire.attribution(), v1::ATTRIBUTION_UPSTREAM);
  StatusOr<ControllerConfig> back = ConfigFromProto(wire);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->attribution, Attribution::kUpstream);
  EXPECT_STREQ(AttributionName(Attribution::kUpstream), "upstream");
}

}  // namespace
}  // namespace gnmr::testing
