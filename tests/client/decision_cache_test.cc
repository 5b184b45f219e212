// Decision validation and the plan logic, without a network.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "client/src/decision_cache.h"

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
  EXPECT_TRUE(rejected(Make(5, 6, 1, {{99, Action::kClip, 6, 26}})));  // unknown unit
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
  v1::Decision bad_admit = Make(5, 6, 1, {});
  bad_admit.add_admitted(77);
  EXPECT_TRUE(rejected(bad_admit));
  EXPECT_FALSE(rejected(Make(5, 6, 1, {{10, Action::kClip, 6, 26}})));
}

TEST(DecisionValidator, SequenceMustIncreaseWithinASession) {
  DecisionValidator v = Validator();
  ASSERT_TRUE(v.Validate(Make(1, 2, 7, {})).ok());
  EXPECT_FALSE(v.Validate(Make(2, 3, 7, {})).ok());
  EXPECT_FALSE(v.Validate(Make(2, 3, 6, {})).ok());
  EXPECT_TRUE(v.Validate(Make(2, 3, 8, {})).ok());
  // A daemon restored from an older snapshot restarts lower: new session.
  v.Reset({10, 13, 11, 12});
  EXPECT_TRUE(v.Validate(Make(3, 4, 2, {})).ok());
}

CachedDecision Cached(int64_t observed, int64_t apply, uint64_t seq, const std::vector<E>& set,
                      bool global_skip = false) {
  DecisionValidator v = Validator();
  StatusOr<CachedDecision> c = v.Validate(Make(observed, apply, seq, set, global_skip));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

TEST(DecisionCache, EmptyCacheGivesEmptyPlan) {
  DecisionCache cache;
  Plan p;
  p.entries.resize(3);
  cache.Fill(7, &p);
  EXPECT_FALSE(p.has_decision);
  EXPECT_TRUE(p.entries.empty());
  EXPECT_EQ(p.step, 7);
  EXPECT_EQ(cache.NewestApply(), -1);
  EXPECT_FALSE(cache.HasApply(7));
}

TEST(DecisionCache, PlanUsesNewestDecisionAppliedAtOrBeforeStep) {
  DecisionCache cache;
  cache.Insert(Cached(10, 11, 1, {{10, Action::kPromote, 11, 15}}, /*global_skip=*/true));
  cache.Insert(Cached(11, 12, 2, {{10, Action::kPromote, 11, 15}, {12, Action::kSkip, 12, 14}}));
  Plan p;
  cache.Fill(10, &p);  // before any apply step
  EXPECT_FALSE(p.has_decision);

  cache.Fill(11, &p);
  ASSERT_TRUE(p.has_decision);
  EXPECT_EQ(p.sequence, 1u);
  EXPECT_TRUE(p.global_skip);  // applies exactly at 11
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_TRUE(p.entries[0].first_step);

  cache.Fill(12, &p);
  EXPECT_EQ(p.sequence, 2u);
  EXPECT_FALSE(p.global_skip);
  ASSERT_EQ(p.entries.size(), 2u);
  EXPECT_EQ(p.entries[0].unit, 0u);
  EXPECT_FALSE(p.entries[0].first_step);
  EXPECT_EQ(p.entries[1].unit, 3u);
  EXPECT_TRUE(p.entries[1].first_step);
  EXPECT_EQ(p.entries[1].action, Action::kSkip);

  // No newer decision: the set of seq 2 stays in force until its locks end.
  cache.Fill(14, &p);
  EXPECT_EQ(p.sequence, 2u);
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.entries[0].unit, 0u);
  cache.Fill(15, &p);
  EXPECT_TRUE(p.has_decision);
  EXPECT_TRUE(p.entries.empty());

  EXPECT_TRUE(cache.HasApply(12));
  EXPECT_FALSE(cache.HasApply(13));
  EXPECT_EQ(cache.NewestApply(), 12);
  EXPECT_EQ(cache.NewestObserved(), 11);
}

TEST(DecisionCache, KeepsABoundedHistory) {
  DecisionCache cache;
  for (int64_t s = 0; s < 1000; ++s) cache.Insert(Cached(s, s + 1, s + 1, {}));
  EXPECT_EQ(cache.size(), DecisionCache::kCapacity);
  Plan p;
  cache.Fill(5, &p);  // long gone
  EXPECT_FALSE(p.has_decision);
  cache.Fill(1000, &p);
  EXPECT_EQ(p.apply_step, 1000);
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
