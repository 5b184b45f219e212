#include "daemon/aggregator/step_aggregator.h"

#include <cmath>
#include <limits>

namespace gnmr {

int64_t StepAggregator::last_step_of_rank(uint32_t rank) const {
  auto it = last_step_of_rank_.find(rank);
  return it == last_step_of_rank_.end() ? -1 : it->second;
}

Status StepAggregator::Add(uint32_t rank, const v1::StepStats& s, Clock::time_point now,
                           Outcome* outcome) {
  const int64_t step = s.step();
  if (step < 0 || step > kMaxStep) {
    return InvalidArgument("step " + std::to_string(step) + " is out of range");
  }
  const std::optional<int64_t> anchor = StepAnchor();
  if (anchor && step > *anchor && step - *anchor > options_.max_step_jump) {
    return Status(StatusCode::kOutOfRange,
                  "step " + std::to_string(step) + " is more than max_step_jump (" +
                      std::to_string(options_.max_step_jump) +
                      ") steps ahead of the job's last closed step " + std::to_string(*anchor) +
                      "; a trainer resumed elsewhere registers as a new instance, or an "
                      "operator rewinds the job (gnmrctl rewind)");
  }
  const int64_t prev = last_step_of_rank(rank);
  if (step <= prev) {
    return InvalidArgument("step " + std::to_string(step) +
                           (step == prev ? " repeats" : " goes back from") + " rank " +
                           std::to_string(rank) + "'s last step " + std::to_string(prev));
  }
  const int n = s.unit_id_size();
  auto optional_len_ok = [n](int len) { return len == n || len == 0; };
  if (s.sumsq_size() != n || !optional_len_ok(s.amax_size()) ||
      !optional_len_ok(s.nonfinite_size()) || !optional_len_ok(s.zeros_size())) {
    return InvalidArgument("columns have different lengths: unit_id " + std::to_string(n) +
                           ", sumsq " + std::to_string(s.sumsq_size()) + ", amax " +
                           std::to_string(s.amax_size()) + ", nonfinite " +
                           std::to_string(s.nonfinite_size()) + ", zeros " +
                           std::to_string(s.zeros_size()));
  }
  RankReport report;
  report.slots.resize(n);
  if (seen_epoch_.size() < topology_->num_units()) seen_epoch_.resize(topology_->num_units(), 0);
  ++epoch_;
  for (int i = 0; i < n; ++i) {
    const uint32_t id = s.unit_id(i);
    const int64_t slot = topology_->SlotOf(rank, static_cast<size_t>(i), id);
    if (slot < 0) {
      return NotFound("unit id " + std::to_string(id) + " is not registered by rank " +
                      std::to_string(rank));
    }
    if (seen_epoch_[id] == epoch_) {
      return InvalidArgument("unit id " + std::to_string(id) + " appears twice in step " +
                             std::to_string(step));
    }
    seen_epoch_[id] = epoch_;
    if (std::isfinite(s.sumsq(i)) && s.sumsq(i) < 0.0) {  // NaN/Inf are signals
      return InvalidArgument("unit id " + std::to_string(id) + " has negative sumsq " +
                             std::to_string(s.sumsq(i)));
    }
    report.slots[i] = static_cast<uint32_t>(slot);
  }

  last_step_of_rank_[rank] = step;
  if (step <= last_closed_) {
    *outcome = Outcome::kLate;
    return Status::Ok();
  }
  *outcome = Outcome::kAccepted;
  report.sumsq.assign(s.sumsq().begin(), s.sumsq().end());
  report.amax.assign(s.amax().begin(), s.amax().end());
  report.nonfinite.assign(s.nonfinite().begin(), s.nonfinite().end());
  report.zeros.assign(s.zeros().begin(), s.zeros().end());
  auto [it, inserted] = open_.try_emplace(step);
  OpenStep& open = it->second;
  if (inserted) open.first_report = now;
  open.last_report = now;
  // A rank that registered again may report an open step again: the
  // newer report replaces its first.
  RankReport& held = open.reports[rank];
  open_bytes_ = open_bytes_ - held.Bytes() + report.Bytes();
  held = std::move(report);
  return Status::Ok();
}

void StepAggregator::StartOver(int64_t last_closed) {
  open_.clear();
  open_bytes_ = 0;
  last_step_of_rank_.clear();
  last_closed_ = last_closed;
}

std::optional<int64_t> StepAggregator::StepAnchor() const {
  if (last_closed_ >= 0) return last_closed_;
  if (!open_.empty()) return open_.begin()->first;
  return std::nullopt;
}

bool StepAggregator::Complete(int64_t step) const {
  for (uint32_t r : topology_->Ranks()) {
    if (last_step_of_rank(r) < step) return false;
  }
  return true;
}

std::optional<StepAggregator::Clock::time_point> StepAggregator::NextDeadline() const {
  if (open_.empty()) return std::nullopt;
  return open_.begin()->second.first_report + options_.deadline;
}

bool StepAggregator::PopReady(Clock::time_point now, ClosedStep* out) {
  if (open_.empty()) return false;
  auto it = open_.begin();
  const bool complete = Complete(it->first);
  const bool expired = now >= it->second.first_report + options_.deadline;
  const bool overflow =
      open_.size() > options_.max_open_steps || open_bytes_ > options_.max_open_bytes;
  if (!complete && !expired && !overflow) return false;
  out->by_deadline = !complete;
  Combine(it->first, it->second, out);
  last_closed_ = it->first;
  for (const auto& [rank, report] : it->second.reports) open_bytes_ -= report.Bytes();
  open_.erase(it);
  return true;
}

void StepAggregator::Combine(int64_t step, OpenStep& open, ClosedStep* out) {
  out->step = step;
  out->first_report = open.first_report;
  out->last_report = open.last_report;
  out->ranks_reported = static_cast<uint32_t>(open.reports.size());
  out->ranks_expected = static_cast<uint32_t>(topology_->Ranks().size());
  out->samples.clear();
  out->incomplete_units = 0;

  acc_.assign(topology_->num_slots(), SlotAcc{0.0, 0.0, 0, 0, 0});
  for (const auto& [rank, r] : open.reports) {  // rank order: deterministic
    const size_t n = r.slots.size();
    for (size_t i = 0; i < n; ++i) {
      SlotAcc& a = acc_[r.slots[i]];
      a.sumsq += r.sumsq[i];
      if (!r.amax.empty() && r.amax[i] > a.amax) a.amax = r.amax[i];
      if (!r.nonfinite.empty()) a.nonfinite += r.nonfinite[i];
      if (!r.zeros.empty()) a.zeros += r.zeros[i];
      ++a.replicas;
    }
  }
  const std::vector<UnitLayout>& units = topology_->units();
  for (uint32_t id = 0; id < units.size(); ++id) {
    const UnitLayout& u = units[id];
    UnitSample sample;
    sample.unit_id = id;
    bool complete = true;
    for (uint32_t k = 0; k < u.shard_count; ++k) {
      const SlotAcc& a = acc_[u.first_slot + k];
      if (a.replicas == 0) {
        complete = false;
        break;
      }
      sample.sumsq += a.sumsq / a.replicas;
      if (a.amax > sample.amax) sample.amax = a.amax;
      sample.nonfinite += a.nonfinite;
      sample.zeros += a.zeros;
      sample.numel += u.shard_numel[k];
    }
    if (complete) {
      out->samples.push_back(sample);
    } else {
      ++out->incomplete_units;
    }
  }
}

}  // namespace gnmr
