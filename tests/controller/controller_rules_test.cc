// One test per rule of docs/controller.md, on hand-built sequences whose
// expected values are worked out in the comments.
#include <cmath>
#include <limits>

#include "tests/controller/controller_test_util.h"

namespace gnmr::testing {
namespace {

// Explicit thresholds (not the defaults): the worked examples below are
// computed for tau 2.5, tau_delta 1.0, gnmr_floor 1.5.
ControllerConfig SmallConfig() { return WorkedExampleConfig(); }

TEST(ControllerRules, InactiveUnitMakesNoProgress) {
  Controller c = MakeController(SmallConfig(), 1);
  for (int t = 0; t < 10; ++t) Step(c, t, {Norm(0, 0.0)});
  EXPECT_EQ(c.unit(0).valid_samples, 0);
  EXPECT_EQ(c.unit(0).mu, 0.0);
  EXPECT_EQ(c.stats().inactive_samples, 10u);
  // Still in warmup: a huge value after all those zeros cannot trigger.
  Decision d = Step(c, 10, {Norm(0, 1e9)});
  EXPECT_TRUE(d.admitted.empty());
  EXPECT_EQ(c.unit(0).valid_samples, 1);
}

TEST(ControllerRules, WarmupBuildsPlainAverageAndNeverTriggers) {
  Controller c = MakeController(SmallConfig(), 1);
  Decision d1 = Step(c, 0, {Norm(0, 1.0)});
  Decision d2 = Step(c, 1, {Norm(0, 100.0)});  // would be GNMR 100
  Decision d3 = Step(c, 2, {Norm(0, 4.0)});
  EXPECT_TRUE(d1.admitted.empty() && d2.admitted.empty() && d3.admitted.empty());
  EXPECT_DOUBLE_EQ(c.unit(0).mu, (1.0 + 100.0 + 4.0) / 3.0);
  EXPECT_EQ(c.unit(0).valid_samples, 3);
  EXPECT_TRUE(c.Window(0).empty());  // warmup samples are not evaluated
}

TEST(ControllerRules, NonFiniteTriggersDuringWarmupAndNeverEntersHistory) {
  Controller c = MakeController(SmallConfig(), 1);
  Step(c, 0, {Norm(0, 2.0)});
  Decision d = Step(c, 1, {NonFinite(0)});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kNonFinite);
  EXPECT_TRUE(d.global_skip);
  EXPECT_EQ(c.unit(0).valid_samples, 1);
  EXPECT_EQ(c.unit(0).mu, 2.0);
  // sumsq = +inf without a count is non-finite too.
  UnitSample inf = Norm(0, 1.0);
  inf.sumsq = std::numeric_limits<double>::infinity();
  Decision d2 = Step(c, 2, {inf});
  EXPECT_TRUE(d2.global_skip);
  EXPECT_EQ(c.unit(0).mu, 2.0);
  inf.sumsq = -std::numeric_limits<double>::infinity();  // also a signal
  Decision d3 = Step(c, 3, {inf});
  EXPECT_TRUE(d3.global_skip);
}

TEST(ControllerRules, EmaComparesAgainstMeanBeforeAndClampsTheSpike) {
  Controller c = MakeController(SmallConfig(), 1);
  Flat(c, 0, 3, 1, 2.0);  // mu = 2
  // 3.0: GNMR = 1.5 (against mu before = 2), then mu = 0.5*2 + 0.5*3 = 2.5.
  Step(c, 3, {Norm(0, 3.0)});
  EXPECT_DOUBLE_EQ(c.unit(0).last_gnmr, 1.5);
  EXPECT_DOUBLE_EQ(c.unit(0).mu, 2.5);
  // 100: GNMR = 40; enters as min(100, 2.5 * 2.5) = 6.25 -> mu = 4.375.
  Decision d = Step(c, 4, {Norm(0, 100.0)});
  EXPECT_DOUBLE_EQ(c.unit(0).last_gnmr, 40.0);
  EXPECT_DOUBLE_EQ(c.unit(0).mu, 0.5 * 2.5 + 0.5 * 6.25);
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kGnmr);
  EXPECT_DOUBLE_EQ(d.admitted[0].mu, 2.5);
  EXPECT_DOUBLE_EQ(d.admitted[0].norm, 100.0);
  // The entry keeps why it is in recovery for as long as it is in force.
  ASSERT_EQ(d.recovery.size(), 1u);
  EXPECT_EQ(d.recovery[0].reason.trigger, Trigger::kGnmr);
  EXPECT_DOUBLE_EQ(d.recovery[0].reason.gnmr, 40.0);
  EXPECT_DOUBLE_EQ(d.recovery[0].reason.delta, d.admitted[0].delta);
  d = Step(c, 5, {Norm(0, 4.0)});
  ASSERT_EQ(d.recovery.size(), 1u);
  EXPECT_EQ(d.recovery[0].reason.trigger, Trigger::kGnmr);
  EXPECT_DOUBLE_EQ(d.recovery[0].reason.gnmr, 40.0);
}

TEST(ControllerRules, GnmrThresholdIsInclusive) {
  ControllerConfig cfg = SmallConfig();
  cfg.short_window = 0;  // isolate GNMR from Delta-GNMR
  Controller c = MakeController(cfg, 2);
  Flat(c, 0, 3, 2, 2.0);
  // unit 0 exactly at tau (5.0 / 2.0 = 2.5), unit 1 just below.
  Decision d = Step(c, 3, {Norm(0, 5.0), Norm(1, 4.999)});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].unit_id, 0u);
  EXPECT_DOUBLE_EQ(d.admitted[0].gnmr, 2.5);
}

TEST(ControllerRules, DeltaGnmrNeedsWindowAndFloor) {
  ControllerConfig cfg = SmallConfig();
  cfg.ema_decay = 0.999999;  // keep mu ~ 1 so GNMR == norm
  cfg.tau = 100.0;           // GNMR alone never triggers here
  Controller c = MakeController(cfg, 1);
  Flat(c, 0, 3, 1, 1.0);
  // First evaluated step: window empty, so no Delta even for a jump.
  Decision d0 = Step(c, 3, {Norm(0, 3.0)});
  EXPECT_TRUE(d0.admitted.empty());
  EXPECT_EQ(c.unit(0).last_delta, 0.0);
  // Window {3.0}: GNMR ~1.4 is below the floor 1.5 -> Delta does not count.
  Decision d1 = Step(c, 4, {Norm(0, 1.4)});
  EXPECT_TRUE(d1.admitted.empty());
  // Window {3, 1.4} mean 2.2: GNMR ~3.3 -> Delta ~1.1 >= 1.0 -> trigger.
  Decision d2 = Step(c, 5, {Norm(0, 3.3)});
  ASSERT_EQ(d2.admitted.size(), 1u);
  EXPECT_EQ(d2.admitted[0].trigger, Trigger::kDelta);
  EXPECT_NEAR(d2.admitted[0].delta, 3.3 - 2.2, 1e-4);
  EXPECT_EQ(c.Window(0).size(), 2u);  // bounded by short_window
}

TEST(ControllerRules, DecisionAppliesAfterLag) {
  ControllerConfig cfg = SmallConfig();
  cfg.lag = 2;
  Controller c = MakeController(cfg, 1);
  Flat(c, 0, 3, 1);
  Decision d = Step(c, 3, {Norm(0, 10.0)});
  EXPECT_EQ(d.apply_step, 5);
  ASSERT_EQ(d.recovery.size(), 1u);
  EXPECT_EQ(d.recovery[0].since, 5);
  EXPECT_EQ(d.recovery[0].until, 8);  // lock_steps = 3
  EXPECT_EQ(d.recovery[0].entry, EntryTreatment::kNone);
  EXPECT_EQ(c.InForceAt(4), 0);
  EXPECT_EQ(c.InForceAt(5), 1);
  EXPECT_EQ(c.InForceAt(8), 0);
}

TEST(ControllerRules, LagZeroPromoteGetsEntryTreatment) {
  ControllerConfig cfg = SmallConfig();
  cfg.lag = 0;
  cfg.entry = EntryTreatment::kSkip;
  cfg.actions = {{"clipme", Action::kClip, 0.25}};
  StatusOr<Controller> made = Controller::Create(cfg);
  ASSERT_TRUE(made.ok());
  Controller c = std::move(made).value();
  ASSERT_TRUE(c.AddUnit("promoted").ok());
  ASSERT_TRUE(c.AddUnit("clipme").ok());
  Flat(c, 0, 3, 2);
  Decision d = Step(c, 3, {Norm(0, 10.0), Norm(1, 10.0)});
  EXPECT_EQ(d.apply_step, 3);
  ASSERT_EQ(d.recovery.size(), 2u);
  EXPECT_EQ(d.recovery[0].action, Action::kPromote);
  EXPECT_EQ(d.recovery[0].entry, EntryTreatment::kSkip);
  EXPECT_EQ(d.recovery[1].action, Action::kClip);
  EXPECT_EQ(d.recovery[1].entry, EntryTreatment::kNone);
  EXPECT_EQ(d.recovery[1].clip_min_scale, 0.25);
  // Both in force at the observed step itself.
  EXPECT_EQ(c.stats().unit_steps_in_force, 2u);
}

TEST(ControllerRules, ReleaseBeforeAdmitAndImmediateReadmission) {
  ControllerConfig cfg = SmallConfig();
  cfg.max_o = 1;
  cfg.short_window = 0;
  Controller c = MakeController(cfg, 2);
  Flat(c, 0, 3, 2);  // mu = 1 for both
  // t=3: unit 0 spikes -> locked [4, 7).
  Decision a = Step(c, 3, {Norm(0, 10.0), Norm(1, 1.0)});
  ASSERT_EQ(a.admitted.size(), 1u);
  EXPECT_EQ(a.recovery[0].until, 7);
  // t=4,5: unit 1 spikes but the budget is used: denied.
  for (int t = 4; t <= 5; ++t) {
    Decision d = Step(c, t, {Norm(0, 1.0), Norm(1, 10.0)});
    ASSERT_EQ(d.denied.size(), 1u);
    EXPECT_EQ(d.denied[0].unit_id, 1u);
  }
  // t=6: apply 7 == until -> unit 0 released first, then both trigger: unit 0
  // is admitted again at once only if it out-ranks unit 1.
  Decision d = Step(c, 6, {Norm(0, 50.0), Norm(1, 10.0)});
  EXPECT_EQ(d.released, std::vector<uint32_t>{0});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].unit_id, 0u);
  EXPECT_EQ(d.recovery[0].since, 7);
  ASSERT_EQ(d.denied.size(), 1u);
  EXPECT_EQ(d.denied[0].unit_id, 1u);
  EXPECT_EQ(c.stats().denials, 3u);
}

TEST(ControllerRules, LockedUnitsAreNeverPreempted) {
  ControllerConfig cfg = SmallConfig();
  cfg.max_o = 1;
  cfg.lock_steps = 10;
  Controller c = MakeController(cfg, 2);
  Flat(c, 0, 3, 2);
  Step(c, 3, {Norm(0, 3.0), Norm(1, 1.0)});  // unit 0 mild spike, admitted
  // A non-finite unit 1 cannot take the slot; it is denied, the step skipped.
  Decision d = Step(c, 4, {Norm(0, 1.0), NonFinite(1)});
  EXPECT_TRUE(d.admitted.empty());
  ASSERT_EQ(d.denied.size(), 1u);
  EXPECT_EQ(d.denied[0].trigger, Trigger::kNonFinite);
  EXPECT_TRUE(d.global_skip);
  ASSERT_EQ(d.recovery.size(), 1u);
  EXPECT_EQ(d.recovery[0].unit_id, 0u);
  EXPECT_EQ(d.recovery[0].until, 14);
}

TEST(ControllerRules, AdmissionOrderNonFiniteThenRiskThenId) {
  ControllerConfig cfg = SmallConfig();
  cfg.max_o = 3;
  cfg.short_window = 0;
  Controller c = MakeController(cfg, 5);
  Flat(c, 0, 3, 5);
  Decision d = Step(c, 3, {Norm(0, 5.0), Norm(1, 9.0), Norm(2, 9.0), NonFinite(3), Norm(4, 20.0)});
  ASSERT_EQ(d.admitted.size(), 3u);
  EXPECT_EQ(d.admitted[0].unit_id, 3u);  // non-finite first
  EXPECT_EQ(d.admitted[1].unit_id, 4u);  // highest risk
  EXPECT_EQ(d.admitted[2].unit_id, 1u);  // tie 1 vs 2: lower id
  ASSERT_EQ(d.denied.size(), 2u);
  EXPECT_EQ(d.denied[0].unit_id, 2u);
  EXPECT_EQ(d.denied[1].unit_id, 0u);
  EXPECT_TRUE(d.global_skip);
}

TEST(ControllerRules, UnitInRecoveryKeepsUpdatingHistory) {
  ControllerConfig cfg = SmallConfig();
  cfg.lock_steps = 100;
  Controller c = MakeController(cfg, 1);
  Flat(c, 0, 3, 1);
  Step(c, 3, {Norm(0, 10.0)});  // admitted; mu = 0.5 + 0.5*2.5 = 1.75
  EXPECT_DOUBLE_EQ(c.unit(0).mu, 1.75);
  Decision d = Step(c, 4, {Norm(0, 10.0)});  // in recovery: not a candidate
  EXPECT_TRUE(d.admitted.empty());
  EXPECT_TRUE(d.denied.empty());
  EXPECT_DOUBLE_EQ(c.unit(0).mu, 0.5 * 1.75 + 0.5 * std::min(10.0, 2.5 * 1.75));
  EXPECT_EQ(c.Window(0).size(), 2u);
  EXPECT_DOUBLE_EQ(d.recovery[0].ref_norm, c.unit(0).mu);
}

TEST(ControllerRules, ActionsByFirstMatchingPattern) {
  ControllerConfig cfg = SmallConfig();
  cfg.max_o = 4;
  cfg.actions = {{"*.attn.*", Action::kClip, -1.0},
                 {"layer1.*", Action::kSkip, -1.0},
                 {"*.fc?", Action::kResetState, -1.0}};
  StatusOr<Controller> made = Controller::Create(cfg);
  ASSERT_TRUE(made.ok());
  Controller c = std::move(made).value();
  for (const char* n : {"layer1.attn.qkv", "layer1.fc1", "layer2.fc2", "head"}) {
    ASSERT_TRUE(c.AddUnit(n).ok());
  }
  Flat(c, 0, 3, 4);
  Decision d = Step(c, 3, {Norm(0, 9.0), Norm(1, 9.0), Norm(2, 9.0), Norm(3, 9.0)});
  ASSERT_EQ(d.recovery.size(), 4u);
  EXPECT_EQ(d.recovery[0].action, Action::kClip);  // first rule wins
  EXPECT_EQ(d.recovery[0].clip_min_scale, cfg.clip_min_scale);
  EXPECT_EQ(d.recovery[1].action, Action::kSkip);
  EXPECT_EQ(d.recovery[2].action, Action::kResetState);
  EXPECT_EQ(d.recovery[3].action, Action::kPromote);  // default
  EXPECT_EQ(c.stats().admissions_by_action[static_cast<int>(Action::kClip)], 1u);
}

TEST(ControllerRules, InvalidInputChangesNothing) {
  Controller c = MakeController(SmallConfig(), 2);
  Flat(c, 0, 5, 2);
  const uint64_t seq = c.sequence();
  const double mu = c.unit(0).mu;
  Decision d;
  EXPECT_EQ(c.Observe(4, {Norm(0, 1.0)}, &d).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Observe(5, {Norm(0, 9.0), Norm(0, 1.0)}, &d).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Observe(5, {Norm(0, 9.0), Norm(7, 1.0)}, &d).code(), StatusCode::kNotFound);
  UnitSample neg = Norm(1, 1.0);
  neg.sumsq = -1.0;
  EXPECT_EQ(c.Observe(5, {Norm(0, 9.0), neg}, &d).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.sequence(), seq);
  EXPECT_EQ(c.unit(0).mu, mu);
  EXPECT_EQ(*c.last_step(), 4);
  // And the next valid step proceeds normally.
  EXPECT_EQ(Step(c, 5, {Norm(0, 9.0)}).admitted.size(), 1u);
}

TEST(ControllerRules, DuplicateNamesAndBadConfigsAreRejected) {
  Controller c = MakeController(SmallConfig(), 1);
  EXPECT_EQ(c.AddUnit("u0").status().code(), StatusCode::kAlreadyExists);
  EXPECT_FALSE(c.AddUnit("").ok());
  ControllerConfig bad = SmallConfig();
  bad.max_o = -1;
  EXPECT_FALSE(Controller::Create(bad).ok());
  EXPECT_NE(c.SetConfig(bad).message().find("max_o"), std::string::npos);
  EXPECT_EQ(c.config().max_o, 2);  // unchanged
}

TEST(ControllerRules, ConfigVersionIsRecordedWithEachDecision) {
  Controller c = MakeController(SmallConfig(), 1);
  EXPECT_EQ(Step(c, 0, {Norm(0, 1.0)}).config_version, 1u);
  ControllerConfig cfg = SmallConfig();
  cfg.max_o = 7;
  ASSERT_TRUE(c.SetConfig(cfg).ok());
  EXPECT_EQ(Step(c, 1, {Norm(0, 1.0)}).config_version, 2u);
}

// Each decision announces next_lag (the config's lag when it is made); the
// next decision applies from max(its step + that lag, the last apply). A lag
// change so takes effect one decision after it is announced, and lowering it
// never moves the apply step backwards.
TEST(ControllerRules, LagChangeTakesEffectOneDecisionAfterItIsAnnounced) {
  ControllerConfig cfg = SmallConfig();
  cfg.lag = 3;
  Controller c = MakeController(cfg, 1);
  EXPECT_EQ(c.next_lag(), 3);
  Decision d = Step(c, 0, {Norm(0, 1.0)});
  EXPECT_EQ(d.apply_step, 3);
  EXPECT_EQ(d.next_lag, 3);
  cfg.lag = 0;
  ASSERT_TRUE(c.SetConfig(cfg).ok());
  EXPECT_EQ(c.next_lag(), 3);  // announced by the decision of step 0
  d = Step(c, 1, {Norm(0, 1.0)});
  EXPECT_EQ(d.apply_step, 4);  // 1 + 3: the announced lag
  EXPECT_EQ(d.next_lag, 0);    // the new lag, announced here
  d = Step(c, 2, {Norm(0, 1.0)});
  EXPECT_EQ(d.apply_step, 4);  // 2 + 0, but never before the last apply
  EXPECT_EQ(Step(c, 5, {Norm(0, 1.0)}).apply_step, 5);
  cfg.lag = 2;  // raising it: one more decision at lag 0, then lag 2
  ASSERT_TRUE(c.SetConfig(cfg).ok());
  d = Step(c, 6, {Norm(0, 1.0)});
  EXPECT_EQ(d.apply_step, 6);
  EXPECT_EQ(d.next_lag, 2);
  EXPECT_EQ(Step(c, 7, {Norm(0, 1.0)}).apply_step, 9);
}

// Before the first decision the config's lag is the announced one (the
// daemon announces it when a generation starts): a change then still waits
// one decision.
TEST(ControllerRules, LagChangeBeforeTheFirstDecisionAlsoWaitsOneDecision) {
  ControllerConfig cfg = SmallConfig();
  cfg.lag = 2;
  Controller c = MakeController(cfg, 1);
  cfg.lag = 0;
  ASSERT_TRUE(c.SetConfig(cfg).ok());
  EXPECT_EQ(c.next_lag(), 2);
  Decision d = Step(c, 0, {Norm(0, 1.0)});
  EXPECT_EQ(d.apply_step, 2);
  EXPECT_EQ(d.next_lag, 0);
  EXPECT_EQ(Step(c, 3, {Norm(0, 1.0)}).apply_step, 3);
}

// Rewind: the trainer restarted from an earlier step without importing the
// state. Any step may follow, its apply step may be earlier than the last
// one; history, locks and the sequence carry on.
TEST(ControllerRules, RewindAcceptsEarlierStepsAndKeepsHistoryLocksAndSequence) {
  ControllerConfig cfg = SmallConfig();
  cfg.max_o = 1;
  cfg.lock_steps = 10;
  Controller c = MakeController(cfg, 2);
  Flat(c, 0, 20, 2);
  Decision spike = Step(c, 20, {Norm(0, 9.0), Norm(1, 1.0)});  // u0: [21, 31)
  ASSERT_EQ(spike.recovery.size(), 1u);
  const double mu1 = c.unit(1).mu;
  const std::vector<double> window1 = c.Window(1);
  Decision bad;
  EXPECT_EQ(c.Observe(12, {Norm(0, 1.0)}, &bad).code(), StatusCode::kInvalidArgument);

  c.Rewind();
  EXPECT_FALSE(c.last_step().has_value());
  EXPECT_FALSE(c.last_apply().has_value());
  EXPECT_EQ(c.unit(1).mu, mu1);
  EXPECT_EQ(c.Window(1), window1);
  // u1 spikes at the resumed step 12: u0's lock still holds the only slot.
  Decision d = Step(c, 12, {Norm(0, 1.0), Norm(1, 9.0)});
  EXPECT_EQ(d.apply_step, 13);  // before the last apply (21): a new timeline
  EXPECT_EQ(d.sequence, spike.sequence + 1);
  ASSERT_EQ(d.recovery.size(), 1u);
  EXPECT_EQ(d.recovery[0].unit_id, 0u);
  EXPECT_EQ(d.recovery[0].since, 21);  // the lock is never shortened
  EXPECT_EQ(d.recovery[0].until, 31);
  ASSERT_EQ(d.denied.size(), 1u);
  EXPECT_EQ(d.denied[0].unit_id, 1u);
  // Steps go forward again from the rewound one.
  EXPECT_EQ(c.Observe(12, {Norm(0, 1.0)}, &bad).code(), StatusCode::kInvalidArgument);
  // u0 is released once the resumed steps reach its end, not earlier.
  for (int64_t t = 13; t < 30; ++t) {
    EXPECT_EQ(Step(c, t, {Norm(0, 1.0)}).recovery.size(), 1u) << t;
  }
  d = Step(c, 30, {Norm(0, 1.0), Norm(1, 9.0)});
  EXPECT_EQ(d.released, std::vector<uint32_t>{0});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].unit_id, 1u);
}

// next_lag survives a Rewind: the first resumed decision uses the lag the
// last one announced.
TEST(ControllerRules, RewindKeepsTheAnnouncedLag) {
  ControllerConfig cfg = SmallConfig();
  cfg.lag = 2;
  Controller c = MakeController(cfg, 1);
  Step(c, 10, {Norm(0, 1.0)});
  cfg.lag = 0;
  ASSERT_TRUE(c.SetConfig(cfg).ok());
  c.Rewind();
  EXPECT_EQ(c.next_lag(), 2);
  EXPECT_EQ(Step(c, 4, {Norm(0, 1.0)}).apply_step, 6);
  EXPECT_EQ(Step(c, 5, {Norm(0, 1.0)}).apply_step, 6);  // max(5 + 0, 6)
}

TEST(ControllerRules, LockStepsChangeNeverShortensExistingLocks) {
  ControllerConfig cfg = SmallConfig();
  cfg.lock_steps = 10;
  Controller c = MakeController(cfg, 1);
  Flat(c, 0, 3, 1);
  Step(c, 3, {Norm(0, 9.0)});  // [4, 14)
  cfg.lock_steps = 1;
  ASSERT_TRUE(c.SetConfig(cfg).ok());
  Decision d = Step(c, 4, {Norm(0, 1.0)});
  ASSERT_EQ(d.recovery.size(), 1u);
  EXPECT_EQ(d.recovery[0].until, 14);
}

TEST(ControllerRules, AdminReleaseIsReportedByTheNextDecision) {
  Controller c = MakeController(SmallConfig(), 1);
  Flat(c, 0, 3, 1);
  Step(c, 3, {Norm(0, 9.0)});
  EXPECT_EQ(c.Release(5).code(), StatusCode::kNotFound);
  ASSERT_TRUE(c.Release(0).ok());
  EXPECT_FALSE(c.InRecovery(0));
  Decision d = Step(c, 4, {Norm(0, 1.0)});
  EXPECT_EQ(d.released, std::vector<uint32_t>{0});
  EXPECT_TRUE(d.recovery.empty());
}

TEST(ControllerRules, DigestCoversTheSet) {
  std::vector<RecoveryEntry> set(1);
  set[0].unit_id = 3;
  set[0].since = 10;
  set[0].until = 30;
  const uint64_t base = DigestOf(10, set, false);
  EXPECT_EQ(base, DigestOf(10, set, false));
  EXPECT_NE(base, DigestOf(11, set, false));
  EXPECT_NE(base, DigestOf(10, set, true));
  set[0].until = 31;
  EXPECT_NE(base, DigestOf(10, set, false));
  set[0].until = 30;
  set[0].action = Action::kClip;
  EXPECT_NE(base, DigestOf(10, set, false));
  EXPECT_NE(DigestOf(10, {}, false), DigestOf(10, {}, true));
}

TEST(ControllerRules, RecoveryFractionCountsUnitStepsInForce) {
  ControllerConfig cfg = SmallConfig();
  cfg.lock_steps = 2;
  Controller c = MakeController(cfg, 2);
  Flat(c, 0, 3, 2);
  Step(c, 3, {Norm(0, 9.0), Norm(1, 1.0)});  // unit 0 in force at 4, 5
  Flat(c, 4, 4, 2);                          // steps 4..7
  EXPECT_EQ(c.stats().unit_steps_observed, 16u);
  EXPECT_EQ(c.stats().unit_steps_in_force, 2u);
  EXPECT_DOUBLE_EQ(c.stats().recovery_fraction(), 2.0 / 16.0);
  EXPECT_EQ(c.stats().peak_in_recovery, 1u);
}

}  // namespace
}  // namespace gnmr::testing
