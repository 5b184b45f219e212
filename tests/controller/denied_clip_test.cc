// `denied: clip` (docs/controller.md, "Denied candidates"): at lag 0 a
// candidate the budget denies gets a one-step clip entry in the published
// set, which holds no budget, is never released, changes the digest, is
// logged as its own event kind, survives a checkpoint (the rebuilt last
// decision keeps its digest), and is refused at any lag but 0.
#include <cmath>
#include <string>
#include <vector>

#include "controller/config_yaml.h"
#include "controller/publish/decision_events.h"
#include "controller/publish/decision_message.h"
#include "controller/state_codec.h"
#include "controller/types/config_codec.h"
#include "tests/controller/controller_test_util.h"

namespace gnmr::testing {
namespace {

// Worked-example thresholds at lag 0 with a budget of one unit: after 3
// flat warmup steps every mu is 1; a spike of 10 and one of 5 both trigger
// (tau 2.5), the larger is admitted, the other denied.
ControllerConfig ClipConfig() {
  ControllerConfig c = WorkedExampleConfig();
  c.lag = 0;
  c.max_o = 1;
  c.denied = DeniedTreatment::kClip;
  return c;
}

const RecoveryEntry* Find(const std::vector<RecoveryEntry>& set, uint32_t unit) {
  for (const RecoveryEntry& e : set) {
    if (e.unit_id == unit) return &e;
  }
  return nullptr;
}

TEST(DeniedClip, DeniedCandidateGetsAOneStepClipToItsMean) {
  Controller c = MakeController(ClipConfig(), 3);
  Flat(c, 0, 3, 3);
  const Decision d = Step(c, 3, {Norm(0, 10.0), Norm(1, 5.0), Norm(2, 1.0)});
  EXPECT_EQ(d.apply_step, 3);
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].unit_id, 0u);
  ASSERT_EQ(d.denied.size(), 1u);
  EXPECT_EQ(d.denied[0].unit_id, 1u);
  EXPECT_TRUE(d.denied[0].clipped);

  // Published: the admitted lock and the denied clip, unit id order.
  ASSERT_EQ(d.recovery.size(), 2u);
  EXPECT_EQ(d.recovery[0].unit_id, 0u);
  EXPECT_FALSE(d.recovery[0].denied_clip);
  const RecoveryEntry& clip = d.recovery[1];
  EXPECT_EQ(clip.unit_id, 1u);
  EXPECT_TRUE(clip.denied_clip);
  EXPECT_EQ(clip.action, Action::kClip);
  EXPECT_EQ(clip.entry, EntryTreatment::kNone);
  EXPECT_EQ(clip.since, 3);
  EXPECT_EQ(clip.until, 4);
  EXPECT_EQ(clip.clip_min_scale, 0.01);
  // Why: the denied sample's trigger and GNMR (5 over a mean of 1).
  EXPECT_EQ(clip.reason.trigger, d.denied[0].trigger);
  EXPECT_NE(clip.reason.trigger, Trigger::kNone);
  EXPECT_GT(clip.reason.gnmr, 4.0);
  EXPECT_GT(d.recovery[0].reason.gnmr, clip.reason.gnmr);  // the admitted one's 10
  // The unit's mean as of the decision, as every clip's target:
  // 0.5 * 1 + 0.5 * min(5, 2.5 * 1) = 1.75.
  EXPECT_DOUBLE_EQ(clip.ref_norm, 1.75);
  EXPECT_DOUBLE_EQ(clip.ref_norm, c.unit(1).mu);

  // Not in the controller's recovery set: no budget, no lock.
  ASSERT_EQ(c.recovery().size(), 1u);
  EXPECT_FALSE(c.InRecovery(1));
  EXPECT_EQ(c.InForceAt(3), 1);
  EXPECT_EQ(c.stats().unit_steps_in_force, 1u);  // costs no high-fidelity step
  EXPECT_EQ(c.stats().peak_in_recovery, 1u);
  EXPECT_EQ(c.stats().denials, 1u);
  EXPECT_EQ(c.stats().denied_clips, 1u);
  ASSERT_EQ(c.last_denied_clips().size(), 1u);
  EXPECT_EQ(c.last_denied_clips()[0].unit_id, 1u);

  // The digest covers the clip; not its marker, which changes nothing a
  // rank applies: a client from before it gets the same digest.
  EXPECT_EQ(d.digest, DigestOf(3, d.recovery, false));
  EXPECT_NE(d.digest, DigestOf(3, c.recovery(), false));
  std::vector<RecoveryEntry> unmarked = d.recovery;
  unmarked[1].denied_clip = false;
  EXPECT_EQ(d.digest, DigestOf(3, unmarked, false));

  // The next step: the clip is gone without a release, and it never held
  // the budget (unit 0's lock still does).
  const Decision next = Step(c, 4, {Norm(0, 1.0), Norm(1, 1.0), Norm(2, 1.0)});
  EXPECT_TRUE(next.released.empty());
  EXPECT_TRUE(next.denied.empty());
  ASSERT_EQ(next.recovery.size(), 1u);
  EXPECT_EQ(next.recovery[0].unit_id, 0u);
  EXPECT_TRUE(c.last_denied_clips().empty());
  EXPECT_EQ(next.digest, DigestOf(4, c.recovery(), false));
  EXPECT_EQ(c.stats().releases, 0u);
}

TEST(DeniedClip, HoldsNoBudgetAndNoLock) {
  Controller c = MakeController(ClipConfig(), 3);
  Flat(c, 0, 3, 3);
  Decision d = Step(c, 3, {Norm(0, 10.0), Norm(1, 5.0), Norm(2, 1.0)});
  ASSERT_EQ(d.denied.size(), 1u);
  // An operator frees the one slot: the clipped unit is a candidate again
  // at once (a lock would have kept it out) and takes the slot.
  ASSERT_TRUE(c.Release(0).ok());
  d = Step(c, 4, {Norm(0, 1.0), Norm(1, 20.0), Norm(2, 1.0)});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].unit_id, 1u);
  EXPECT_TRUE(d.denied.empty());
  EXPECT_EQ(d.released, std::vector<uint32_t>{0u});  // the operator's, not the clip's
  ASSERT_EQ(d.recovery.size(), 1u);
  EXPECT_FALSE(d.recovery[0].denied_clip);
  EXPECT_EQ(d.recovery[0].until, 4 + 3);  // a full lock now
}

TEST(DeniedClip, NoneLeavesTheDecisionAsBefore) {
  ControllerConfig cfg = ClipConfig();
  cfg.denied = DeniedTreatment::kNone;
  Controller plain = MakeController(cfg, 3);
  Flat(plain, 0, 3, 3);
  const Decision d = Step(plain, 3, {Norm(0, 10.0), Norm(1, 5.0), Norm(2, 1.0)});
  ASSERT_EQ(d.denied.size(), 1u);
  EXPECT_FALSE(d.denied[0].clipped);
  ASSERT_EQ(d.recovery.size(), 1u);
  EXPECT_EQ(d.digest, DigestOf(3, plain.recovery(), false));
  EXPECT_EQ(plain.stats().denied_clips, 0u);
}

TEST(DeniedClip, MonitorOnlyBudgetClipsNothing) {
  ControllerConfig cfg = ClipConfig();
  cfg.max_o = 0;  // monitor only: the controller changes no gradient
  Controller c = MakeController(cfg, 2);
  Flat(c, 0, 3, 2);
  const Decision d = Step(c, 3, {Norm(0, 10.0), Norm(1, 5.0)});
  EXPECT_EQ(d.denied.size(), 2u);
  EXPECT_TRUE(d.recovery.empty());
  EXPECT_EQ(c.stats().denied_clips, 0u);
}

TEST(DeniedClip, NonFiniteDenialIsClippedToo) {
  Controller c = MakeController(ClipConfig(), 2);
  Flat(c, 0, 3, 2);
  const Decision d = Step(c, 3, {NonFinite(0), NonFinite(1)});
  EXPECT_TRUE(d.global_skip);  // the step is skipped anyway
  ASSERT_EQ(d.denied.size(), 1u);
  EXPECT_TRUE(d.denied[0].clipped);
  const RecoveryEntry* e = Find(d.recovery, d.denied[0].unit_id);
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->denied_clip);
  EXPECT_DOUBLE_EQ(e->ref_norm, 1.0);  // a non-finite sample leaves mu alone
}

TEST(DeniedClip, OnlyWhenTheDecisionAppliesAtTheObservedStep) {
  // lag 1 -> lag 0 with denied: clip in one change: the next decision still
  // uses lag 1 (announced), so it cannot clip; the one after can.
  ControllerConfig cfg = ClipConfig();
  cfg.lag = 1;
  cfg.denied = DeniedTreatment::kNone;
  Controller c = MakeController(cfg, 3);
  Flat(c, 0, 3, 3);
  ASSERT_TRUE(c.SetConfig(ClipConfig()).ok());
  Decision d = Step(c, 3, {Norm(0, 10.0), Norm(1, 5.0), Norm(2, 1.0)});
  EXPECT_EQ(d.apply_step, 4);
  ASSERT_EQ(d.denied.size(), 1u);
  EXPECT_FALSE(d.denied[0].clipped);
  EXPECT_EQ(Find(d.recovery, 1), nullptr);
  d = Step(c, 4, {Norm(0, 10.0), Norm(1, 5.0), Norm(2, 1.0)});
  EXPECT_EQ(d.apply_step, 4);
  ASSERT_EQ(d.denied.size(), 1u);
  EXPECT_TRUE(d.denied[0].clipped);
  ASSERT_NE(Find(d.recovery, 1), nullptr);
  EXPECT_EQ(Find(d.recovery, 1)->since, 4);
}

TEST(DeniedClip, LoggedAsItsOwnEventKind) {
  Controller c = MakeController(ClipConfig(), 3);
  Flat(c, 0, 3, 3);
  const Decision d = Step(c, 3, {Norm(0, 10.0), Norm(1, 5.0), Norm(2, 1.0)});
  std::vector<v1::Event> events;
  AppendDecisionEvents(d, c, 0.0, &events);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind(), v1::EVENT_KIND_ADMISSION);
  const v1::Event& e = events[1];
  EXPECT_EQ(e.kind(), v1::EVENT_KIND_DENIED_CLIP);
  EXPECT_EQ(e.unit(), "u1");
  EXPECT_EQ(e.action(), v1::ACTION_CLIP);
  EXPECT_EQ(e.until(), 4);
  EXPECT_EQ(e.trigger(), v1::TRIGGER_GNMR);
  EXPECT_DOUBLE_EQ(e.mu(), 1.75);
}

// attribution: exclusive: the neighbour is left out for its coupling, not
// the budget (max_o 3 has room), and its event says so.
TEST(DeniedClip, ACoupledDenialSaysWhyInItsEvent) {
  ControllerConfig cfg = ClipConfig();
  cfg.max_o = 3;
  cfg.attribution = Attribution::kExclusive;
  Controller c = MakeController(cfg, 3);
  auto sample = [](uint32_t unit, double grad_norm, double fwd_norm) {
    UnitSample s = Norm(unit, grad_norm);
    s.fwd_sumsq = fwd_norm * fwd_norm;
    s.fwd_amax = fwd_norm;
    s.fwd_numel = 1000;
    return s;
  };
  for (int64_t t = 0; t < 3; ++t) Step(c, t, {sample(0, 1, 2), sample(1, 1, 2), sample(2, 1, 2)});
  const Decision d = Step(c, 3, {sample(0, 1, 60), sample(1, 10, 2), sample(2, 1, 2)});
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0].trigger, Trigger::kForward);
  ASSERT_EQ(d.denied.size(), 1u);
  EXPECT_TRUE(d.denied[0].coupled);
  std::vector<v1::Event> events;
  AppendDecisionEvents(d, c, 0.0, &events);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].kind(), v1::EVENT_KIND_DENIED_CLIP);
  EXPECT_EQ(events[1].unit(), "u1");
  EXPECT_EQ(events[1].detail(),
            "coupled to this step's forward root; clipped to mu at the observed step");
}

TEST(DeniedClip, CheckpointKeepsTheLastDecisionsDigest) {
  Controller c = MakeController(ClipConfig(), 3);
  Flat(c, 0, 3, 3);
  const Decision d = Step(c, 3, {Norm(0, 10.0), Norm(1, 5.0), Norm(2, 1.0)});
  StatusOr<Controller> r =
      ControllerStateCodec::RestoreFromString(ControllerStateCodec::SaveToString(c));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stats().denied_clips, 1u);
  EXPECT_EQ(r->config().denied, DeniedTreatment::kClip);
  Decision rebuilt;
  ASSERT_TRUE(RebuildLastDecision(*r, &rebuilt));
  EXPECT_EQ(rebuilt.digest, d.digest);
  ASSERT_EQ(rebuilt.recovery.size(), d.recovery.size());
  EXPECT_TRUE(rebuilt.recovery[1].denied_clip);
  // And it continues bit-identically.
  const std::vector<UnitSample> next = {Norm(0, 1.0), Norm(1, 9.0), Norm(2, 6.0)};
  EXPECT_EQ(DiffDecisions(Step(c, 4, next), Step(*r, 4, next)), "");

  // A rewind forgets the last decision, its clips with it: still a state.
  ASSERT_FALSE(c.last_denied_clips().empty());
  c.Rewind();
  EXPECT_TRUE(c.last_denied_clips().empty());
  EXPECT_TRUE(ControllerStateCodec::RestoreFromString(ControllerStateCodec::SaveToString(c)).ok());
}

TEST(DeniedClip, RestoreRefusesMisplacedDeniedClips) {
  Controller c = MakeController(ClipConfig(), 3);
  Flat(c, 0, 3, 3);
  Step(c, 3, {Norm(0, 10.0), Norm(1, 5.0), Norm(2, 1.0)});
  v1::ControllerState good;
  ControllerStateCodec::Save(c, &good);
  ASSERT_EQ(good.last_denied_clips_size(), 1);

  v1::ControllerState s = good;  // a clip at another step than the last apply
  s.mutable_last_denied_clips(0)->set_since(2);
  s.mutable_last_denied_clips(0)->set_until(3);
  EXPECT_FALSE(ControllerStateCodec::Restore(s).ok());
  s = good;  // a clip of a unit in recovery
  s.mutable_last_denied_clips(0)->set_unit_id(0);
  EXPECT_FALSE(ControllerStateCodec::Restore(s).ok());
  s = good;  // not marked
  s.mutable_last_denied_clips(0)->set_denied_clip(false);
  EXPECT_FALSE(ControllerStateCodec::Restore(s).ok());
  s = good;  // longer than one step
  s.mutable_last_denied_clips(0)->set_until(5);
  EXPECT_FALSE(ControllerStateCodec::Restore(s).ok());
  s = good;  // a lock marked as a denied clip
  s.mutable_recovery(0)->set_denied_clip(true);
  s.mutable_recovery(0)->set_action(v1::ACTION_CLIP);
  s.mutable_recovery(0)->set_until(s.recovery(0).since() + 1);
  EXPECT_FALSE(ControllerStateCodec::Restore(s).ok());
  s = good;  // more clipped denials than denials
  s.mutable_counters()->set_denied_clips(5);
  EXPECT_FALSE(ControllerStateCodec::Restore(s).ok());
}

// Over a random run, clip changes nothing but the published set: the same
// admissions, releases, denials and locks as none, plus one clip entry per
// denial at its apply step.
TEST(DeniedClip, ChangesOnlyThePublishedSet) {
  ControllerConfig none_cfg = ClipConfig();
  none_cfg.max_o = 2;
  none_cfg.denied = DeniedTreatment::kNone;
  ControllerConfig clip_cfg = none_cfg;
  clip_cfg.denied = DeniedTreatment::kClip;
  constexpr int kUnits = 8;
  Controller a = MakeController(none_cfg, kUnits);
  Controller b = MakeController(clip_cfg, kUnits);
  uint64_t rng = 12345;
  auto next = [&rng] {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(rng >> 33);
  };
  uint64_t clips = 0;
  for (int64_t step = 0; step < 400; ++step) {
    std::vector<UnitSample> samples;
    for (uint32_t u = 0; u < kUnits; ++u) {
      const uint32_t r = next() % 100;
      samples.push_back(r == 0 ? NonFinite(u) : Norm(u, r < 8 ? 4.0 + r : 1.0 + 0.01 * r));
    }
    const Decision da = Step(a, step, samples);
    const Decision db = Step(b, step, samples);
    ASSERT_EQ(a.recovery().size(), b.recovery().size()) << step;
    EXPECT_EQ(da.released, db.released) << step;
    ASSERT_EQ(da.admitted.size(), db.admitted.size()) << step;
    ASSERT_EQ(da.denied.size(), db.denied.size()) << step;
    std::vector<RecoveryEntry> locks;
    size_t clipped = 0;
    for (const RecoveryEntry& e : db.recovery) {
      if (!e.denied_clip) {
        locks.push_back(e);
        continue;
      }
      ++clipped;
      EXPECT_EQ(e.since, step);
      EXPECT_EQ(e.until, step + 1);
      EXPECT_FALSE(b.InRecovery(e.unit_id));
    }
    EXPECT_EQ(clipped, db.denied.size()) << step;
    clips += clipped;
    ASSERT_EQ(locks.size(), da.recovery.size()) << step;
    for (size_t i = 0; i < locks.size(); ++i) {
      EXPECT_EQ(locks[i].unit_id, da.recovery[i].unit_id);
      EXPECT_EQ(locks[i].until, da.recovery[i].until);
    }
    EXPECT_LE(locks.size(), 2u);
    EXPECT_EQ(db.digest == da.digest, clipped == 0) << step;
  }
  EXPECT_GT(clips, 10u) << "the run must deny and clip";
  EXPECT_EQ(b.stats().denied_clips, clips);
  EXPECT_EQ(a.stats().denials, b.stats().denials);
  EXPECT_EQ(a.stats().unit_steps_in_force, b.stats().unit_steps_in_force);
}

TEST(DeniedClipConfig, ClipNeedsLagZero) {
  ControllerConfig c;
  c.denied = DeniedTreatment::kClip;
  c.lag = 1;
  const Status s = c.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'denied'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("lag 0"), std::string::npos) << s.message();
  c.lag = 0;
  EXPECT_TRUE(c.Validate().ok());
  // A running controller refuses a lag change that would leave clip behind.
  Controller running = MakeController(c, 1);
  ControllerConfig lag1 = c;
  lag1.lag = 1;
  EXPECT_EQ(running.SetConfig(lag1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(running.config().lag, 0);
}

TEST(DeniedClipConfig, DefaultIsNoneAndAnOlderPeerMeansNone) {
  EXPECT_EQ(ControllerConfig{}.denied, DeniedTreatment::kNone);
  v1::ControllerConfig wire;
  ConfigToProto(ControllerConfig{}, &wire);
  EXPECT_EQ(wire.denied(), v1::DENIED_NONE);
  wire.clear_denied();  // what a peer before the key sends
  StatusOr<ControllerConfig> back = ConfigFromProto(wire);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->denied, DeniedTreatment::kNone);

  ControllerConfig clip = ClipConfig();
  ConfigToProto(clip, &wire);
  EXPECT_EQ(wire.denied(), v1::DENIED_CLIP);
  back = ConfigFromProto(wire);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, clip);
  wire.set_denied(static_cast<v1::DeniedTreatment>(7));
  EXPECT_FALSE(ConfigFromProto(wire).ok());
}

TEST(DeniedClipConfig, YamlAndOverrides) {
  StatusOr<ControllerConfig> c = ParseControllerConfigYaml("lag: 0\ndenied: clip\n", "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->denied, DeniedTreatment::kClip);
  EXPECT_NE(ControllerConfigToYaml(*c).find("denied: clip\n"), std::string::npos);
  StatusOr<ControllerConfig> again = ParseControllerConfigYaml(ControllerConfigToYaml(*c), "t");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *c);

  StatusOr<ControllerConfig> bad = ParseControllerConfigYaml("denied: clip\n", "t.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'denied'"), std::string::npos);
  EXPECT_FALSE(ParseControllerConfigYaml("lag: 0\ndenied: always\n", "t.yaml").ok());

  ControllerConfig cfg = *c;
  const Status s = ApplyOverride(&cfg, "lag=1");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("denied"), std::string::npos) << s.message();
  EXPECT_EQ(cfg.lag, 0);  // unchanged
  EXPECT_TRUE(ApplyOverride(&cfg, "denied=none").ok());
  EXPECT_TRUE(ApplyOverride(&cfg, "lag=1").ok());
  EXPECT_NE(DifferingKeys(cfg, *c).size(), 0u);
}

}  // namespace
}  // namespace gnmr::testing
