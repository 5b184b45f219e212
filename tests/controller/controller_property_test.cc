// Randomized property tests over thousands of generated runs: many units,
// spikes, NaNs, inactive units, step gaps, tiny and huge budgets, run-time
// config changes and rewinds (a trainer restarting from an earlier step).
// The invariants are those of docs/controller.md, "Invariants".
#include <map>
#include <random>
#include <set>

#include "controller/state_codec.h"
#include "tests/controller/controller_test_util.h"

namespace gnmr::testing {
namespace {

struct RunSpec {
  ControllerConfig config;
  int units = 0;
  // steps[k] = (step number, samples)
  std::vector<std::pair<int64_t, std::vector<UnitSample>>> steps;
  // Config replacements before step index k (same max_o: see below).
  std::map<size_t, ControllerConfig> config_changes;
  // Controller::Rewind() before step index k (whose step goes backwards).
  std::set<size_t> rewinds;
};

RunSpec Generate(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  RunSpec r;
  ControllerConfig& c = r.config;
  c.warmup = uni(1, 12);
  c.ema_decay = 0.5 + 0.49 * u01(rng);
  c.tau = 1.5 + 3.0 * u01(rng);
  c.tau_delta = 0.3 + 2.0 * u01(rng);
  c.gnmr_floor = 2.0 * u01(rng);
  c.short_window = uni(0, 6);
  const int budget_kind = uni(0, 3);
  c.max_o = budget_kind == 0 ? 0 : budget_kind == 1 ? 1 : uni(2, 40);
  c.lock_steps = uni(1, 30);
  c.lag = uni(0, 3);
  c.entry = static_cast<EntryTreatment>(uni(0, 2));
  if (uni(0, 1)) c.actions = {{"u1*", Action::kClip, -1.0}, {"u2?", Action::kSkip, 0.5}};
  r.units = uni(1, 40);

  const double spike_p = 0.002 + 0.05 * u01(rng);
  const double nan_p = uni(0, 1) ? 0.002 : 0.0;
  const double inactive_p = uni(0, 1) ? 0.05 : 0.0;
  const double missing_p = uni(0, 1) ? 0.05 : 0.0;
  std::vector<double> base(r.units);
  for (double& b : base) b = std::exp(4.0 * u01(rng) - 2.0);
  std::lognormal_distribution<double> noise(0.0, 0.2);
  const int steps = uni(20, 250);
  int64_t t = uni(0, 5);
  for (int k = 0; k < steps; ++k) {
    std::vector<UnitSample> samples;
    for (int u = 0; u < r.units; ++u) {
      if (u01(rng) < missing_p) continue;  // unit not reported this step
      const double p = u01(rng);
      if (p < nan_p) {
        samples.push_back(NonFinite(u));
      } else if (p < nan_p + inactive_p) {
        samples.push_back(Norm(u, 0.0));
      } else {
        double n = base[u] * noise(rng);
        if (u01(rng) < spike_p) n *= 2.0 + 30.0 * u01(rng);
        samples.push_back(Norm(u, n));
      }
    }
    std::shuffle(samples.begin(), samples.end(), rng);  // order must not matter
    r.steps.emplace_back(t, std::move(samples));
    t += uni(0, 9) == 0 ? uni(2, 5) : 1;  // occasional gaps
    if (uni(0, 40) == 0) {
      ControllerConfig nc = c;  // lag, lock and thresholds move; max_o stays
      nc.lag = uni(0, 3);
      nc.lock_steps = uni(1, 30);
      nc.short_window = uni(0, 6);
      nc.tau = 1.5 + 3.0 * u01(rng);
      r.config_changes[k + 1] = nc;
    }
  }
  return r;
}

// Adds 1-3 rewinds to a generated run: at each, the step numbers jump back
// by 0-40 (not below 0) and go on with the run's own gaps from there.
void AddRewinds(RunSpec& r, uint64_t seed) {
  std::mt19937_64 rng(seed * 7919 + 1);
  const size_t n = r.steps.size();
  const int count = std::uniform_int_distribution<int>(1, 3)(rng);
  for (int i = 0; i < count; ++i) {
    r.rewinds.insert(std::uniform_int_distribution<size_t>(1, n - 1)(rng));
  }
  std::vector<int64_t> orig;
  for (const auto& [t, v] : r.steps) orig.push_back(t);
  for (size_t k = 1; k < n; ++k) {
    if (r.rewinds.count(k)) {
      const int64_t back = std::uniform_int_distribution<int64_t>(0, 40)(rng);
      r.steps[k].first = std::max<int64_t>(0, r.steps[k - 1].first - back);
    } else {
      r.steps[k].first = r.steps[k - 1].first + (orig[k] - orig[k - 1]);
    }
  }
}

std::vector<Decision> RunAll(const RunSpec& r, size_t from, Controller& c) {
  std::vector<Decision> out;
  for (size_t k = from; k < r.steps.size(); ++k) {
    auto change = r.config_changes.find(k);
    if (change != r.config_changes.end()) {
      EXPECT_TRUE(c.SetConfig(change->second).ok());
    }
    if (r.rewinds.count(k)) c.Rewind();
    Decision d;
    Status s = c.Observe(r.steps[k].first, r.steps[k].second, &d);
    EXPECT_TRUE(s.ok()) << s.ToString();
    out.push_back(d);
  }
  return out;
}

// Every unit-step interval admitted, keyed by unit.
struct Lock {
  int64_t since, until;
  bool released = false;
  int64_t release_apply = 0;
};

// Units in force at each step of one segment (the decisions between two
// rewinds: one timeline of steps) never exceed max_o. A lock is in force
// from its `since` (not before the segment's first apply step: earlier
// steps of the segment have no decision) until its end or its release.
void CheckSegmentBudget(const std::vector<Lock>& locks, int64_t first_apply, int max_o) {
  std::map<int64_t, int> in_force;
  for (const Lock& l : locks) {
    const int64_t end = l.released ? std::min(l.until, l.release_apply) : l.until;
    for (int64_t s = std::max(l.since, first_apply); s < end; ++s) ++in_force[s];
  }
  for (auto& [s, n] : in_force) ASSERT_LE(n, max_o) << "at step " << s;
}

void CheckInvariants(const RunSpec& r, const std::vector<Decision>& ds, uint64_t seed) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int max_o = r.config.max_o;
  std::map<uint32_t, Lock> open;
  std::vector<Lock> segment;  // locks released in the current segment
  int64_t prev_apply = std::numeric_limits<int64_t>::min();
  int64_t first_apply = 0;
  int lock_steps = r.config.lock_steps;
  int lag = r.config.lag;
  int next_lag = r.config.lag;  // announced by the previous decision
  for (size_t k = 0; k < ds.size(); ++k) {
    const Decision& d = ds[k];
    if (k == 0 || r.rewinds.count(k)) {  // a new timeline of steps
      if (k > 0) {
        for (auto& [u, l] : open) segment.push_back(l);
        CheckSegmentBudget(segment, first_apply, max_o);
        if (::testing::Test::HasFatalFailure()) return;
      }
      segment.clear();
      prev_apply = std::numeric_limits<int64_t>::min();
      first_apply = d.apply_step;
    }
    auto change = r.config_changes.find(k);
    if (change != r.config_changes.end()) {
      lock_steps = change->second.lock_steps;
      lag = change->second.lag;
    }
    ASSERT_GE(d.apply_step, d.observed_step);
    ASSERT_GE(d.apply_step, prev_apply) << "apply went backwards";
    // The lag announced by the previous decision, the apply never earlier
    // than the last one; a config's lag is announced by the next decision.
    ASSERT_EQ(d.apply_step, std::max(d.observed_step + next_lag, prev_apply));
    ASSERT_EQ(d.next_lag, lag);
    next_lag = d.next_lag;
    prev_apply = d.apply_step;
    ASSERT_LE(static_cast<int>(d.recovery.size()), max_o);
    ASSERT_EQ(d.digest, DigestOf(d.apply_step, d.recovery, d.global_skip));
    for (uint32_t u : d.released) {
      ASSERT_TRUE(open.count(u)) << "released a unit not in recovery";
      Lock l = open[u];
      // Released exactly when its lock has run out: never early.
      ASSERT_GE(d.apply_step, l.until) << "lock shortened";
      l.released = true;
      l.release_apply = d.apply_step;
      segment.push_back(l);
      open.erase(u);
    }
    for (const Admission& a : d.admitted) {
      ASSERT_FALSE(open.count(a.unit_id)) << "admitted a unit in recovery";
      open[a.unit_id] = {0, 0};
    }
    for (const RecoveryEntry& e : d.recovery) {
      ASSERT_TRUE(open.count(e.unit_id));
      Lock& l = open[e.unit_id];
      if (l.until == 0) {  // admitted by this decision
        ASSERT_EQ(e.since, d.apply_step);
        l = {e.since, e.until};
        ASSERT_EQ(e.until - e.since, lock_steps);
        // Entry treatment only for promote whose first step is the observed one.
        const bool entry_step = e.action == Action::kPromote && e.since == d.observed_step;
        ASSERT_EQ(e.entry, entry_step ? r.config.entry : EntryTreatment::kNone);
      }
      // A lock never changes while it is held (also across a rewind).
      ASSERT_EQ(e.since, l.since);
      ASSERT_EQ(e.until, l.until);
      ASSERT_GT(e.until, e.since);
      // ... and is released at the first decision that reaches its end:
      // every lock lasts exactly lock_steps.
      ASSERT_GT(e.until, d.apply_step) << "lock outlived its interval";
    }
    ASSERT_EQ(open.size(), d.recovery.size());
    bool nonfinite = false;
    for (const Admission& a : d.admitted) nonfinite |= a.trigger == Trigger::kNonFinite;
    for (const Denial& x : d.denied) nonfinite |= x.trigger == Trigger::kNonFinite;
    if (nonfinite) {
      ASSERT_TRUE(d.global_skip);
    }
    // Denials happen only on a full budget.
    if (!d.denied.empty()) {
      ASSERT_EQ(static_cast<int>(d.recovery.size()), max_o);
    }
    if (k > 0) {
      ASSERT_EQ(d.sequence, ds[k - 1].sequence + 1);
    }
  }
  // Units in force at any step of each timeline never exceed max_o.
  for (auto& [u, l] : open) segment.push_back(l);
  CheckSegmentBudget(segment, first_apply, max_o);
}

TEST(ControllerProperties, InvariantsHoldOverThousandsOfRuns) {
  uint64_t admissions = 0, denials = 0, nonfinite = 0, full_budget_runs = 0;
  for (uint64_t seed = 1; seed <= 3000; ++seed) {
    RunSpec r = Generate(seed);
    Controller c = MakeController(r.config, r.units);
    std::vector<Decision> ds = RunAll(r, 0, c);
    CheckInvariants(r, ds, seed);
    if (::testing::Test::HasFatalFailure()) return;
    admissions += c.stats().admissions();
    denials += c.stats().denials;
    nonfinite += c.stats().admissions_by_trigger[3];
    full_budget_runs +=
        r.config.max_o > 0 && c.stats().peak_in_recovery == static_cast<uint64_t>(r.config.max_o);
  }
  // The generator must actually exercise the budget, not just pass quietly.
  EXPECT_GT(admissions, 10000u);
  EXPECT_GT(denials, 1000u);
  EXPECT_GT(nonfinite, 100u);
  EXPECT_GT(full_budget_runs, 300u);
}

TEST(ControllerProperties, IdenticalInputsGiveIdenticalDecisions) {
  for (uint64_t seed = 5000; seed < 5500; ++seed) {
    RunSpec r = Generate(seed);
    Controller a = MakeController(r.config, r.units);
    Controller b = MakeController(r.config, r.units);
    std::vector<Decision> da = RunAll(r, 0, a), db = RunAll(r, 0, b);
    ASSERT_EQ(da.size(), db.size());
    for (size_t k = 0; k < da.size(); ++k) {
      ASSERT_EQ(DiffDecisions(da[k], db[k]), "") << "seed " << seed << " k " << k;
    }
  }
}

TEST(ControllerProperties, SampleOrderDoesNotMatter) {
  for (uint64_t seed = 7000; seed < 7200; ++seed) {
    RunSpec r = Generate(seed);
    RunSpec sorted = r;
    for (auto& [t, v] : sorted.steps) {
      std::sort(v.begin(), v.end(),
                [](const UnitSample& x, const UnitSample& y) { return x.unit_id < y.unit_id; });
    }
    Controller a = MakeController(r.config, r.units);
    Controller b = MakeController(r.config, r.units);
    std::vector<Decision> da = RunAll(r, 0, a), db = RunAll(sorted, 0, b);
    for (size_t k = 0; k < da.size(); ++k) {
      ASSERT_EQ(DiffDecisions(da[k], db[k]), "") << "seed " << seed << " k " << k;
    }
  }
}

// A trainer restarted from an earlier step (Controller::Rewind) keeps the
// controller's history and locks; every timeline still has at most max_o
// units in force at any step, since the budget counts the whole recovery
// set (locks from before the rewind included). Rewound runs are
// deterministic and survive a serialize/restore at any point.
TEST(ControllerProperties, InvariantsHoldAcrossRewinds) {
  std::mt19937_64 rng(77);
  uint64_t admissions = 0, denials = 0, held_across = 0;
  for (uint64_t seed = 11000; seed < 12500; ++seed) {
    RunSpec r = Generate(seed);
    AddRewinds(r, seed);
    Controller c = MakeController(r.config, r.units);
    std::vector<Decision> ds = RunAll(r, 0, c);
    CheckInvariants(r, ds, seed);
    if (::testing::Test::HasFatalFailure()) return;
    admissions += c.stats().admissions();
    denials += c.stats().denials;
    for (size_t k : r.rewinds) held_across += ds[k - 1].recovery.empty() ? 0 : 1;

    const size_t cut = std::uniform_int_distribution<size_t>(0, r.steps.size())(rng);
    RunSpec head = r;
    head.steps.resize(cut);
    Controller first = MakeController(r.config, r.units);
    RunAll(head, 0, first);
    StatusOr<Controller> restored =
        ControllerStateCodec::RestoreFromString(ControllerStateCodec::SaveToString(first));
    ASSERT_TRUE(restored.ok()) << restored.status().ToString();
    std::vector<Decision> tail = RunAll(r, cut, *restored);
    ASSERT_EQ(tail.size(), ds.size() - cut);
    for (size_t k = 0; k < tail.size(); ++k) {
      ASSERT_EQ(DiffDecisions(tail[k], ds[cut + k]), "")
          << "seed " << seed << " cut " << cut << " k " << k;
    }
  }
  // Rewinds must meet held locks and full budgets, not only empty sets.
  EXPECT_GT(admissions, 5000u);
  EXPECT_GT(denials, 500u);
  EXPECT_GT(held_across, 500u);
}

TEST(ControllerProperties, SerializeRestoreMidRunContinuesIdentically) {
  std::mt19937_64 rng(42);
  for (uint64_t seed = 9000; seed < 9500; ++seed) {
    RunSpec r = Generate(seed);
    Controller straight = MakeController(r.config, r.units);
    std::vector<Decision> expected = RunAll(r, 0, straight);

    const size_t cut = std::uniform_int_distribution<size_t>(0, r.steps.size())(rng);
    RunSpec head = r;
    head.steps.resize(cut);
    Controller first = MakeController(r.config, r.units);
    RunAll(head, 0, first);
    StatusOr<Controller> restored =
        ControllerStateCodec::RestoreFromString(ControllerStateCodec::SaveToString(first));
    ASSERT_TRUE(restored.ok()) << restored.status().ToString();
    std::vector<Decision> tail = RunAll(r, cut, *restored);
    ASSERT_EQ(tail.size(), expected.size() - cut);
    for (size_t k = 0; k < tail.size(); ++k) {
      ASSERT_EQ(DiffDecisions(tail[k], expected[cut + k]), "")
          << "seed " << seed << " cut " << cut << " k " << k;
    }
    // Counters survive too.
    ASSERT_EQ(restored->stats().unit_steps_in_force, straight.stats().unit_steps_in_force);
    ASSERT_EQ(restored->stats().denials, straight.stats().denials);
  }
}

}  // namespace
}  // namespace gnmr::testing
