// The block rules of the forward channel (docs/controller.md, "Block
// rules") and the relative-error rule ("Relative error"): each rule off by
// default and deciding nothing then, each rule's trigger and clamp when on,
// their warmup, ranking against the element rules, the state that carries
// their history, and their config keys.
#include <cmath>
#include <limits>

#include "controller/state_codec.h"
#include "controller/types/config_codec.h"
#include "tests/controller/controller_test_util.h"

namespace gnmr::testing {
namespace {

constexpr uint64_t kNumel = 3200;
constexpr uint64_t kBlocks = 100;  // MXFP8: 32 elements a block

ControllerConfig BlockConfig() {
  ControllerConfig c = WorkedExampleConfig();
  c.max_o = 1;
  c.tau_forward = 4.0;
  c.tau_saturation = 8.0;
  c.underflow_fraction = 0.25;
  c.tau_block_saturation = 3.0;
  c.dead_block_fraction = 0.25;
  c.scale_clamp_fraction = 0.25;
  return c;
}

// Gradient norm 1; a block-scaled forward tensor of forward norm 2 with 20
// saturated elements and 1000 zeros, and the given block figures.
UnitSample Blocks(uint32_t unit, uint64_t saturated_blocks, uint64_t dead_blocks,
                  uint64_t scale_clamps) {
  UnitSample s = Norm(unit, 1.0);
  s.fwd_sumsq = 4.0;
  s.fwd_amax = 1.0;
  s.fwd_saturated = 20;
  s.fwd_zeros = 1000;
  s.fwd_numel = kNumel;
  s.fwd_blocks = kBlocks;
  s.fwd_saturated_blocks = saturated_blocks;
  s.fwd_dead_blocks = dead_blocks;
  s.fwd_scale_clamps = scale_clamps;
  return s;
}

// Warmup (3 samples): 20 of 100 blocks saturated (E8M0's floor rule), 10
// dead, none clamped.
int64_t WarmUp(Controller& c, int units) {
  for (int64_t t = 0; t < 3; ++t) {
    std::vector<UnitSample> v;
    for (int u = 0; u < units; ++u) v.push_back(Blocks(u, 20, 10, 0));
    Step(c, t, v);
  }
  return 3;
}

TEST(BlockRules, OffByDefaultTheyDecideNothing) {
  ControllerConfig off = BlockConfig();
  off.tau_block_saturation = ControllerConfig{}.tau_block_saturation;
  off.dead_block_fraction = ControllerConfig{}.dead_block_fraction;
  off.scale_clamp_fraction = ControllerConfig{}.scale_clamp_fraction;
  EXPECT_EQ(off.tau_block_saturation, 0.0);
  EXPECT_EQ(off.dead_block_fraction, 0.0);
  EXPECT_EQ(off.scale_clamp_fraction, 0.0);
  Controller c = MakeController(off, 1);
  int64_t t = WarmUp(c, 1);
  // Every block saturated, dead and clamped at once: no block rule speaks.
  EXPECT_TRUE(Step(c, t++, {Blocks(0, 100, 100, 100)}).admitted.empty());
  // The history still builds (a replay variant that turns a rule on sees
  // the same means as a live run with it on from the start would not:
  // only the clamp differs), and the admin view keeps the fractions.
  EXPECT_EQ(c.unit(0).block_valid_samples, 4);
  EXPECT_DOUBLE_EQ(c.unit(0).last_dead_blocks, 1.0);
  EXPECT_DOUBLE_EQ(c.unit(0).saturated_blocks_mu, 0.5 * 0.2 + 0.5 * 1.0);
}

TEST(BlockRules, WithoutBlocksTheElementRulesDecideAsBefore) {
  ControllerConfig on = BlockConfig();
  ControllerConfig off = BlockConfig();
  off.tau_block_saturation = off.dead_block_fraction = off.scale_clamp_fraction = 0.0;
  Controller a = MakeController(on, 2);
  Controller b = MakeController(off, 2);
  for (int64_t t = 0; t < 12; ++t) {
    std::vector<UnitSample> v = {Blocks(0, 0, 0, 0), Blocks(1, 0, 0, 0)};
    for (UnitSample& s : v) s.fwd_blocks = 0;  // per-tensor forward tensors
    if (t == 6) v[0].fwd_saturated = 1000;     // an element rule fires
    if (t == 8) v[1].fwd_sumsq = 400.0;
    EXPECT_EQ(DiffDecisions(Step(a, t, v), Step(b, t, v)), "") << "step " << t;
  }
  EXPECT_EQ(a.unit(0).block_valid_samples, 0);
  EXPECT_EQ(a.stats().admissions_by_trigger[static_cast<int>(Trigger::kSaturation)], 1u);
}

TEST(BlockRules, WarmupNeverTriggers) {
  Controller c = MakeController(BlockConfig(), 1);
  Step(c, 0, {Blocks(0, 20, 10, 0)});
  EXPECT_TRUE(Step(c, 1, {Blocks(0, 100, 100, 100)}).admitted.empty());
  EXPECT_EQ(c.unit(0).block_valid_samples, 2);
  EXPECT_DOUBLE_EQ(c.unit(0).dead_blocks_mu, (0.1 + 1.0) / 2.0);
}

TEST(BlockRules, BlockSaturationTriggersAndEntersItsMeanClamped) {
  Controller c = MakeController(BlockConfig(), 1);
  int64_t t = WarmUp(c, 1);  // saturated_blocks_mu 0.2
  // 50 of 100: 2.5x its mean, under tau 3.
  EXPECT_TRUE(Step(c, t++, {Blocks(0, 50, 10, 0)}).admitted.empty());
  const double mu = 0.5 * 0.2 + 0.5 * 0.5;  // 0.35: under the clamp 0.6
  EXPECT_DOUBLE_EQ(c.unit(0).saturated_blocks_mu, mu);
  // Every block: 1 / 0.35 = 2.86 < 3 still; the mean rose. Then a tenfold
  // jump from a quiet history triggers.
  EXPECT_TRUE(Step(c, t++, {Blocks(0, 100, 10, 0)}).admitted.empty());
  Controller q = MakeController(BlockConfig(), 1);
  int64_t tq = 0;
  for (; tq < 3; ++tq) Step(q, tq, {Blocks(0, 2, 10, 0)});   // mu 0.02
  const Decision d = Step(q, tq++, {Blocks(0, 30, 10, 0)});  // 15x
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kBlockSaturation);
  // Entered clamped at tau x its mean: 0.5 * 0.02 + 0.5 * min(0.3, 0.06).
  EXPECT_DOUBLE_EQ(q.unit(0).saturated_blocks_mu, 0.5 * 0.02 + 0.5 * 0.06);
  EXPECT_EQ(q.stats().admissions_by_trigger[static_cast<int>(Trigger::kBlockSaturation)], 1u);
}

TEST(BlockRules, SaturationFloorIsOneBlock) {
  // A history of no saturated block: one saturated block is 1x the floor
  // (1 / 100), four are 4x: tau 3 triggers.
  Controller c = MakeController(BlockConfig(), 1);
  int64_t t = 0;
  for (; t < 3; ++t) Step(c, t, {Blocks(0, 0, 10, 0)});
  EXPECT_TRUE(Step(c, t++, {Blocks(0, 1, 10, 0)}).admitted.empty());
  const Decision d = Step(c, t++, {Blocks(0, 4, 10, 0)});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kBlockSaturation);
}

TEST(BlockRules, DeadBlocksTriggerOnTheShareOfUsuallyLiveBlocks) {
  Controller c = MakeController(BlockConfig(), 1);
  int64_t t = WarmUp(c, 1);  // dead_blocks_mu 0.1: 90% usually live
  // 30 dead: (0.3 - 0.1) / 0.9 = 0.22 < 0.25.
  EXPECT_TRUE(Step(c, t++, {Blocks(0, 20, 30, 0)}).admitted.empty());
  const double mu = 0.5 * 0.1 + 0.5 * 0.3;  // 0.2; the clamp 0.1 + 0.225 is above 0.3
  EXPECT_DOUBLE_EQ(c.unit(0).dead_blocks_mu, mu);
  // 60 dead: (0.6 - 0.2) / 0.8 = 0.5 >= 0.25.
  const Decision d = Step(c, t++, {Blocks(0, 20, 60, 0)});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kDeadBlocks);
  EXPECT_DOUBLE_EQ(c.unit(0).dead_blocks_mu, 0.5 * mu + 0.5 * (mu + 0.25 * (1.0 - mu)));
}

TEST(BlockRules, ScaleClampsTriggerOnTheShareOfUsuallyUnclampedBlocks) {
  Controller c = MakeController(BlockConfig(), 1);
  int64_t t = WarmUp(c, 1);                                             // scale_clamps_mu 0
  EXPECT_TRUE(Step(c, t++, {Blocks(0, 20, 10, 20)}).admitted.empty());  // 0.2 < 0.25
  const Decision d = Step(c, t++, {Blocks(0, 20, 10, 80)});             // (0.8 - 0.1) / 0.9
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kScaleClamps);
}

TEST(BlockRules, TheRuleOfHighestRiskNamesTheTrigger) {
  Controller c = MakeController(BlockConfig(), 1);
  int64_t t = WarmUp(c, 1);
  // Saturation of elements 1000 / 3200 against a mean of 20 / 3200: 50x
  // (risk 6.25); dead blocks (1 - 0.1) / 0.9 = 1 (risk 4): saturation.
  UnitSample s = Blocks(0, 20, 100, 0);
  s.fwd_saturated = 1000;
  Decision d = Step(c, t++, {s});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kSaturation);
  // A block rule of higher risk than the element rule that fired wins.
  Controller e = MakeController(BlockConfig(), 1);
  t = WarmUp(e, 1);
  s = Blocks(0, 20, 10, 100);  // clamps: 1 / 0.25 = risk 4
  s.fwd_saturated = 200;       // elements: 10x / 8 = risk 1.25
  d = Step(e, t++, {s});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kScaleClamps);
}

TEST(BlockRules, ABlockTriggerRanksAsAForwardOne) {
  // Two units, one budget slot: the block-triggered unit is admitted over a
  // unit with a larger gradient spike (forward triggers rank first).
  EXPECT_TRUE(IsForwardTrigger(Trigger::kDeadBlocks));
  Controller c = MakeController(BlockConfig(), 2);
  int64_t t = WarmUp(c, 2);
  UnitSample spike = Blocks(0, 20, 10, 0);
  spike.sumsq = 100.0 * 100.0;
  const Decision d = Step(c, t, {spike, Blocks(1, 20, 90, 0)});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].unit_id, 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kDeadBlocks);
}

TEST(BlockRules, StateRoundTripsAndContinuesIdentically) {
  Controller a = MakeController(BlockConfig(), 2);
  int64_t t = WarmUp(a, 2);
  Step(a, t++, {Blocks(0, 40, 10, 0), Blocks(1, 20, 70, 3)});
  StatusOr<Controller> b =
      ControllerStateCodec::RestoreFromString(ControllerStateCodec::SaveToString(a));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (uint32_t u = 0; u < 2; ++u) {
    EXPECT_EQ(b->unit(u).block_valid_samples, a.unit(u).block_valid_samples);
    EXPECT_EQ(b->unit(u).saturated_blocks_mu, a.unit(u).saturated_blocks_mu);
    EXPECT_EQ(b->unit(u).dead_blocks_mu, a.unit(u).dead_blocks_mu);
    EXPECT_EQ(b->unit(u).scale_clamps_mu, a.unit(u).scale_clamps_mu);
  }
  EXPECT_EQ(b->stats().admissions_by_trigger[static_cast<int>(Trigger::kDeadBlocks)], 1u);
  for (int k = 0; k < 8; ++k, ++t) {
    const std::vector<UnitSample> v = {Blocks(0, 20 + 9 * k, 10, 0), Blocks(1, 20, 10, 10 * k)};
    EXPECT_EQ(DiffDecisions(Step(a, t, v), Step(*b, t, v)), "") << "step " << t;
  }
}

TEST(BlockRules, ARestoredHistoryOutOfRangeIsRefused) {
  Controller a = MakeController(BlockConfig(), 1);
  WarmUp(a, 1);
  v1::ControllerState state;
  ControllerStateCodec::Save(a, &state);
  ASSERT_TRUE(ControllerStateCodec::Restore(state).ok());
  state.mutable_units(0)->set_dead_blocks_mu(1.5);
  EXPECT_FALSE(ControllerStateCodec::Restore(state).ok());
  state.mutable_units(0)->set_dead_blocks_mu(0.1);
  state.mutable_units(0)->set_block_valid_samples(-1);
  EXPECT_FALSE(ControllerStateCodec::Restore(state).ok());
}

TEST(BlockRules, KeysAreOffAtZeroAndRefuseTheirOutOfRangeValues) {
  ControllerConfig c = BlockConfig();
  // A peer before the keys sends 0: off.
  v1::ControllerConfig wire;
  ConfigToProto(c, &wire);
  wire.clear_tau_block_saturation();
  wire.clear_dead_block_fraction();
  StatusOr<ControllerConfig> read = ConfigFromProto(wire);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->tau_block_saturation, 0.0);
  EXPECT_EQ(read->dead_block_fraction, 0.0);
  EXPECT_EQ(read->scale_clamp_fraction, 0.25);
  for (double bad : {0.5, 1.0, -1.0, std::nan("")}) {
    ControllerConfig x = c;
    x.tau_block_saturation = bad;
    const Status s = x.Validate();
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("0 (off) or a finite number > 1"), std::string::npos) << s.message();
  }
  for (double bad : {1.0, -0.1, 2.0}) {
    ControllerConfig x = c;
    x.dead_block_fraction = bad;
    EXPECT_FALSE(x.Validate().ok()) << bad;
    x = c;
    x.scale_clamp_fraction = bad;
    EXPECT_FALSE(x.Validate().ok()) << bad;
  }
}

// A block-scaled sample observed with its source: relative error
// error / source (the sample's own figures, all else quiet).
UnitSample Sourced(uint32_t unit, double relative_error) {
  UnitSample s = Blocks(unit, 20, 10, 0);
  s.fwd_source_numel = kNumel;
  s.fwd_underflow = 5;
  s.fwd_source_sumsq = 4.0;
  s.fwd_error_sumsq = 4.0 * relative_error;
  return s;
}

TEST(RelativeError, OffByDefaultAndWithoutASourceItDecidesNothing) {
  EXPECT_EQ(ControllerConfig{}.tau_relative_error, 0.0);
  ControllerConfig off = BlockConfig();
  Controller c = MakeController(off, 1);
  int64_t t = 0;
  for (; t < 3; ++t) Step(c, t, {Sourced(0, 1e-3)});
  EXPECT_TRUE(Step(c, t++, {Sourced(0, 0.5)}).admitted.empty());  // 500x, rule off
  EXPECT_EQ(c.unit(0).source_valid_samples, 4);
  // Samples without a source (or with an all-zero one) leave its history.
  UnitSample zero_source = Sourced(0, 0.0);
  zero_source.fwd_source_sumsq = 0.0;
  Step(c, t++, {Blocks(0, 20, 10, 0)});
  Step(c, t++, {zero_source});
  EXPECT_EQ(c.unit(0).source_valid_samples, 4);
}

TEST(RelativeError, TriggersOnItsRatioToItsMeanAndEntersClamped) {
  ControllerConfig on = BlockConfig();
  on.tau_relative_error = 4.0;
  Controller c = MakeController(on, 1);
  int64_t t = 0;
  for (; t < 3; ++t) Step(c, t, {Sourced(0, 1e-3)});               // warmup: mu 1e-3
  EXPECT_TRUE(Step(c, t++, {Sourced(0, 3e-3)}).admitted.empty());  // 3x
  const double mu = c.unit(0).relative_error_mu;                   // 3e-3 entered unclamped
  EXPECT_NEAR(mu, 0.5 * 1e-3 + 0.5 * 3e-3, 1e-15);
  const Decision d = Step(c, t++, {Sourced(0, 0.5)});  // 250x its mean
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kRelativeError);
  EXPECT_TRUE(IsForwardTrigger(Trigger::kRelativeError));
  // Entered clamped at tau x its mean.
  EXPECT_NEAR(c.unit(0).relative_error_mu, 0.5 * mu + 0.5 * 4.0 * mu, 1e-15);
  EXPECT_EQ(c.stats().admissions_by_trigger[static_cast<int>(Trigger::kRelativeError)], 1u);
}

TEST(RelativeError, SourceSumsThatCannotBeAreRefused) {
  Controller c = MakeController(BlockConfig(), 1);
  Decision d;
  UnitSample s = Sourced(0, 1e-3);
  s.fwd_error_sumsq = -1.0;
  EXPECT_EQ(c.Observe(0, {s}, &d).code(), StatusCode::kInvalidArgument);
  s = Sourced(0, 1e-3);
  s.fwd_source_sumsq = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(c.Observe(0, {s}, &d).code(), StatusCode::kInvalidArgument);
  s = Sourced(0, 1e-3);
  s.fwd_underflow = kNumel + 1;
  EXPECT_EQ(c.Observe(0, {s}, &d).code(), StatusCode::kInvalidArgument);
  s = Sourced(0, 1e-3);
  s.fwd_source_numel = kNumel + 1;
  EXPECT_EQ(c.Observe(0, {s}, &d).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(c.last_step().has_value());
}

TEST(RelativeError, StateRoundTripsAndContinuesIdentically) {
  ControllerConfig on = BlockConfig();
  on.tau_relative_error = 4.0;
  Controller a = MakeController(on, 1);
  int64_t t = 0;
  for (; t < 4; ++t) Step(a, t, {Sourced(0, 1e-3 * (1 + t))});
  StatusOr<Controller> b =
      ControllerStateCodec::RestoreFromString(ControllerStateCodec::SaveToString(a));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->unit(0).source_valid_samples, a.unit(0).source_valid_samples);
  EXPECT_EQ(b->unit(0).relative_error_mu, a.unit(0).relative_error_mu);
  for (int k = 0; k < 6; ++k, ++t) {
    const std::vector<UnitSample> v = {Sourced(0, 1e-3 * (1 + 3 * k))};
    EXPECT_EQ(DiffDecisions(Step(a, t, v), Step(*b, t, v)), "") << "step " << t;
  }
  v1::ControllerState state;
  ControllerStateCodec::Save(a, &state);
  state.mutable_units(0)->set_relative_error_mu(-1.0);
  EXPECT_FALSE(ControllerStateCodec::Restore(state).ok());
}

}  // namespace
}  // namespace gnmr::testing
