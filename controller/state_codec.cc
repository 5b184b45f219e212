#include "controller/state_codec.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "common/unit_name.h"
#include "controller/types/recovery_entry_codec.h"

namespace gnmr {

void ControllerStateCodec::Save(const Controller& c, v1::ControllerState* out) {
  out->Clear();
  out->set_format_version(kFormatVersion);
  ConfigToProto(c.config_, out->mutable_config());
  out->set_config_version(c.config_version_);
  // Exact capacities: a doubling growth would hold up to twice the bytes.
  out->mutable_units()->Reserve(static_cast<int>(c.units_.size()));
  for (uint32_t id = 0; id < c.units_.size(); ++id) {
    const UnitState& u = c.units_[id];
    v1::UnitHistory* h = out->add_units();
    h->set_name(u.name);
    h->set_valid_samples(u.valid_samples);
    h->set_mu(u.mu);
    const std::vector<double> window = c.Window(id);
    h->mutable_window()->Reserve(static_cast<int>(window.size()));
    for (double g : window) h->add_window(g);
    h->set_last_step(u.last_step);
    h->set_last_norm(u.last_norm);
    h->set_last_gnmr(u.last_gnmr);
    h->set_last_delta(u.last_delta);
    h->set_last_trigger(ToProto(u.last_trigger));
    h->set_fwd_valid_samples(u.fwd_valid_samples);
    h->set_fwd_mu(u.fwd_mu);
    h->set_saturation_mu(u.saturation_mu);
    h->set_zeros_mu(u.zeros_mu);
    h->set_block_valid_samples(u.block_valid_samples);
    h->set_saturated_blocks_mu(u.saturated_blocks_mu);
    h->set_dead_blocks_mu(u.dead_blocks_mu);
    h->set_scale_clamps_mu(u.scale_clamps_mu);
    h->set_source_valid_samples(u.source_valid_samples);
    h->set_relative_error_mu(u.relative_error_mu);
    h->set_bwd_valid_samples(u.bwd_valid_samples);
    h->set_bwd_mu(u.bwd_mu);
    h->set_bwd_saturation_mu(u.bwd_saturation_mu);
    h->set_bwd_zeros_mu(u.bwd_zeros_mu);
  }
  for (const RecoveryEntry& e : c.recovery_) RecoveryEntryToProto(e, out->add_recovery());
  for (uint32_t id : c.admin_released_) out->add_admin_released(id);
  for (const RecoveryEntry& e : c.last_denied_clips_) {
    RecoveryEntryToProto(e, out->add_last_denied_clips());
  }
  out->set_has_last_step(c.has_last_step_);
  out->set_last_step(c.last_step_);
  out->set_has_last_apply(c.has_last_apply_);
  out->set_last_apply(c.last_apply_);
  out->set_sequence(c.sequence_);
  out->set_last_global_skip(c.last_global_skip_);
  out->set_has_next_lag(c.has_next_lag_);
  out->set_next_lag(c.next_lag_);
  const ControllerStats& s = c.stats_;
  v1::ControllerCounters* k = out->mutable_counters();
  k->set_steps_observed(s.steps_observed);
  k->set_unit_steps_observed(s.unit_steps_observed);
  k->set_unit_steps_in_force(s.unit_steps_in_force);
  k->set_inactive_samples(s.inactive_samples);
  k->set_nonfinite_samples(s.nonfinite_samples);
  // The four gradient triggers always, the forward ones once used: a
  // daemon from before the forward channel reads states without them.
  int triggers = kNumTriggers;
  while (triggers > 4 && s.admissions_by_trigger[triggers - 1] == 0) --triggers;
  for (int i = 0; i < triggers; ++i) k->add_admissions_by_trigger(s.admissions_by_trigger[i]);
  k->set_forward_samples(s.forward_samples);
  k->set_backward_samples(s.backward_samples);
  for (uint64_t v : s.admissions_by_action) k->add_admissions_by_action(v);
  k->set_denials(s.denials);
  k->set_denied_clips(s.denied_clips);
  k->set_releases(s.releases);
  k->set_global_skips(s.global_skips);
  k->set_peak_in_recovery(s.peak_in_recovery);
}

namespace {

// Counters and sequence numbers a state may carry: far from wrapping.
constexpr uint64_t kMaxCount = uint64_t{1} << 62;

Status Bad(const std::string& what) { return DataLoss("controller state: " + what); }

std::string Str(int64_t v) { return std::to_string(v); }

bool Fraction(double v) { return v >= 0 && v <= 1; }

bool HistoryInRange(const v1::UnitHistory& h, int32_t short_window) {
  bool window_ok = h.window_size() <= short_window;
  for (double g : h.window()) window_ok = window_ok && std::isfinite(g) && g >= 0;
  return !(h.valid_samples() < 0 || static_cast<uint64_t>(h.valid_samples()) > kMaxCount ||
           !std::isfinite(h.mu()) || h.mu() < 0 || !window_ok || !ValidTrigger(h.last_trigger()) ||
           h.last_step() < -1 || h.last_step() > kMaxStep || h.fwd_valid_samples() < 0 ||
           static_cast<uint64_t>(h.fwd_valid_samples()) > kMaxCount || !std::isfinite(h.fwd_mu()) ||
           h.fwd_mu() < 0 || !(h.saturation_mu() >= 0 && h.saturation_mu() <= 1) ||
           !(h.zeros_mu() >= 0 && h.zeros_mu() <= 1) || h.block_valid_samples() < 0 ||
           static_cast<uint64_t>(h.block_valid_samples()) > kMaxCount ||
           !Fraction(h.saturated_blocks_mu()) || !Fraction(h.dead_blocks_mu()) ||
           !Fraction(h.scale_clamps_mu()) || h.source_valid_samples() < 0 ||
           static_cast<uint64_t>(h.source_valid_samples()) > kMaxCount ||
           !std::isfinite(h.relative_error_mu()) || h.relative_error_mu() < 0 ||
           h.bwd_valid_samples() < 0 || static_cast<uint64_t>(h.bwd_valid_samples()) > kMaxCount ||
           !std::isfinite(h.bwd_mu()) || h.bwd_mu() < 0 || !Fraction(h.bwd_saturation_mu()) ||
           !Fraction(h.bwd_zeros_mu()));
}

// The window is the controller's to fill (PushWindow).
void RestoreHistory(const v1::UnitHistory& h, UnitState* u) {
  u->valid_samples = h.valid_samples();
  u->mu = h.mu();
  u->last_step = h.last_step();
  u->last_norm = h.last_norm();
  u->last_gnmr = h.last_gnmr();
  u->last_delta = h.last_delta();
  u->last_trigger = FromProto(h.last_trigger());
  u->fwd_valid_samples = h.fwd_valid_samples();
  u->fwd_mu = h.fwd_mu();
  u->saturation_mu = h.saturation_mu();
  u->zeros_mu = h.zeros_mu();
  u->block_valid_samples = h.block_valid_samples();
  u->saturated_blocks_mu = h.saturated_blocks_mu();
  u->dead_blocks_mu = h.dead_blocks_mu();
  u->scale_clamps_mu = h.scale_clamps_mu();
  u->source_valid_samples = h.source_valid_samples();
  u->relative_error_mu = h.relative_error_mu();
  u->bwd_valid_samples = h.bwd_valid_samples();
  u->bwd_mu = h.bwd_mu();
  u->bwd_saturation_mu = h.bwd_saturation_mu();
  u->bwd_zeros_mu = h.bwd_zeros_mu();
}

bool CountersInRange(const v1::ControllerCounters& k) {
  bool counts_ok =
      k.admissions_by_trigger_size() <= kNumTriggers && k.admissions_by_action_size() <= 4 &&
      k.unit_steps_in_force() <= k.unit_steps_observed() && k.denied_clips() <= k.denials();
  for (uint64_t v :
       {k.steps_observed(), k.unit_steps_observed(), k.unit_steps_in_force(), k.inactive_samples(),
        k.nonfinite_samples(), k.denials(), k.denied_clips(), k.releases(), k.global_skips(),
        k.peak_in_recovery(), k.forward_samples(), k.backward_samples()}) {
    counts_ok = counts_ok && v <= kMaxCount;
  }
  for (uint64_t v : k.admissions_by_trigger()) counts_ok = counts_ok && v <= kMaxCount;
  for (uint64_t v : k.admissions_by_action()) counts_ok = counts_ok && v <= kMaxCount;
  return counts_ok;
}

Status RestoreCounters(const v1::ControllerCounters& k, ControllerStats* s) {
  if (!CountersInRange(k)) return Bad("counters out of range");
  s->steps_observed = k.steps_observed();
  s->unit_steps_observed = k.unit_steps_observed();
  s->unit_steps_in_force = k.unit_steps_in_force();
  s->inactive_samples = k.inactive_samples();
  s->nonfinite_samples = k.nonfinite_samples();
  for (int i = 0; i < k.admissions_by_trigger_size(); ++i) {
    s->admissions_by_trigger[i] = k.admissions_by_trigger(i);
  }
  for (int i = 0; i < k.admissions_by_action_size(); ++i) {
    s->admissions_by_action[i] = k.admissions_by_action(i);
  }
  s->denials = k.denials();
  s->denied_clips = k.denied_clips();
  s->releases = k.releases();
  s->global_skips = k.global_skips();
  s->peak_in_recovery = k.peak_in_recovery();
  s->forward_samples = k.forward_samples();
  s->backward_samples = k.backward_samples();
  return Status::Ok();
}

}  // namespace

// Every value is checked as Register and Observe would check it, so an
// imported state can neither freeze the job (a last step at the end of the
// step range), nor overflow the step arithmetic (apply + lag, since +
// lock_steps), nor bring in a name Register would refuse. Ranges:
//   last_step in [0, kMaxStep]; last_apply in [last_step, last_step +
//   kMaxLag] (apply = max(step + lag, previous apply));
//   recovery: since in [0, kMaxStep + kMaxLag], until - since in
//   [1, kMaxLockSteps], clip_min_scale in [0, 1], ref_norm finite >= 0;
//   unit names per common/unit_name.h, windows finite, unit last_step -1
//   or in [0, kMaxStep]; released ids distinct and not in recovery;
//   counters and the sequence below 2^62, unit-steps in force <= observed,
//   denied clips <= denials; last denied clips per RestoreDeniedClips.
StatusOr<Controller> ControllerStateCodec::Restore(const v1::ControllerState& in) {
  if (in.format_version() != kFormatVersion) {
    return DataLoss("controller state has format version " + std::to_string(in.format_version()) +
                    ", expected " + std::to_string(kFormatVersion));
  }
  StatusOr<ControllerConfig> config = ConfigFromProto(in.config());
  if (!config.ok()) return config.status();
  StatusOr<Controller> made = Controller::Create(*config);
  if (!made.ok()) return made.status();
  Controller c = std::move(made).value();
  if (in.config_version() < 1 || in.config_version() > kMaxCount) {
    return Bad("config_version " + std::to_string(in.config_version()) + " out of range");
  }
  c.config_version_ = in.config_version();
  GNMR_RETURN_IF_ERROR(RestoreUnits(in, &c));
  GNMR_RETURN_IF_ERROR(RestoreRecovery(in, &c));
  GNMR_RETURN_IF_ERROR(RestoreReleased(in, &c));
  GNMR_RETURN_IF_ERROR(RestoreLastSteps(in, &c));
  GNMR_RETURN_IF_ERROR(RestoreDeniedClips(in, &c));
  GNMR_RETURN_IF_ERROR(RestoreSequenceAndLag(in, &c));
  GNMR_RETURN_IF_ERROR(RestoreCounters(in.counters(), &c.stats_));
  return c;
}

Status ControllerStateCodec::RestoreUnits(const v1::ControllerState& in, Controller* c) {
  for (int i = 0; i < in.units_size(); ++i) {
    const v1::UnitHistory& h = in.units(i);
    Status named = CheckUnitName(h.name());
    if (!named.ok()) return Bad("unit " + std::to_string(i) + ": " + named.message());
    if (!HistoryInRange(h, c->config_.short_window)) {
      return Bad("unit '" + h.name() + "' has out-of-range history");
    }
    StatusOr<uint32_t> id = c->AddUnit(h.name());
    if (!id.ok()) return Bad(id.status().message());
    RestoreHistory(h, &c->units_[*id]);
    for (double g : h.window()) c->PushWindow(*id, g);
  }
  return Status::Ok();
}

// In unit id order, one entry per unit (as Observe keeps them).
Status ControllerStateCodec::RestoreRecovery(const v1::ControllerState& in, Controller* c) {
  uint32_t prev_id = 0;
  for (const v1::RecoveryEntryState& r : in.recovery()) {
    const bool ordered = c->recovery_.empty() || r.unit_id() > prev_id;
    const std::string problem = RecoveryEntryProblem(r);
    if (r.unit_id() >= c->units_.size() || !ordered || !problem.empty() || r.denied_clip()) {
      return Bad("invalid recovery entry for unit " + std::to_string(r.unit_id()) + " (since " +
                 Str(r.since()) + ", until " + Str(r.until()) + ")" +
                 (problem.empty() ? (r.denied_clip() ? ": a denied clip holds no lock" : "")
                                  : ": " + problem));
    }
    prev_id = r.unit_id();
    const RecoveryEntry e = RecoveryEntryFromProto(r);
    c->recovery_.push_back(e);
    c->in_recovery_[e.unit_id] = 1;
  }
  return Status::Ok();
}

Status ControllerStateCodec::RestoreReleased(const v1::ControllerState& in, Controller* c) {
  std::vector<uint8_t> released(c->units_.size(), 0);
  for (uint32_t id : in.admin_released()) {
    if (id >= c->units_.size() || released[id] || c->in_recovery_[id]) {
      return Bad("bad release of unit " + std::to_string(id));
    }
    released[id] = 1;
    c->admin_released_.push_back(id);
  }
  return Status::Ok();
}

Status ControllerStateCodec::RestoreLastSteps(const v1::ControllerState& in, Controller* c) {
  if (in.has_last_step()) {
    if (in.last_step() < 0 || in.last_step() > kMaxStep) {
      return Bad("last_step " + Str(in.last_step()) + " out of range [0, " + Str(kMaxStep) + "]");
    }
    c->has_last_step_ = true;
    c->last_step_ = in.last_step();
  }
  if (in.has_last_apply()) {
    if (!in.has_last_step() || in.last_apply() < in.last_step() ||
        in.last_apply() - in.last_step() > ControllerConfig::kMaxLag) {
      return Bad("last_apply " + Str(in.last_apply()) + " is not within " +
                 std::to_string(ControllerConfig::kMaxLag) + " steps after last_step " +
                 (in.has_last_step() ? Str(in.last_step()) : std::string("(none)")));
    }
    c->has_last_apply_ = true;
    c->last_apply_ = in.last_apply();
  }
  return Status::Ok();
}

Status ControllerStateCodec::RestoreSequenceAndLag(const v1::ControllerState& in, Controller* c) {
  if (in.sequence() > kMaxCount) {
    return Bad("sequence " + std::to_string(in.sequence()) + " out of range");
  }
  c->sequence_ = in.sequence();
  c->last_global_skip_ = in.last_global_skip();
  // A state written before next_lag existed has none: config.lag is next.
  if (in.has_next_lag()) {
    if (in.next_lag() < 0 || in.next_lag() > ControllerConfig::kMaxLag) {
      return DataLoss("controller state: next_lag " + std::to_string(in.next_lag()) +
                      " out of range");
    }
    c->has_next_lag_ = true;
    c->next_lag_ = in.next_lag();
  }
  return Status::Ok();
}

// The last decision's denied clips: one-step clips at its apply step, which
// is its observed step (lag 0), of known units not in recovery, in unit id
// order (as Observe makes them).
Status ControllerStateCodec::RestoreDeniedClips(const v1::ControllerState& in, Controller* c) {
  for (const v1::RecoveryEntryState& r : in.last_denied_clips()) {
    const std::string problem = RecoveryEntryProblem(r);
    const bool ordered =
        c->last_denied_clips_.empty() || r.unit_id() > c->last_denied_clips_.back().unit_id;
    if (r.unit_id() >= c->units_.size() || !ordered || !problem.empty() || !r.denied_clip() ||
        c->in_recovery_[r.unit_id()] || !c->has_last_apply_ || r.since() != c->last_apply_ ||
        c->last_apply_ != c->last_step_) {
      return Bad("invalid denied clip for unit " + std::to_string(r.unit_id()) + " (since " +
                 Str(r.since()) + ")" + (problem.empty() ? "" : ": " + problem));
    }
    c->last_denied_clips_.push_back(RecoveryEntryFromProto(r));
  }
  return Status::Ok();
}

std::string ControllerStateCodec::SaveToString(const Controller& c) {
  v1::ControllerState state;
  Save(c, &state);
  return state.SerializeAsString();
}

StatusOr<Controller> ControllerStateCodec::RestoreFromString(const std::string& bytes) {
  v1::ControllerState state;
  if (!state.ParseFromString(bytes)) {
    return DataLoss("controller state is not a valid ControllerState message");
  }
  return Restore(state);
}

}  // namespace gnmr
