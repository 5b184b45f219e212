// Decision validation and the plan logic, without a network.
#include "client/src/decision_cache.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace gnmr {
namespace {

struct E {
  uint32_t unit;
  Action action;
  int64_t since, until;
  EntryTreatment entry = EntryTreatment::kNone;
};

// A wire decision with a correct digest.
v1::Decision Make(int64_t observed, int64_t apply, uint64_t seq, const std::vector<E>& set,
                  bool global_skip = false) {
  v1::Decision d;
  d.set_observed_step(observed);
  d.set_apply_step(apply);
  d.set_sequence(seq);
  d.set_global_skip(global_skip);
  std::vector<RecoveryEntry> entries;
  for (const E& e : set) {
    v1::RecoveryEntry* p = d.add_recovery();
    p->set_unit_id(e.unit);
    p->set_action(static_cast<v1::Action>(e.action));
    p->set_entry(static_cast<v1::EntryTreatment>(e.entry));
    p->set_since(e.since);
    p->set_until(e.until);
    p->set_clip_min_scale(0.25);
    p->set_ref_norm(2.0);
    RecoveryEntry r;
    r.unit_id = e.unit;
    r.action = e.action;
    r.entry = e.entry;
    r.since = e.since;
    r.until = e.until;
    entries.push_back(r);
  }
  d.set_digest(DigestOf(apply, entries, global_skip));
  return d;
}

// Local units 0..3 are daemon ids 10, 13, 11, 12.
DecisionValidator Validator() {
  DecisionValidator v;
  v.Reset({10, 13, 11, 12});
  return v;
}

TEST(DecisionValidator, AcceptsAndTranslatesToLocalUnitOrder) {
  DecisionValidator v = Validator();
  StatusOr<CachedDecision> c =
      v.Validate(Make(5, 6, 1, {{11, Action::kClip, 6, 26}, {13, Action::kPromote, 3, 23}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->entries.size(), 2u);
  EXPECT_EQ(c->entries[0].unit_id, 1u);  // daemon 13
  EXPECT_EQ(c->entries[0].action, Action::kPromote);
  EXPECT_EQ(c->entries[1].unit_id, 2u);  // daemon 11
  EXPECT_EQ(c->entries[1].ref_norm, 2.0);
  EXPECT_EQ(c->apply_step, 6);
}

TEST(DecisionValidator, RejectsEveryKindOfBadDecision) {
  auto rejected = [](v1::Decision d) {
    DecisionValidator v = Validator();
    return !v.Validate(d).ok();
  };
  EXPECT_TRUE(rejected(Make(5, 6, 1, {{10, Action::kClip, 26, 26}})));  // since == until
  EXPECT_TRUE(rejected(Make(5, 4, 1, {})));                             // apply < observed
  EXPECT_TRUE(rejected(Make(-1, 4, 1, {})));                            // negative step
  EXPECT_TRUE(rejected(Make(5, 6, 1, {{10, Action::kClip, 6, 9}, {10, Action::kSkip, 6, 9}})));
  v1::Decision tampered = Make(5, 6, 1, {{10, Action::kClip, 6, 26}});
  tampered.mutable_recovery(0)->set_until(27);
  EXPECT_TRUE(rejected(tampered));  // digest mismatch
  v1::Decision bad_action = Make(5, 6, 1, {{10, Action::kClip, 6, 26}});
  bad_action.mutable_recovery(0)->set_action(static_cast<v1::Action>(9));
  EXPECT_TRUE(rejected(bad_action));
  v1::Decision bad_scale = Make(5, 6, 1, {{10, Action::kClip, 6, 26}});
  bad_scale.mutable_recovery(0)->set_clip_min_scale(std::nan(""));
  EXPECT_TRUE(rejected(bad_scale));
  // Another rank's unit is checked like this rank's own.
  EXPECT_TRUE(rejected(Make(5, 6, 1, {{99, Action::kClip, 26, 26}})));
  EXPECT_TRUE(rejected(Make(5, 6, 1, {{99, Action::kClip, 6, 9}, {99, Action::kSkip, 6, 9}})));
  EXPECT_FALSE(rejected(Make(5, 6, 1, {{10, Action::kClip, 6, 26}})));
}

// Pipeline stages (or experts) held by other ranks: every rank gets the
// whole set and its digest, and plans its own units only.
TEST(DecisionValidator, AnotherRanksUnitsCountInTheDigestAndStayOutOfThePlan) {
  DecisionValidator v = Validator();
  v1::Decision d = Make(5, 6, 1, {{7, Action::kPromote, 6, 26}, {11, Action::kClip, 6, 26}});
  d.add_admitted(7);
  StatusOr<CachedDecision> c = v.Validate(d);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->entries.size(), 1u);
  EXPECT_EQ(c->entries[0].unit_id, 2u);  // daemon 11
  EXPECT_EQ(c->digest, d.digest());      // acked as every other rank acks it
  d.mutable_recovery(0)->set_until(27);  // the other rank's entry, changed in flight
  EXPECT_FALSE(v.Validate(d).ok());
}

TEST(DecisionValidator, RejectsSequenceZeroAndLagOutOfRange) {
  DecisionValidator v = Validator();
  EXPECT_FALSE(v.Validate(Make(1, 2, 0, {})).ok());
  v1::Decision d = Make(1, 2, 1, {});
  d.set_next_lag(-1);
  EXPECT_FALSE(v.Validate(d).ok());
  d.set_next_lag(ControllerConfig::kMaxLag + 1);
  EXPECT_FALSE(v.Validate(d).ok());
  d.set_next_lag(3);
  StatusOr<CachedDecision> c = v.Validate(d);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->next_lag, 3);
}

CachedDecision Cached(int64_t observed, int64_t apply, uint64_t seq, const std::vector<E>& set,
                      bool global_skip = false, uint64_t generation = 1, int32_t next_lag = 1) {
  DecisionValidator v = Validator();
  v1::Decision d = Make(observed, apply, seq, set, global_skip);
  d.set_generation(generation);
  d.set_next_lag(next_lag);
  StatusOr<CachedDecision> c = v.Validate(d);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

using Insert = DecisionCache::Insert;

TEST(DecisionCache, EmptyCacheCoversNothing) {
  DecisionCache cache;
  EXPECT_EQ(cache.Newest(), nullptr);
  EXPECT_EQ(cache.Covering(7), nullptr);
  EXPECT_FALSE(cache.MayMiss(7));
  cache.StartGeneration(3, 2, 10);
  EXPECT_EQ(cache.generation(), 3u);
  EXPECT_EQ(cache.NextLag(), 2);
}

TEST(DecisionCache, ADecisionCoversTheStepsUntilItsSuccessorApplies) {
  DecisionCache cache;
  // A lag raised from 1 to 2 at seq 2: step 13 has no decision of its own
  // and is covered by seq 2 (announced next_lag 2).
  ASSERT_EQ(cache.Add(Cached(10, 11, 1, {{10, Action::kPromote, 11, 15}})), Insert::kStored);
  ASSERT_EQ(cache.Add(Cached(11, 12, 2, {{10, Action::kPromote, 11, 15}}, false, 1, 2)),
            Insert::kStored);
  ASSERT_EQ(cache.Add(Cached(12, 14, 3, {})), Insert::kStored);
  EXPECT_EQ(cache.Covering(10), nullptr);
  EXPECT_EQ(cache.Covering(11)->sequence, 1u);
  EXPECT_EQ(cache.Covering(12)->sequence, 2u);
  EXPECT_EQ(cache.Covering(13)->sequence, 2u);
  EXPECT_EQ(cache.Covering(14)->sequence, 3u);
  EXPECT_EQ(cache.Covering(99)->sequence, 3u);  // the caller knows nothing newer is coming
  EXPECT_EQ(cache.NextLag(), 1);
  EXPECT_FALSE(cache.MayMiss(10));
}

TEST(DecisionCache, AGapInTheSequenceCoversNothing) {
  DecisionCache cache;
  cache.StartGeneration(1, 1, 1);
  ASSERT_EQ(cache.Add(Cached(10, 11, 4, {})), Insert::kStored);
  ASSERT_EQ(cache.Add(Cached(12, 13, 6, {})), Insert::kStored);  // seq 5 never came
  EXPECT_EQ(cache.Covering(11), nullptr);  // seq 5 (apply 12) may cover 12, 11 unsure
  EXPECT_EQ(cache.Covering(12), nullptr);
  EXPECT_TRUE(cache.MayMiss(12));
  EXPECT_EQ(cache.Covering(13)->sequence, 6u);
  // Held decisions start after the generation's first (seq 1): earlier
  // steps may have a decision this rank does not hold.
  EXPECT_TRUE(cache.MayMiss(5));
  // The missing one arrives late: it fills the gap.
  ASSERT_EQ(cache.Add(Cached(11, 12, 5, {})), Insert::kStored);
  EXPECT_EQ(cache.Covering(11)->sequence, 4u);
  EXPECT_EQ(cache.Covering(12)->sequence, 5u);
}

TEST(DecisionCache, ResentDecisionsAreDuplicatesAndChangedOnesConflicts) {
  DecisionCache cache;
  ASSERT_EQ(cache.Add(Cached(10, 11, 1, {{10, Action::kClip, 11, 15}})), Insert::kStored);
  EXPECT_EQ(cache.Add(Cached(10, 11, 1, {{10, Action::kClip, 11, 15}})), Insert::kDuplicate);
  EXPECT_EQ(cache.Add(Cached(10, 11, 1, {{10, Action::kClip, 11, 16}})), Insert::kConflict);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(DecisionCache, ANewerGenerationVoidsTheOlderOnesDecisions) {
  DecisionCache cache;
  ASSERT_EQ(cache.Add(Cached(100, 101, 50, {{10, Action::kClip, 101, 120}}, false, 1)),
            Insert::kStored);
  ASSERT_EQ(cache.Add(Cached(111, 112, 61, {}, false, 1)), Insert::kStored);
  // An import: its rebuilt decision (lower sequence) starts generation 2.
  ASSERT_EQ(cache.Add(Cached(100, 101, 50, {{10, Action::kClip, 101, 120}}, false, 2)),
            Insert::kStored);
  EXPECT_EQ(cache.generation(), 2u);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.Newest()->sequence, 50u);
  EXPECT_FALSE(cache.MayMiss(100));  // it is the generation's first
  // The killed run's decisions are stale now.
  EXPECT_EQ(cache.Add(Cached(111, 112, 61, {}, false, 1)), Insert::kStale);
  EXPECT_EQ(cache.Newest()->observed_step, 100);
  // A generation started without a decision voids everything too.
  EXPECT_EQ(cache.StartGeneration(3, 0, 51), DecisionCache::Start::kVoided);
  EXPECT_EQ(cache.Newest(), nullptr);
  EXPECT_EQ(cache.NextLag(), 0);
  EXPECT_EQ(cache.StartGeneration(2, 1, 0), DecisionCache::Start::kKept);  // older: ignored
  EXPECT_EQ(cache.generation(), 3u);
  EXPECT_EQ(cache.PlannerOf(0), DecisionCache::Planner::kCurrent);
}

// A live switch (an operator's import or rewind while the ranks train,
// docs/safety.md, rule 3): the old generation still plans the steps before
// the new one's from_step, whenever the rank hears of the switch.
TEST(DecisionCache, ALiveSwitchKeepsTheOldGenerationForTheStepsBeforeIt) {
  DecisionCache cache;
  ASSERT_EQ(cache.Add(Cached(10, 11, 7, {{10, Action::kClip, 11, 40}}, false, 1)), Insert::kStored);
  ASSERT_EQ(cache.Add(Cached(11, 12, 8, {{10, Action::kClip, 11, 40}}, false, 1)), Insert::kStored);
  EXPECT_EQ(cache.StartGeneration(2, 1, 3, DecisionCache::LiveSwitch{13, 11}),
            DecisionCache::Start::kKept);
  EXPECT_EQ(cache.generation(), 2u);
  EXPECT_EQ(cache.Newest(), nullptr);
  EXPECT_EQ(cache.DecidedThrough(), 11);  // generation 2 decides steps after 11
  const GenerationDecisions* retired = nullptr;
  ASSERT_EQ(cache.PlannerOf(12, &retired), DecisionCache::Planner::kRetired);
  ASSERT_NE(retired, nullptr);
  EXPECT_EQ(retired->generation(), 1u);
  EXPECT_EQ(retired->Covering(12)->sequence, 8u);
  EXPECT_EQ(cache.PlannerOf(13), DecisionCache::Planner::kCurrent);
  // A decision of generation 2 that applies before its from_step plans
  // nothing before it; from it on, it does.
  ASSERT_EQ(cache.Add(Cached(12, 13, 3, {}, false, 2)), Insert::kStored);
  EXPECT_EQ(cache.Covering(13)->sequence, 3u);
  EXPECT_EQ(cache.DecidedThrough(), 12);
  // The old generation's decisions are still taken (re-sent history).
  EXPECT_EQ(cache.Add(Cached(11, 12, 8, {{10, Action::kClip, 11, 40}}, false, 1)),
            Insert::kDuplicate);
  // Two more live switches: only kRetiredKept old generations stay; a step
  // before all of them is planned by none the rank holds.
  cache.StartGeneration(3, 1, 0, DecisionCache::LiveSwitch{20, 18});
  cache.StartGeneration(4, 1, 0, DecisionCache::LiveSwitch{30, 28});
  EXPECT_EQ(cache.PlannerOf(25, &retired), DecisionCache::Planner::kRetired);
  EXPECT_EQ(retired->generation(), 3u);
  EXPECT_EQ(cache.PlannerOf(15, &retired), DecisionCache::Planner::kRetired);
  EXPECT_EQ(retired->generation(), 2u);
  EXPECT_EQ(cache.PlannerOf(12), DecisionCache::Planner::kGone);
  // A restart voids them all.
  EXPECT_EQ(cache.StartGeneration(5, 1, 0), DecisionCache::Start::kVoided);
  EXPECT_EQ(cache.PlannerOf(12), DecisionCache::Planner::kCurrent);
}

// A restored (or imported) generation continues an older one's steps: its
// first decision is the older one's last, rebuilt. A step before that
// decision's apply step was planned by the older generation, so a rank
// that has no plan for it missed it; so does one that has not received the
// rebuilt decision yet. Without `rebuilt` (a new incarnation), nothing.
TEST(DecisionCache, StepsBeforeARebuiltFirstDecisionWereTheOlderGenerations) {
  DecisionCache restored;
  restored.StartGeneration(2, 1, 7, std::nullopt, /*rebuilt=*/true);
  EXPECT_TRUE(restored.MayMiss(50));  // the rebuilt decision is not here yet
  ASSERT_EQ(restored.Add(Cached(60, 61, 7, {}, false, 2)), Insert::kStored);
  EXPECT_TRUE(restored.MayMiss(50));
  EXPECT_EQ(restored.Covering(61)->sequence, 7u);
  DecisionCache fresh;
  fresh.StartGeneration(2, 1, 8);
  EXPECT_FALSE(fresh.MayMiss(50));
  ASSERT_EQ(fresh.Add(Cached(60, 61, 8, {}, false, 2)), Insert::kStored);
  EXPECT_FALSE(fresh.MayMiss(50));  // the first steps of a generation: none yet
}

// A rank that registers after a live switch: the Register response names
// the new generation, then the stream sends the retired generation's start
// and decisions, then the current one's start. Until that start arrives the
// rank cannot tell what plans a step (not announced).
TEST(DecisionCache, AGenerationNamedAtRegistrationWaitsForItsStart) {
  DecisionCache cache;
  EXPECT_TRUE(cache.AdoptGeneration(2, 1));
  EXPECT_FALSE(cache.announced());
  EXPECT_EQ(cache.StartGeneration(1, 1, 1), DecisionCache::Start::kKept);  // retired, first
  ASSERT_EQ(cache.Add(Cached(11, 12, 8, {}, false, 1)), Insert::kStored);
  EXPECT_EQ(cache.StartGeneration(2, 1, 3, DecisionCache::LiveSwitch{13, 11}),
            DecisionCache::Start::kKept);
  EXPECT_TRUE(cache.announced());
  const GenerationDecisions* retired = nullptr;
  ASSERT_EQ(cache.PlannerOf(12, &retired), DecisionCache::Planner::kRetired);
  EXPECT_EQ(retired->Covering(12)->sequence, 8u);
  // Announced at once instead: the retired one it was sent is void.
  DecisionCache other;
  other.AdoptGeneration(2, 1);
  other.StartGeneration(1, 1, 1);
  other.Add(Cached(11, 12, 8, {}, false, 1));
  EXPECT_EQ(other.StartGeneration(2, 1, 3), DecisionCache::Start::kVoided);
  EXPECT_EQ(other.PlannerOf(12), DecisionCache::Planner::kCurrent);
  EXPECT_EQ(other.Covering(12), nullptr);
}

TEST(DecisionCache, TheDaemonsGenerationAtRegistrationIsAuthoritative) {
  DecisionCache cache;
  ASSERT_EQ(cache.Add(Cached(10, 11, 7, {}, false, 5)), Insert::kStored);
  EXPECT_FALSE(cache.AdoptGeneration(5, 1));  // the same: nothing changes
  EXPECT_EQ(cache.size(), 1u);
  // A daemon that lost its state starts the job at generation 1 again.
  EXPECT_TRUE(cache.AdoptGeneration(1, 1));
  EXPECT_EQ(cache.generation(), 1u);
  EXPECT_EQ(cache.Newest(), nullptr);
  EXPECT_EQ(cache.Add(Cached(12, 13, 1, {}, false, 1)), Insert::kStored);
  EXPECT_EQ(cache.Covering(13)->sequence, 1u);
}

TEST(DecisionCache, KeepsABoundedHistory) {
  DecisionCache cache;
  for (int64_t s = 0; s < 1000; ++s) cache.Add(Cached(s, s + 1, s + 1, {}));
  EXPECT_EQ(cache.size(), DecisionCache::kCapacity);
  EXPECT_EQ(cache.Covering(5), nullptr);  // long gone
  EXPECT_EQ(cache.Covering(1000)->apply_step, 1000);
  EXPECT_EQ(cache.Covering(999)->apply_step, 999);
}

TEST(ClipScale, Clamps) {
  EXPECT_EQ(ClipScale(1.0, 4.0, 0.1), 0.25);
  EXPECT_EQ(ClipScale(1.0, 100.0, 0.1), 0.1);
  EXPECT_EQ(ClipScale(4.0, 1.0, 0.1), 1.0);
  EXPECT_EQ(ClipScale(1.0, 0.0, 0.1), 1.0);
  EXPECT_EQ(ClipScale(1.0, std::nan(""), 0.1), 0.1);
  EXPECT_EQ(ClipScale(1.0, INFINITY, 0.1), 0.1);
}

}  // namespace
}  // namespace gnmr
