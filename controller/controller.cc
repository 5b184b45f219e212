#include "controller/controller.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <unordered_set>
#include <utility>

namespace gnmr {
namespace {

constexpr double kEps = 1e-12;

}  // namespace

StatusOr<Controller> Controller::Create(const ControllerConfig& config) {
  GNMR_RETURN_IF_ERROR(config.Validate());
  return Controller(config);
}

Controller::Controller(const ControllerConfig& config) : config_(config), resolver_(config) {}

StatusOr<uint32_t> Controller::AddUnit(const std::string& name) {
  if (name.empty()) return InvalidArgument("unit name is empty");
  if (ids_by_name_.count(name)) {
    return Status(StatusCode::kAlreadyExists, "unit '" + name + "' is already registered");
  }
  if (units_.size() >= std::numeric_limits<uint32_t>::max()) {
    return Status(StatusCode::kResourceExhausted, "too many units");
  }
  const uint32_t id = static_cast<uint32_t>(units_.size());
  UnitState u;
  u.name = name;
  u.resolved = resolver_.Resolve(name);
  units_.push_back(std::move(u));
  ids_by_name_.emplace(name, id);
  const size_t w = static_cast<size_t>(config_.short_window);
  window_values_.resize(units_.size() * w, 0.0);
  window_fill_.push_back(0);
  window_next_.push_back(0);
  seen_epoch_.push_back(0);
  in_recovery_.push_back(0);
  return id;
}

Status Controller::CheckNewUnits(const std::vector<std::string_view>& names) const {
  std::unordered_set<std::string_view> listed;  // views: no copy of every name
  for (const std::string_view name : names) {
    if (name.empty()) return InvalidArgument("unit name is empty");
    if (ids_by_name_.count(std::string(name)) || !listed.insert(name).second) {
      return Status(StatusCode::kAlreadyExists,
                    "unit '" + std::string(name) + "' is already registered");
    }
  }
  if (names.size() > std::numeric_limits<uint32_t>::max() - units_.size()) {
    return Status(StatusCode::kResourceExhausted, "too many units");
  }
  return Status::Ok();
}

std::optional<uint32_t> Controller::FindUnit(const std::string& name) const {
  auto it = ids_by_name_.find(name);
  if (it == ids_by_name_.end()) return std::nullopt;
  return it->second;
}

int Controller::InForceAt(int64_t step) const {
  int n = 0;
  for (const RecoveryEntry& e : recovery_) n += e.InForceAt(step) ? 1 : 0;
  return n;
}

void Controller::PushWindow(uint32_t id, double gnmr) {
  const int32_t w = config_.short_window;
  if (w == 0) return;
  window_values_[static_cast<size_t>(id) * w + window_next_[id]] = gnmr;
  window_next_[id] = (window_next_[id] + 1) % w;
  if (window_fill_[id] < w) ++window_fill_[id];
}

std::vector<double> Controller::Window(uint32_t id) const {
  std::vector<double> out;
  const int32_t w = config_.short_window;
  const int32_t fill = window_fill_[id];
  // Oldest value sits at next - fill (mod w).
  for (int32_t k = 0; k < fill; ++k) {
    const int32_t slot = ((window_next_[id] - fill + k) % w + w) % w;
    out.push_back(window_values_[static_cast<size_t>(id) * w + slot]);
  }
  return out;
}

double Controller::WindowMean(uint32_t id) const {
  // Summed oldest-first so the result does not depend on the ring offset.
  const int32_t w = config_.short_window;
  const int32_t fill = window_fill_[id];
  const double* base = &window_values_[static_cast<size_t>(id) * w];
  double sum = 0.0;
  for (int32_t k = 0; k < fill; ++k) {
    sum += base[((window_next_[id] - fill + k) % w + w) % w];
  }
  return sum / fill;
}

void Controller::ResizeWindows(int32_t new_size) {
  std::vector<double> values(units_.size() * static_cast<size_t>(new_size), 0.0);
  for (uint32_t id = 0; id < units_.size(); ++id) {
    std::vector<double> old = Window(id);
    const size_t keep = std::min(old.size(), static_cast<size_t>(new_size));
    for (size_t k = 0; k < keep; ++k) {
      values[id * static_cast<size_t>(new_size) + k] = old[old.size() - keep + k];
    }
    window_fill_[id] = static_cast<int32_t>(keep);
    window_next_[id] = new_size == 0 ? 0 : static_cast<int32_t>(keep) % new_size;
  }
  window_values_ = std::move(values);
}

void Controller::Evaluate(const UnitSample& s) {
  UnitState& u = units_[s.unit_id];
  u.last_step = last_step_;
  u.last_delta = 0.0;
  u.last_trigger = Trigger::kNone;
  const double norm = std::sqrt(s.sumsq);
  u.last_norm = norm;

  if (s.nonfinite > 0 || !std::isfinite(s.sumsq)) {
    // Non-finite: triggers even in warmup; never enters the history.
    ++stats_.nonfinite_samples;
    u.last_gnmr = 0.0;
    u.last_trigger = Trigger::kNonFinite;
    Admission ev;
    ev.unit_id = s.unit_id;
    ev.trigger = Trigger::kNonFinite;
    ev.norm = norm;
    ev.mu = u.mu;
    ev.nonfinite = s.nonfinite;
    candidates_.push_back(
        {s.unit_id, Trigger::kNonFinite, std::numeric_limits<double>::infinity(), ev, 0, 0});
    return;
  }
  if (s.sumsq == 0.0) {  // inactive: frozen, or an expert with no tokens
    ++stats_.inactive_samples;
    u.last_gnmr = 0.0;
    return;
  }
  const ForwardVerdict fwd = Stronger(EvaluateForward(u, s), EvaluateBackward(u, s));
  if (u.valid_samples < config_.warmup) {
    // Warmup: the mean is the plain average of the samples so far.
    const double n = static_cast<double>(u.valid_samples);
    u.mu = (u.mu * n + norm) / (n + 1.0);
    ++u.valid_samples;
    u.last_gnmr = 0.0;
    if (fwd.trigger != Trigger::kNone) AddCandidate(u, s, fwd, 0.0, 0.0, 0.0);
    return;
  }

  const double mu_before = u.mu;
  const double gnmr = norm / std::max(mu_before, kEps);
  double delta = 0.0;
  bool delta_counts = false;
  if (window_fill_[s.unit_id] > 0) {
    delta = gnmr - WindowMean(s.unit_id);
    delta_counts = gnmr >= config_.gnmr_floor;
  }
  PushWindow(s.unit_id, gnmr);
  u.mu = config_.ema_decay * mu_before +
         (1.0 - config_.ema_decay) * std::min(norm, config_.tau * mu_before);
  ++u.valid_samples;
  u.last_gnmr = gnmr;
  u.last_delta = delta;

  const double gnmr_risk = gnmr / config_.tau;
  const double delta_risk = delta_counts ? delta / config_.tau_delta : 0.0;
  const bool by_gnmr = gnmr >= config_.tau;
  const bool by_delta = delta_counts && delta >= config_.tau_delta;
  if (!by_gnmr && !by_delta && fwd.trigger == Trigger::kNone) return;

  // A quantizer rule names the trigger when one fired (it is the root-cause
  // signal, and it orders the admission); else `delta` only when GNMR alone
  // would not have triggered, so the per-trigger counts show what each
  // rule adds. The risk is the maximum over the unit's channels.
  ForwardVerdict v = fwd;
  if (v.trigger == Trigger::kNone) v.trigger = by_gnmr ? Trigger::kGnmr : Trigger::kDelta;
  v.risk = std::max({gnmr_risk, delta_risk, fwd.risk});
  AddCandidate(u, s, v, gnmr, delta, mu_before);
}

void Controller::AddCandidate(UnitState& u, const UnitSample& s, const ForwardVerdict& v,
                              double gnmr, double delta, double mu_before) {
  u.last_trigger = v.trigger;
  Admission ev;
  ev.unit_id = s.unit_id;
  ev.trigger = v.trigger;
  ev.gnmr = gnmr;
  ev.delta = delta;
  ev.norm = u.last_norm;
  ev.mu = mu_before;
  ev.forward = v.evidence;
  candidates_.push_back({s.unit_id, v.trigger, v.risk, ev, s.fwd_order, s.bwd_order});
}

// One observed step, as docs/controller.md, "The decision for step t" lists
// it: check the samples, fix the apply step, evaluate each unit, then
// release, rank and admit, and publish the set.
Status Controller::Observe(int64_t step, const UnitSample* samples, size_t count, Decision* out) {
  // Everything is checked before any state changes, so an error changes nothing.
  GNMR_RETURN_IF_ERROR(CheckSamples(step, samples, count));
  const int64_t apply = AdvanceTo(step);
  // Units already in recovery that are in force at this observed step.
  uint64_t in_force_now = 0;
  for (const RecoveryEntry& e : recovery_) {
    if (e.InForceAt(step) && seen_epoch_[e.unit_id] == epoch_) ++in_force_now;
  }

  candidates_.clear();
  for (size_t i = 0; i < count; ++i) Evaluate(samples[i]);

  Decision& d = *out;
  d.observed_step = step;
  d.apply_step = apply;
  d.config_version = config_version_;
  d.admitted.clear();
  d.denied.clear();
  d.global_skip = false;
  ReleaseEndedLocks(apply, &d);                      // 1
  in_force_now += AdmitCandidates(step, apply, &d);  // 2-4
  Publish(apply, &d);

  ++stats_.steps_observed;
  stats_.unit_steps_observed += count;
  stats_.unit_steps_in_force += in_force_now;
  stats_.peak_in_recovery = std::max<uint64_t>(stats_.peak_in_recovery, recovery_.size());
  return Status::Ok();
}

Status Controller::CheckSamples(int64_t step, const UnitSample* samples, size_t count) {
  if (has_last_step_ && step <= last_step_) {
    return InvalidArgument("step " + std::to_string(step) +
                           " is not after the last observed step " + std::to_string(last_step_));
  }
  if (step < 0 || step > kMaxStep) {
    return InvalidArgument("step " + std::to_string(step) + " out of range");
  }
  ++epoch_;  // marks the units seen this step (a duplicate is an error)
  for (size_t i = 0; i < count; ++i) {
    const UnitSample& s = samples[i];
    if (s.unit_id >= units_.size()) {
      return NotFound("unknown unit id " + std::to_string(s.unit_id));
    }
    if (seen_epoch_[s.unit_id] == epoch_) {
      return InvalidArgument("unit '" + units_[s.unit_id].name + "' appears twice in step " +
                             std::to_string(step));
    }
    seen_epoch_[s.unit_id] = epoch_;
    if (std::isfinite(s.sumsq) && s.sumsq < 0.0) {  // NaN/Inf: signals
      return InvalidArgument("unit '" + units_[s.unit_id].name + "' has negative sumsq");
    }
    if ((std::isfinite(s.fwd_sumsq) && s.fwd_sumsq < 0.0) || !ForwardCountsFit(s) ||
        !SourceSumsValid(s)) {
      return InvalidArgument("unit '" + units_[s.unit_id].name +
                             "' has inconsistent forward statistics (negative sumsq, more "
                             "saturated or zero elements or blocks than elements, more "
                             "saturated, dead or clamped blocks than blocks, more source "
                             "elements than elements or underflows than source elements, or "
                             "a source sum that is negative or not finite)");
    }
    if ((std::isfinite(s.bwd_sumsq) && s.bwd_sumsq < 0.0) || !BackwardCountsFit(s)) {
      return InvalidArgument("unit '" + units_[s.unit_id].name +
                             "' has inconsistent backward statistics (negative sumsq, or more "
                             "saturated or zero elements than elements)");
    }
  }
  return Status::Ok();
}

int64_t Controller::AdvanceTo(int64_t step) {
  has_last_step_ = true;
  last_step_ = step;
  int64_t apply = step + next_lag();
  if (has_last_apply_) apply = std::max(apply, last_apply_);
  has_last_apply_ = true;
  last_apply_ = apply;
  has_next_lag_ = true;  // announced by this decision, used by the next
  next_lag_ = config_.lag;
  return apply;
}

Status Controller::SetConfig(const ControllerConfig& config) {
  GNMR_RETURN_IF_ERROR(config.Validate());
  // The next decision keeps the lag in force until now (a decision, or the
  // daemon's GenerationStart, may have announced it); the new lag is
  // announced by that decision and used from the one after.
  if (!has_next_lag_) {
    has_next_lag_ = true;
    next_lag_ = config_.lag;
  }
  if (config.short_window != config_.short_window) {
    ResizeWindows(config.short_window);
  }
  config_ = config;
  resolver_ = ActionResolver(config_);
  for (UnitState& u : units_) u.resolved = resolver_.Resolve(u.name);
  ++config_version_;
  return Status::Ok();
}

void Controller::Rewind() {
  has_last_step_ = false;
  last_step_ = 0;
  has_last_apply_ = false;
  last_apply_ = 0;
  // They belonged to the last decision, which is no longer rebuilt.
  last_denied_clips_.clear();
}

Status Controller::Release(uint32_t unit_id) {
  for (size_t i = 0; i < recovery_.size(); ++i) {
    if (recovery_[i].unit_id == unit_id) {
      recovery_.erase(recovery_.begin() + static_cast<ptrdiff_t>(i));
      in_recovery_[unit_id] = 0;
      admin_released_.push_back(unit_id);
      return Status::Ok();
    }
  }
  return NotFound("unit " + std::to_string(unit_id) + " is not in recovery");
}

}  // namespace gnmr
