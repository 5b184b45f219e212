#include "daemon/controller/state_codec.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

namespace gnmr {

void ConfigToProto(const ControllerConfig& c, v1::ControllerConfig* out) {
  out->Clear();
  out->set_warmup(c.warmup);
  out->set_ema_decay(c.ema_decay);
  out->set_tau(c.tau);
  out->set_tau_delta(c.tau_delta);
  out->set_gnmr_floor(c.gnmr_floor);
  out->set_short_window(c.short_window);
  out->set_max_o(c.max_o);
  out->set_lock_steps(c.lock_steps);
  out->set_lag(c.lag);
  out->set_entry(static_cast<v1::EntryTreatment>(c.entry));
  out->set_clip_min_scale(c.clip_min_scale);
  for (const ActionRule& r : c.actions) {
    v1::ActionRule* pr = out->add_actions();
    pr->set_pattern(r.pattern);
    pr->set_action(static_cast<v1::Action>(r.action));
    pr->set_clip_min_scale(r.clip_min_scale);
  }
}

namespace {

bool ValidAction(int v) { return v >= 0 && v <= 3; }
bool ValidEntry(int v) { return v >= 0 && v <= 2; }
bool ValidTrigger(int v) { return v >= 0 && v <= 3; }

// The largest decision sequence number a state may carry: far from wrapping
// (a decision a step for 2^62 steps).
constexpr uint64_t kMaxSequence = uint64_t{1} << 62;

}  // namespace

StatusOr<ControllerConfig> ConfigFromProto(const v1::ControllerConfig& in) {
  ControllerConfig c;
  c.warmup = in.warmup();
  c.ema_decay = in.ema_decay();
  c.tau = in.tau();
  c.tau_delta = in.tau_delta();
  c.gnmr_floor = in.gnmr_floor();
  c.short_window = in.short_window();
  c.max_o = in.max_o();
  c.lock_steps = in.lock_steps();
  c.lag = in.lag();
  if (!ValidEntry(in.entry())) return InvalidArgument("config key 'entry' is invalid");
  c.entry = static_cast<EntryTreatment>(in.entry());
  c.clip_min_scale = in.clip_min_scale();
  if (static_cast<size_t>(in.actions_size()) > ControllerConfig::kMaxActionRules) {
    return InvalidArgument("config key 'actions' has too many rules");
  }
  for (const v1::ActionRule& pr : in.actions()) {
    if (!ValidAction(pr.action())) {
      return InvalidArgument("config key 'actions' has an invalid action");
    }
    ActionRule r;
    r.pattern = pr.pattern();
    r.action = static_cast<Action>(pr.action());
    r.clip_min_scale = pr.clip_min_scale();
    c.actions.push_back(std::move(r));
  }
  Status s = c.Validate();
  if (!s.ok()) return s;
  return c;
}

void ControllerStateCodec::Save(const Controller& c, v1::ControllerState* out) {
  out->Clear();
  out->set_format_version(kFormatVersion);
  ConfigToProto(c.config_, out->mutable_config());
  out->set_config_version(c.config_version_);
  for (uint32_t id = 0; id < c.units_.size(); ++id) {
    const UnitState& u = c.units_[id];
    v1::UnitHistory* h = out->add_units();
    h->set_name(u.name);
    h->set_valid_samples(u.valid_samples);
    h->set_mu(u.mu);
    for (double g : c.Window(id)) h->add_window(g);
    h->set_last_step(u.last_step);
    h->set_last_norm(u.last_norm);
    h->set_last_gnmr(u.last_gnmr);
    h->set_last_delta(u.last_delta);
    h->set_last_trigger(static_cast<v1::Trigger>(u.last_trigger));
  }
  for (const RecoveryEntry& e : c.recovery_) {
    v1::RecoveryEntryState* r = out->add_recovery();
    r->set_unit_id(e.unit_id);
    r->set_action(static_cast<v1::Action>(e.action));
    r->set_entry(static_cast<v1::EntryTreatment>(e.entry));
    r->set_since(e.since);
    r->set_until(e.until);
    r->set_clip_min_scale(e.clip_min_scale);
    r->set_ref_norm(e.ref_norm);
  }
  for (uint32_t id : c.admin_released_) out->add_admin_released(id);
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
  for (uint64_t v : s.admissions_by_trigger) k->add_admissions_by_trigger(v);
  for (uint64_t v : s.admissions_by_action) k->add_admissions_by_action(v);
  k->set_denials(s.denials);
  k->set_releases(s.releases);
  k->set_global_skips(s.global_skips);
  k->set_peak_in_recovery(s.peak_in_recovery);
}

StatusOr<Controller> ControllerStateCodec::Restore(
    const v1::ControllerState& in) {
  if (in.format_version() != kFormatVersion) {
    return DataLoss("controller state has format version " +
                    std::to_string(in.format_version()) + ", expected " +
                    std::to_string(kFormatVersion));
  }
  StatusOr<ControllerConfig> config = ConfigFromProto(in.config());
  if (!config.ok()) return config.status();
  StatusOr<Controller> made = Controller::Create(*config);
  if (!made.ok()) return made.status();
  Controller c = std::move(made).value();
  c.config_version_ = in.config_version();

  const int32_t w = c.config_.short_window;
  for (const v1::UnitHistory& h : in.units()) {
    StatusOr<uint32_t> id = c.AddUnit(h.name());
    if (!id.ok()) return DataLoss("controller state: " + id.status().message());
    if (h.valid_samples() < 0 || !std::isfinite(h.mu()) || h.mu() < 0 ||
        h.window_size() > w || !ValidTrigger(h.last_trigger())) {
      return DataLoss("controller state: unit '" + h.name() +
                      "' has out-of-range history");
    }
    UnitState& u = c.units_[*id];
    u.valid_samples = h.valid_samples();
    u.mu = h.mu();
    u.last_step = h.last_step();
    u.last_norm = h.last_norm();
    u.last_gnmr = h.last_gnmr();
    u.last_delta = h.last_delta();
    u.last_trigger = static_cast<Trigger>(h.last_trigger());
    for (double g : h.window()) c.PushWindow(*id, g);
  }
  uint32_t prev_id = 0;
  for (const v1::RecoveryEntryState& r : in.recovery()) {
    const bool ordered = c.recovery_.empty() || r.unit_id() > prev_id;
    if (r.unit_id() >= c.units_.size() || !ordered ||
        !ValidAction(r.action()) || !ValidEntry(r.entry()) ||
        r.until() <= r.since()) {
      return DataLoss("controller state: invalid recovery entry for unit " +
                      std::to_string(r.unit_id()));
    }
    prev_id = r.unit_id();
    RecoveryEntry e;
    e.unit_id = r.unit_id();
    e.action = static_cast<Action>(r.action());
    e.entry = static_cast<EntryTreatment>(r.entry());
    e.since = r.since();
    e.until = r.until();
    e.clip_min_scale = r.clip_min_scale();
    e.ref_norm = r.ref_norm();
    c.recovery_.push_back(e);
  }
  for (uint32_t id : in.admin_released()) {
    if (id >= c.units_.size()) return DataLoss("controller state: bad release");
    c.admin_released_.push_back(id);
  }
  c.has_last_step_ = in.has_last_step();
  c.last_step_ = in.last_step();
  c.has_last_apply_ = in.has_last_apply();
  c.last_apply_ = in.last_apply();
  // Decision sequence numbers only grow (clients order decisions by them,
  // and the next one is sequence + 1): a sequence near the end of its range
  // would wrap to 0 and every later decision would look stale.
  if (in.sequence() > kMaxSequence) {
    return DataLoss("controller state: sequence " + std::to_string(in.sequence()) +
                    " out of range");
  }
  c.sequence_ = in.sequence();
  c.last_global_skip_ = in.last_global_skip();
  // A state written before next_lag existed has none: config.lag is next.
  if (in.has_next_lag()) {
    if (in.next_lag() < 0 || in.next_lag() > ControllerConfig::kMaxLag) {
      return DataLoss("controller state: next_lag " + std::to_string(in.next_lag()) +
                      " out of range");
    }
    c.has_next_lag_ = true;
    c.next_lag_ = in.next_lag();
  }
  const v1::ControllerCounters& k = in.counters();
  ControllerStats& s = c.stats_;
  s.steps_observed = k.steps_observed();
  s.unit_steps_observed = k.unit_steps_observed();
  s.unit_steps_in_force = k.unit_steps_in_force();
  s.inactive_samples = k.inactive_samples();
  s.nonfinite_samples = k.nonfinite_samples();
  for (int i = 0; i < 4 && i < k.admissions_by_trigger_size(); ++i) {
    s.admissions_by_trigger[i] = k.admissions_by_trigger(i);
  }
  for (int i = 0; i < 4 && i < k.admissions_by_action_size(); ++i) {
    s.admissions_by_action[i] = k.admissions_by_action(i);
  }
  s.denials = k.denials();
  s.releases = k.releases();
  s.global_skips = k.global_skips();
  s.peak_in_recovery = k.peak_in_recovery();
  return c;
}

std::string ControllerStateCodec::SaveToString(const Controller& c) {
  v1::ControllerState state;
  Save(c, &state);
  return state.SerializeAsString();
}

StatusOr<Controller> ControllerStateCodec::RestoreFromString(
    const std::string& bytes) {
  v1::ControllerState state;
  if (!state.ParseFromString(bytes)) {
    return DataLoss("controller state is not a valid ControllerState message");
  }
  return Restore(state);
}

}  // namespace gnmr
