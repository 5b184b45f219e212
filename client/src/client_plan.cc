// Client::PlanFor and Ack, and the plan-validity rule of PlanFor
// (docs/safety.md, "Plan validity"): which decision covers a step, when to
// wait for one, and why a plan has none. PlanFor reads the decision cache
// under a short lock (waiting only as ClientOptions::decision_wait allows,
// and never while disconnected); it never touches the network nor
// allocates in steady state.
//
// Design notes
// - Decisions of a generation are contiguous (sequence + 1) and arrive in
//   order on one stream, and each announces the lag of its successor
//   (next_lag). So a rank knows a decision covering step s is still coming
//   exactly when it observed a step o after the newest decision it holds
//   with max(o + next_lag, newest.apply) <= s: the job decides every step
//   any rank reported. Otherwise the covering decision is one it holds (or
//   none exists, or it was made before this rank attached).
// - After a live switch (docs/safety.md, rule 3) a step before the new
//   generation's from_step is planned by the retired one, from what the
//   rank holds (it decides nothing more); the new generation decides only
//   steps after its decided_through, so a wait looks at the steps observed
//   after that.
// - Waiting happens only while a decision is coming, the daemon is
//   connected (or a hello is still unanswered, io_loop.cc) and no earlier
//   wait timed out since the last progress or attach (SharedState::slow).
//   A hung or misbehaving daemon costs one decision_wait, not one per step.
// - The rule (FillPlanFromDecisions, RecordObserved) runs under
//   SharedState::mu; the rest of PlanFor (the same-step guard's GPU wait,
//   the norms) does not.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include "client/src/client_impl.h"

namespace gnmr {
namespace {

// The first step this rank observed after `after` into *out; false if there
// is none yet.
bool FirstObservedAfter(const std::deque<int64_t>& observed, int64_t after, int64_t* out) {
  auto it = std::upper_bound(observed.begin(), observed.end(), after);
  if (it == observed.end()) return false;
  *out = *it;
  return true;
}

// Whether a decision covering `step` is still to come (see the notes).
bool Coming(const SharedState& sh, int64_t step) GNMR_REQUIRES(sh.mu) {
  // A retired generation decides nothing more.
  if (sh.cache.PlannerOf(step) != DecisionCache::Planner::kCurrent) return false;
  // Named by a Register response, its start not here yet: what plans the
  // step (it, or a retired generation sent before it) is on its way.
  if (!sh.cache.announced()) return true;
  const CachedDecision* newest = sh.cache.Newest();
  // A restored or imported generation's rebuilt first decision follows its
  // start on the stream: it is coming.
  if (newest == nullptr && sh.cache.current().rebuilt()) return true;
  const int64_t after = sh.cache.DecidedThrough().value_or(std::numeric_limits<int64_t>::min());
  int64_t o = 0;
  if (!FirstObservedAfter(sh.observed, after, &o)) {
    if (!sh.unseen_from_void) return false;
    o = after == std::numeric_limits<int64_t>::min() ? step : after + 1;  // not seen: unknown
  }
  // After a void, the steps from the newest decision to the first observed
  // since are unknown (SharedState::observed_since_void): decided for all
  // this rank can tell, as its peers did not miss them.
  if (sh.observed_since_void > after + 1 && after != std::numeric_limits<int64_t>::min()) {
    o = std::min(o, after + 1);
  }
  int64_t apply = o + sh.cache.NextLag();
  if (newest) apply = std::max(apply, newest->apply_step);
  return apply <= step;
}

void FillFrom(const CachedDecision& d, int64_t step, Plan* out) {
  out->has_decision = true;
  out->miss_reason = MissReason::kNone;
  out->generation = d.generation;
  out->observed_step = d.observed_step;
  out->apply_step = d.apply_step;
  out->sequence = d.sequence;
  out->digest = d.digest;
  // global_skip belongs to the observed step: it acts on the plan only when
  // the decision observed this very step (lag 0); at lag >= 1 the same-step
  // guard has already skipped that step.
  out->global_skip = d.global_skip && d.observed_step == step;
  for (const RecoveryEntry& e : d.entries) {
    if (!e.InForceAt(step)) continue;
    PlanEntry p;
    p.unit = e.unit_id;
    p.action = e.action;
    p.entry = e.entry;
    p.first_step = step == e.since;
    p.since = e.since;
    p.until = e.until;
    p.ref_norm = e.ref_norm;
    p.clip_min_scale = e.clip_min_scale;
    p.denied_clip = e.denied_clip;
    p.trigger = e.reason.trigger;
    p.gnmr = e.reason.gnmr;
    p.delta = e.reason.delta;
    p.fwd_ratio = e.reason.forward.fwd_ratio;
    p.saturation_ratio = e.reason.forward.saturation_ratio;
    p.underflow_ratio = e.reason.forward.underflow_ratio;
    out->entries.push_back(p);
  }
}

void ClearPlan(int64_t step, Plan* out) {
  out->step = step;
  out->has_decision = false;
  out->miss_reason = MissReason::kNoDecisionYet;
  out->generation = 0;
  out->observed_step = -1;
  out->apply_step = -1;
  out->sequence = 0;
  out->digest = 0;
  out->global_skip = false;
  out->nonfinite_observed = false;
  out->skip_step = false;
  out->entries.clear();
}

}  // namespace

double ClipScale(double ref_norm, double norm, double min_scale) {
  if (std::isnan(norm) || std::isinf(norm)) return min_scale;
  if (norm <= 0.0 || std::isnan(ref_norm)) return 1.0;
  return std::clamp(ref_norm / norm, min_scale, 1.0);
}

const PlanEntry* Plan::Find(UnitHandle unit) const {
  for (const PlanEntry& e : entries) {
    if (e.unit == unit) return &e;
  }
  return nullptr;
}

Plan Client::PlanFor(int64_t step) {
  Plan p;
  PlanFor(step, &p);
  return p;
}

void Client::PlanFor(int64_t step, Plan* out) {
  Status s = Guard([&] {
    Impl& m = *impl_;
    m.FillPlanFromDecisions(step, out);
    const bool known = m.observed.step() == step;
    // The same-step guard: this rank's own statistics of `step`.
    out->nonfinite_observed = known && m.NonfiniteAt(step);
    out->skip_step = out->global_skip || out->nonfinite_observed;
    if (out->skip_step) m.counters.CountSkipped(step);
    if (m.any_device && !out->entries.empty()) m.gpu->Drain(false);
    for (PlanEntry& e : out->entries) {
      double norm = std::numeric_limits<double>::quiet_NaN();
      bool have = false;
      if (m.any_device && e.unit < m.units.size() && m.units.unit(e.unit).device != kHostDevice) {
        have = m.gpu->NormAt(step, e.unit, &norm);
      } else {
        have = m.observed.HostNormAt(step, e.unit, &norm);
      }
      e.norm = have ? norm : std::numeric_limits<double>::quiet_NaN();
      e.scale = have ? ClipScale(e.ref_norm, e.norm, e.clip_min_scale) : 1.0;
    }
    return Status::Ok();
  });
  if (!s.ok()) {  // fail-open; the guard still holds if it can be read
    *out = Plan();
    out->step = step;
    out->miss_reason = MissReason::kNotReceived;
  }
  (void)Guard([&] {
    impl_->CountDecisionRun(*out);
    return Status::Ok();
  });
}

Status Client::Ack(const Plan& plan) {
  return Guard([&] {
    Impl& m = *impl_;
    if (!m.started) return FailedPrecondition("Ack before Start");
    if (m.stopped) return Status::Ok();
    AckItem a;
    a.step = plan.step;
    a.sequence = plan.sequence;
    a.digest = plan.digest;
    a.has_decision = plan.has_decision;
    a.generation = plan.generation;
    a.skip_step = plan.skip_step;
    m.outbox->PushAck(a);
    return Status::Ok();
  });
}

void Client::Impl::RecordObserved(int64_t step) {
  MutexLock lock(shared.mu);
  if (shared.unseen_from_void) {
    shared.observed_since_void = step;
    shared.unseen_from_void = false;
  }
  if (step < shared.newest_observed) shared.planned_through = -1;  // a new timeline
  shared.newest_observed = step;
  shared.observed.push_back(step);
  if (shared.observed.size() > SharedState::kObservedKept) shared.observed.pop_front();
}

void Client::Impl::FillPlanFromDecisions(int64_t step, Plan* out) {
  ClearPlan(step, out);
  SharedState& sh = shared;
  MutexLock lock(sh.mu);
  out->generation = sh.cache.generation();
  if (Coming(sh, step)) {
    auto reachable = [&]() GNMR_REQUIRES(sh.mu) {
      return (sh.connected || sh.connecting) && !sh.stopping;
    };
    if (reachable() && !sh.slow && options.decision_wait.count() > 0) {
      const bool arrived = sh.decision_cv.wait_for(
          lock.native(), options.decision_wait,
          [&]() GNMR_REQUIRES(sh.mu) { return !reachable() || !Coming(sh, step); });
      if (!arrived) sh.slow = true;  // no more waiting until progress or an attach
    }
    if (Coming(sh, step)) {
      out->miss_reason = reachable() ? MissReason::kTimeout : MissReason::kDisconnected;
      out->generation = sh.cache.generation();
      counters.CountMissed(step);
      return;
    }
  }
  // The generation that plans the step: after a live switch, a step before
  // the new generation's first is the retired one's (docs/safety.md, rule 3).
  const GenerationDecisions* planner = &sh.cache.current();
  switch (sh.cache.PlannerOf(step, &planner)) {
    case DecisionCache::Planner::kCurrent:
    case DecisionCache::Planner::kRetired:
      break;
    case DecisionCache::Planner::kGone:  // its generation is no longer held
      out->miss_reason = MissReason::kNotReceived;
      counters.CountMissed(step);
      return;
  }
  if (const CachedDecision* d = planner->Covering(step)) {
    FillFrom(*d, step, out);
    sh.planned_through = std::max(sh.planned_through, step);
    return;
  }
  out->generation = planner->generation();
  if (planner->MayMiss(step)) {
    out->miss_reason = MissReason::kNotReceived;
    counters.CountMissed(step);
  }
}

void Client::Impl::CountDecisionRun(const Plan& p) {
  const uint64_t run = counters.CountDecisionRun(p, shared.connected_flag);
  if (run == 0) return;
  shared.problems.Record(ProblemKind::kNoDecisions,
                         "no decision for " + std::to_string(run) + " steps in a row (up to step " +
                             std::to_string(p.step) + ", the last " +
                             MissReasonName(p.miss_reason) +
                             ") although the daemon attached this rank: its plans are "
                             "empty (fail-open); see the daemon's log and missed_decisions");
}

bool Client::Impl::NonfiniteAt(int64_t step) {
  if (observed.host_nonfinite()) return true;
  if (!any_device || !gpu) return false;
  return gpu->NonfiniteAt(step);
}

std::vector<double> Client::UnitNorms(int64_t step) {
  std::vector<double> out;
  Status s = Guard([&] {
    Impl& m = *impl_;
    out.assign(m.units.size(), std::numeric_limits<double>::quiet_NaN());
    if (m.any_device) m.gpu->Drain(false);
    for (UnitHandle u = 0; u < out.size(); ++u) {
      if (m.units.unit(u).device != kHostDevice) {
        if (m.any_device) m.gpu->NormAt(step, u, &out[u]);
      } else {
        m.observed.HostNormAt(step, u, &out[u]);
      }
    }
    return Status::Ok();
  });
  if (!s.ok()) out.clear();  // fail-open: nothing known
  return out;
}

}  // namespace gnmr
