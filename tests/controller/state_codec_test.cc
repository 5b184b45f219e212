// Controller state serialization: round trip, and rejection of corrupt or
// hostile state (a snapshot file or `gnmrctl import` input is untrusted).
#include "controller/state_codec.h"

#include <cmath>
#include <limits>
#include <string>

#include "tests/controller/controller_test_util.h"

namespace gnmr::testing {
namespace {

Controller Busy() {
  ControllerConfig cfg;
  cfg.warmup = 2;
  cfg.max_o = 2;
  cfg.lock_steps = 5;
  cfg.actions = {{"u1", Action::kClip, 0.3}};
  Controller c = MakeController(cfg, 3);
  Flat(c, 0, 4, 3);
  Step(c, 4, {Norm(0, 9.0), Norm(1, 9.0), Norm(2, 9.0)});
  return c;
}

TEST(StateCodec, RoundTripKeepsEverything) {
  Controller c = Busy();
  ASSERT_TRUE(c.Release(0).ok());
  StatusOr<Controller> r =
      ControllerStateCodec::RestoreFromString(ControllerStateCodec::SaveToString(c));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config(), c.config());
  EXPECT_EQ(r->config_version(), c.config_version());
  EXPECT_EQ(r->num_units(), 3u);
  EXPECT_EQ(*r->FindUnit("u2"), 2u);
  EXPECT_EQ(r->sequence(), c.sequence());
  EXPECT_EQ(*r->last_step(), 4);
  ASSERT_EQ(r->recovery().size(), c.recovery().size());
  EXPECT_EQ(r->recovery()[0].action, Action::kClip);
  EXPECT_EQ(r->recovery()[0].clip_min_scale, 0.3);
  for (uint32_t u = 0; u < 3; ++u) {
    EXPECT_TRUE(SameBits(r->unit(u).mu, c.unit(u).mu));
    EXPECT_EQ(r->Window(u), c.Window(u));
  }
  EXPECT_EQ(r->stats().denials, 1u);
  // The pending admin release is still reported by the next decision.
  Decision a = Step(c, 5, {Norm(0, 1.0)});
  Decision b = Step(*r, 5, {Norm(0, 1.0)});
  EXPECT_EQ(DiffDecisions(a, b), "");
  EXPECT_EQ(b.released, std::vector<uint32_t>{0});
}

// next_lag (announced, not yet in force) and the last decision's
// global_skip survive a round trip: the restored controller's next decision
// uses the announced lag, and a decision rebuilt from the state has the
// original's digest.
TEST(StateCodec, RoundTripKeepsNextLagAndLastGlobalSkip) {
  ControllerConfig cfg;
  cfg.warmup = 2;
  cfg.lag = 3;
  Controller c = MakeController(cfg, 2);
  Flat(c, 0, 4, 2);
  Decision nan = Step(c, 4, {NonFinite(0), Norm(1, 1.0)});
  ASSERT_TRUE(nan.global_skip);
  cfg.lag = 1;  // announced by the next decision, in force after it
  ASSERT_TRUE(c.SetConfig(cfg).ok());
  StatusOr<Controller> r =
      ControllerStateCodec::RestoreFromString(ControllerStateCodec::SaveToString(c));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->last_global_skip());
  EXPECT_EQ(DigestOf(*r->last_apply(), r->recovery(), r->last_global_skip()), nan.digest);
  EXPECT_EQ(r->next_lag(), 3);
  Decision a = Step(c, 5, {Norm(0, 1.0)});
  Decision b = Step(*r, 5, {Norm(0, 1.0)});
  EXPECT_EQ(DiffDecisions(a, b), "");
  EXPECT_EQ(b.apply_step, 8);
  EXPECT_EQ(b.next_lag, 1);
  EXPECT_FALSE(r->last_global_skip());
}

// A state written before next_lag existed has none: the config's lag is
// the next one. An out-of-range next_lag is refused.
TEST(StateCodec, StateWithoutNextLagUsesTheConfigLag) {
  ControllerConfig cfg;
  cfg.lag = 2;
  Controller c = MakeController(cfg, 1);
  Step(c, 0, {Norm(0, 1.0)});
  v1::ControllerState s;
  ControllerStateCodec::Save(c, &s);
  EXPECT_TRUE(s.has_next_lag());
  s.clear_has_next_lag();
  s.clear_next_lag();
  s.mutable_config()->set_lag(5);
  StatusOr<Controller> r = ControllerStateCodec::Restore(s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->next_lag(), 5);
  EXPECT_EQ(Step(*r, 1, {Norm(0, 1.0)}).apply_step, 6);

  ControllerStateCodec::Save(c, &s);
  s.set_next_lag(ControllerConfig::kMaxLag + 1);
  EXPECT_EQ(ControllerStateCodec::Restore(s).status().code(), StatusCode::kDataLoss);
  s.set_next_lag(-1);
  EXPECT_EQ(ControllerStateCodec::Restore(s).status().code(), StatusCode::kDataLoss);
}

TEST(StateCodec, RejectsGarbageAndHostileState) {
  EXPECT_EQ(ControllerStateCodec::RestoreFromString("\xff\xff\xff garbage").status().code(),
            StatusCode::kDataLoss);
  v1::ControllerState good;
  ControllerStateCodec::Save(Busy(), &good);

  v1::ControllerState s = good;
  s.set_format_version(99);
  EXPECT_EQ(ControllerStateCodec::Restore(s).status().code(), StatusCode::kDataLoss);

  s = good;
  s.mutable_config()->set_max_o(-3);
  EXPECT_EQ(ControllerStateCodec::Restore(s).status().code(), StatusCode::kInvalidArgument);

  s = good;
  s.mutable_recovery(0)->set_unit_id(1000);
  EXPECT_FALSE(ControllerStateCodec::Restore(s).ok());

  s = good;
  s.mutable_recovery(0)->set_until(s.recovery(0).since());
  EXPECT_FALSE(ControllerStateCodec::Restore(s).ok());

  s = good;
  for (int i = 0; i < 10; ++i) s.mutable_units(0)->add_window(1.0);
  EXPECT_FALSE(ControllerStateCodec::Restore(s).ok());

  s = good;
  s.mutable_units(1)->set_name("u0");  // duplicate unit
  EXPECT_FALSE(ControllerStateCodec::Restore(s).ok());

  s = good;
  s.mutable_units(0)->set_mu(std::nan(""));
  EXPECT_FALSE(ControllerStateCodec::Restore(s).ok());

  s = good;
  s.mutable_config()->mutable_actions(0)->set_action(static_cast<v1::Action>(17));
  EXPECT_FALSE(ControllerStateCodec::Restore(s).ok());
}

// Issue 12, item 7: values Register and Observe would never let in.
TEST(StateCodec, RejectsOutOfRangeStepsLocksNamesAndCounters) {
  v1::ControllerState good;
  ControllerStateCodec::Save(Busy(), &good);
  ASSERT_TRUE(good.has_last_step());
  ASSERT_TRUE(ControllerStateCodec::Restore(good).ok());
  auto rejected = [](const v1::ControllerState& s, const std::string& why) {
    StatusOr<Controller> c = ControllerStateCodec::Restore(s);
    EXPECT_FALSE(c.ok()) << why;
    if (!c.ok()) {
      EXPECT_EQ(c.status().code(), StatusCode::kDataLoss) << why;
      for (char ch : c.status().message()) {
        EXPECT_TRUE(ch >= 0x20 && ch <= 0x7e) << why << ": raw byte in the message";
      }
    }
  };
  const int64_t kMax = std::numeric_limits<int64_t>::max();

  v1::ControllerState s = good;
  s.set_last_step(kMax);  // every later step would be refused: a frozen job
  s.set_last_apply(kMax);
  rejected(s, "last_step INT64_MAX");
  s = good;
  s.set_last_step(-5);
  rejected(s, "last_step -5");
  s = good;
  s.set_last_apply(kMax - 3);  // apply + lock_steps overflows
  rejected(s, "last_apply near INT64_MAX");
  s = good;
  s.set_last_apply(s.last_step() - 1);
  rejected(s, "last_apply before last_step");
  s = good;
  s.set_has_last_step(false);
  rejected(s, "last_apply without last_step");

  s = good;
  s.mutable_recovery(0)->set_since(kMax - 10);
  s.mutable_recovery(0)->set_until(kMax);
  rejected(s, "lock near INT64_MAX");
  s = good;
  s.mutable_recovery(0)->set_since(-4);
  rejected(s, "negative since");
  s = good;
  s.mutable_recovery(0)->set_until(s.recovery(0).since() + ControllerConfig::kMaxLockSteps + 1);
  rejected(s, "lock longer than lock_steps can be");
  s = good;
  s.mutable_recovery(0)->set_ref_norm(std::nan(""));
  rejected(s, "NaN ref_norm");
  s = good;
  s.mutable_recovery(0)->set_clip_min_scale(7);
  rejected(s, "clip_min_scale 7");

  s = good;
  s.mutable_units(0)->set_name(std::string(1 << 20, 'a') + "\x1b[31m\n[critical] forged");
  rejected(s, "1 MB name with ESC and newline");
  s = good;
  s.mutable_units(0)->set_name("has space");
  rejected(s, "name with a space");
  s = good;
  s.mutable_units(0)->set_name(std::string(257, 'a'));
  rejected(s, "257-byte name");
  s = good;
  s.mutable_units(0)->set_last_step(kMax);
  rejected(s, "unit last_step INT64_MAX");
  s = good;
  s.mutable_units(0)->add_window(std::numeric_limits<double>::infinity());
  rejected(s, "infinite GNMR in a window");

  s = good;
  s.add_admin_released(2);
  s.add_admin_released(2);
  rejected(s, "a unit released twice");
  s = good;
  s.add_admin_released(s.recovery(0).unit_id());
  rejected(s, "a released unit still in recovery");

  s = good;
  s.set_sequence(std::numeric_limits<uint64_t>::max());
  rejected(s, "sequence at the end of its range");
  s = good;
  s.set_config_version(0);
  rejected(s, "config_version 0");
  s = good;
  s.mutable_counters()->set_steps_observed(std::numeric_limits<uint64_t>::max());
  rejected(s, "counter at the end of its range");
  s = good;
  s.mutable_counters()->set_unit_steps_in_force(s.counters().unit_steps_observed() + 1);
  rejected(s, "more unit-steps in force than observed");
  s = good;
  while (s.counters().admissions_by_trigger_size() <= kNumTriggers) {
    s.mutable_counters()->add_admissions_by_trigger(1);
  }
  rejected(s, "an admission counter per trigger and one more");

  // The edges themselves are fine.
  s = good;
  s.set_last_step(kMaxStep);
  s.set_last_apply(kMaxStep + ControllerConfig::kMaxLag);
  s.mutable_units(0)->set_name(std::string(256, '~'));
  EXPECT_TRUE(ControllerStateCodec::Restore(s).ok());
}
}  // namespace
}  // namespace gnmr::testing
