#include "daemon/aggregator/step_aggregator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

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
  RankReport report;
  GNMR_RETURN_IF_ERROR(s.sparse() ? ValidateSparseUnits(rank, s, &report)
                                  : ValidateUnits(rank, s, &report));
  GNMR_RETURN_IF_ERROR(ValidateForward(s));
  GNMR_RETURN_IF_ERROR(ValidateBackward(s));

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
  report.forward.resize(static_cast<size_t>(s.fwd_numel_size()));
  const bool blocks = s.fwd_blocks_size() > 0;        // ValidateForward: all four or none
  const bool source = s.fwd_source_numel_size() > 0;  // the same
  for (int i = 0; i < s.fwd_numel_size(); ++i) {
    report.forward[static_cast<size_t>(i)] = {s.fwd_sumsq(i),
                                              s.fwd_amax(i),
                                              s.fwd_saturated(i),
                                              s.fwd_zeros(i),
                                              s.fwd_numel(i),
                                              ForwardOrderKey(s.fwd_stage(), ForwardPosition(s, i)),
                                              blocks ? s.fwd_blocks(i) : 0,
                                              blocks ? s.fwd_saturated_blocks(i) : 0,
                                              blocks ? s.fwd_dead_blocks(i) : 0,
                                              blocks ? s.fwd_scale_clamps(i) : 0,
                                              source ? s.fwd_source_numel(i) : 0,
                                              source ? s.fwd_underflow(i) : 0,
                                              source ? s.fwd_error_sumsq(i) : 0.0,
                                              source ? s.fwd_source_sumsq(i) : 0.0};
  }
  report.backward.resize(static_cast<size_t>(s.bwd_numel_size()));
  for (int i = 0; i < s.bwd_numel_size(); ++i) {
    const uint32_t position = s.bwd_order_size() > 0 ? s.bwd_order(i) : 0u;
    report.backward[static_cast<size_t>(i)] = {s.bwd_sumsq(i), s.bwd_saturated(i), s.bwd_zeros(i),
                                               s.bwd_numel(i),
                                               BackwardOrderKey(s.fwd_stage(), position)};
  }
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

namespace {

std::string NegativeSumsq(uint32_t id, double sumsq) {
  return "unit id " + std::to_string(id) + " has negative sumsq " + std::to_string(sumsq);
}

}  // namespace

Status StepAggregator::ValidateUnits(uint32_t rank, const v1::StepStats& s, RankReport* report) {
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
  report->slots.resize(n);
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
                             std::to_string(s.step()));
    }
    seen_epoch_[id] = epoch_;
    if (std::isfinite(s.sumsq(i)) && s.sumsq(i) < 0.0) {  // NaN/Inf are signals
      return InvalidArgument(NegativeSumsq(id, s.sumsq(i)));
    }
    report->slots[i] = static_cast<uint32_t>(slot);
  }
  return Status::Ok();
}

Status StepAggregator::ValidateSparseUnits(uint32_t rank, const v1::StepStats& s,
                                           RankReport* report) {
  const int n = s.unit_id_size();
  if (s.sumsq_size() != n || s.amax_size() != n || s.nonfinite_size() != n || s.zeros_size() != n) {
    return InvalidArgument("sparse report: every column must have unit_id's length " +
                           std::to_string(n) + ": sumsq " + std::to_string(s.sumsq_size()) +
                           ", amax " + std::to_string(s.amax_size()) + ", nonfinite " +
                           std::to_string(s.nonfinite_size()) + ", zeros " +
                           std::to_string(s.zeros_size()));
  }
  const size_t units = topology_->num_units();
  report->sparse = true;
  report->slots.resize(n);
  for (int i = 0; i < n; ++i) {  // messages built only on an error: this runs per value
    const uint32_t id = s.unit_id(i);
    if (id >= units || (i > 0 && id <= s.unit_id(i - 1))) {
      const std::string at = "sparse report: unit_id[" + std::to_string(i) + "] = ";
      if (id >= units) {
        return InvalidArgument(at + std::to_string(id) + " is out of range (the job has " +
                               std::to_string(units) + " units)");
      }
      return InvalidArgument(at + std::to_string(id) +
                             (id == s.unit_id(i - 1) ? " repeats" : " is below") + " unit_id[" +
                             std::to_string(i - 1) + "] = " + std::to_string(s.unit_id(i - 1)) +
                             " (ids must strictly increase)");
    }
    if (std::isfinite(s.sumsq(i)) && s.sumsq(i) < 0.0) {  // NaN/Inf are signals
      return InvalidArgument(NegativeSumsq(id, s.sumsq(i)));
    }
  }
  const int64_t missing = topology_->SlotsOfIncreasing(
      rank, s.unit_id().data(), static_cast<size_t>(n), report->slots.data());
  if (missing >= 0) {
    return NotFound("unit id " + std::to_string(s.unit_id(static_cast<int>(missing))) +
                    " is not registered by rank " + std::to_string(rank));
  }
  return Status::Ok();
}

void StepAggregator::StartOver(int64_t last_closed) {
  open_.clear();
  open_bytes_ = 0;
  last_step_of_rank_.clear();
  complete_cursor_ = 0;
  last_closed_ = last_closed;
  held_ = false;
}

void StepAggregator::StartOverLive(int64_t last_closed, int64_t keep_through) {
  std::map<int64_t, OpenStep> kept;
  for (auto& [step, open] : open_) {
    if (step > last_closed && step <= keep_through) kept.emplace(step, std::move(open));
  }
  open_.swap(kept);
  open_bytes_ = 0;
  last_step_of_rank_.clear();
  for (const auto& [step, open] : open_) {
    for (const auto& [rank, report] : open.reports) {
      open_bytes_ += report.Bytes();
      last_step_of_rank_[rank] = step;  // ascending steps: the last wins
    }
  }
  held_ = false;
  complete_cursor_ = 0;
  last_closed_ = last_closed;
}

void StepAggregator::RestartDeadlines(Clock::time_point now) {
  for (auto& [step, open] : open_) {
    open.first_report = now;
    open.overdue_handled = false;
    open.extended = false;
  }
}

bool StepAggregator::Announce(int64_t step, Clock::time_point now) {
  if (held_ || step <= last_closed_ || step > kMaxStep || open_.count(step) != 0) return false;
  const std::optional<int64_t> anchor = StepAnchor();
  // As a report: the first of a timeline may name any step.
  if (anchor && step > *anchor && step - *anchor > options_.max_step_jump) return false;
  // Announced steps take no report bytes, but each is a map entry: they
  // may fill the open steps only up to the bound the reports have.
  if (open_.size() >= options_.max_open_steps) return false;
  OpenStep& open = open_[step];
  open.first_report = now;
  open.last_report = now;
  return true;
}

std::optional<int64_t> StepAggregator::StepAnchor() const {
  if (last_closed_ >= 0) return last_closed_;
  if (!open_.empty()) return open_.begin()->first;
  return std::nullopt;
}

bool StepAggregator::Complete(int64_t step) {
  // A rank's last step only grows (ResetRank and StartOver rewind the
  // cursor), so the ranks before the cursor stay checked for this step.
  if (step != complete_step_) {
    complete_step_ = step;
    complete_cursor_ = 0;
  }
  const std::vector<uint32_t>& ranks = Expected();
  if (complete_cursor_ > ranks.size()) complete_cursor_ = 0;
  for (; complete_cursor_ < ranks.size(); ++complete_cursor_) {
    if (last_step_of_rank(ranks[complete_cursor_]) < step) return false;
  }
  return true;
}

std::optional<StepAggregator::Clock::time_point> StepAggregator::NextDeadline() const {
  if (open_.empty()) return std::nullopt;
  return open_.begin()->second.Deadline(options_.deadline);
}

std::optional<int64_t> StepAggregator::Overdue(Clock::time_point now) {
  if (held_ || open_.empty()) return std::nullopt;
  auto it = open_.begin();
  if (it->second.overdue_handled || now < it->second.Deadline(options_.deadline) ||
      Complete(it->first)) {
    return std::nullopt;
  }
  return it->first;
}

std::vector<uint32_t> StepAggregator::Missing(int64_t step) const {
  std::vector<uint32_t> out;
  for (uint32_t r : Expected()) {
    if (last_step_of_rank(r) < step) out.push_back(r);
  }
  return out;
}

void StepAggregator::Extend(int64_t step, bool longer) {
  auto it = open_.find(step);
  if (it == open_.end()) return;
  it->second.overdue_handled = true;
  it->second.extended = it->second.extended || longer;
}

bool StepAggregator::PopReady(Clock::time_point now, ClosedStep* out) {
  if (held_) {
    while (!open_.empty() &&
           (open_.size() > options_.max_open_steps || open_bytes_ > options_.max_open_bytes)) {
      auto oldest = open_.begin();
      for (const auto& [rank, report] : oldest->second.reports) open_bytes_ -= report.Bytes();
      last_closed_ = oldest->first;
      open_.erase(oldest);
    }
    return false;
  }
  if (open_.empty()) return false;
  auto it = open_.begin();
  const bool complete = Complete(it->first);
  const bool expired = now >= it->second.Deadline(options_.deadline);
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

}  // namespace gnmr
