// The recovery set's turn of a decision (docs/controller.md, "The decision
// for step t", steps 1-4): release the locks that ended, rank the step's
// candidates and admit them up to max_o (or deny them), then publish the
// set with its digest and sequence number. Apart from controller.cc, which
// checks the samples and keeps each unit's history (EMA mean, short window)
// and so makes the candidates this file ranks.
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "controller/controller.h"

namespace gnmr {
namespace {

// Admission order: non-finite first, then units a quantizer rule (forward
// or backward channel) triggered (the root of a coupled spike before the
// neighbours whose gradients it raised), then risk descending, then unit id.
bool CandidateBefore(Trigger ta, double ra, uint32_t ia, Trigger tb, double rb, uint32_t ib) {
  const bool na = ta == Trigger::kNonFinite, nb = tb == Trigger::kNonFinite;
  if (na != nb) return na;
  const bool fa = IsQuantizerTrigger(ta), fb = IsQuantizerTrigger(tb);
  if (fa != fb) return fa;
  if (!na && ra != rb) return ra > rb;
  return ia < ib;
}

}  // namespace

void Controller::ReleaseEndedLocks(int64_t apply, Decision* d) {
  d->released = std::move(admin_released_);  // an operator's releases since the last step
  admin_released_.clear();
  size_t kept = 0;
  for (size_t i = 0; i < recovery_.size(); ++i) {
    if (recovery_[i].until <= apply) {
      d->released.push_back(recovery_[i].unit_id);
      in_recovery_[recovery_[i].unit_id] = 0;
    } else {
      recovery_[kept++] = recovery_[i];
    }
  }
  recovery_.resize(kept);
  std::sort(d->released.begin(), d->released.end());
  stats_.releases += d->released.size();
}

uint64_t Controller::AdmitCandidates(int64_t step, int64_t apply, Decision* d) {
  std::sort(candidates_.begin(), candidates_.end(), [](const Candidate& a, const Candidate& b) {
    return CandidateBefore(a.trigger, a.risk, a.unit_id, b.trigger, b.risk, b.unit_id);
  });
  // Admitted entries are appended, then merged into unit id order once:
  // O(set + admitted log admitted) per step, whatever the budget.
  const size_t budget = static_cast<size_t>(config_.max_o);
  const size_t held = recovery_.size();
  // denied: clip reaches the observed step's gradient only when this
  // decision applies at that step (a lag change takes force one decision
  // late), and max_o 0 stays monitor only.
  const bool clip_denied = config_.denied == DeniedTreatment::kClip && apply == step && budget > 0;
  last_denied_clips_.clear();
  const bool exclusive = ExclusiveStep();
  const uint32_t fwd_root = ChannelRoot(false);
  const uint32_t bwd_root = ChannelRoot(true);
  // A quantizer-triggered candidate its channel's root coupled.
  auto below_root = [&](const Candidate& c) {
    if (IsForwardTrigger(c.trigger)) {
      return fwd_root != kNoRoot && c.unit_id != fwd_root && c.fwd_order != 0;
    }
    return bwd_root != kNoRoot && c.unit_id != bwd_root && c.bwd_order != 0;
  };
  uint64_t in_force_now = 0;
  for (const Candidate& c : candidates_) {
    if (c.trigger == Trigger::kNonFinite) d->global_skip = true;
    if (in_recovery_[c.unit_id]) continue;  // locked units are not candidates
    const bool coupled = exclusive && c.trigger != Trigger::kNonFinite &&
                         (!IsQuantizerTrigger(c.trigger) || below_root(c));
    if (coupled || recovery_.size() >= budget) {
      d->denied.push_back({c.unit_id, c.trigger, c.risk, clip_denied, coupled, c.evidence.forward});
      if (clip_denied) last_denied_clips_.push_back(DeniedClip(c.unit_id, apply, c.evidence));
      continue;
    }
    const UnitState& u = units_[c.unit_id];
    RecoveryEntry e;
    e.unit_id = c.unit_id;
    e.action = u.resolved.action;
    e.since = apply;
    e.until = apply + config_.lock_steps;
    e.clip_min_scale = u.resolved.clip_min_scale;
    if (e.action == Action::kPromote && apply == step) e.entry = config_.entry;
    e.reason = ReasonOf(c.evidence);
    recovery_.push_back(e);
    in_recovery_[c.unit_id] = 1;
    d->admitted.push_back(c.evidence);
    ++stats_.admissions_by_trigger[static_cast<int>(c.trigger)];
    ++stats_.admissions_by_action[static_cast<int>(e.action)];
    if (e.InForceAt(step)) ++in_force_now;  // lag 0: in force at once
  }
  if (recovery_.size() > held) {
    auto by_id = [](const RecoveryEntry& a, const RecoveryEntry& b) {
      return a.unit_id < b.unit_id;
    };
    const auto mid = recovery_.begin() + static_cast<ptrdiff_t>(held);
    std::sort(mid, recovery_.end(), by_id);
    std::inplace_merge(recovery_.begin(), mid, recovery_.end(), by_id);
  }
  stats_.denials += d->denied.size();
  stats_.denied_clips += last_denied_clips_.size();
  if (d->global_skip) ++stats_.global_skips;
  return in_force_now;
}

void Controller::Publish(int64_t apply, Decision* d) {
  // Reference norms as of this decision: the means after this step's samples.
  for (RecoveryEntry& e : recovery_) e.ref_norm = units_[e.unit_id].mu;
  for (RecoveryEntry& e : last_denied_clips_) e.ref_norm = units_[e.unit_id].mu;
  std::sort(last_denied_clips_.begin(), last_denied_clips_.end(),
            [](const RecoveryEntry& a, const RecoveryEntry& b) { return a.unit_id < b.unit_id; });
  PublishedSet(&d->recovery);
  d->digest = DigestOf(apply, d->recovery, d->global_skip);
  sequence_ += sequence_gap_ ? 2 : 1;
  sequence_gap_ = false;
  d->sequence = sequence_;
  d->next_lag = next_lag_;
  last_global_skip_ = d->global_skip;
}

}  // namespace gnmr
