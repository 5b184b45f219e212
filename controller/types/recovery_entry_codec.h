// RecoveryEntry <-> its two wire forms: gnmr.v1.RecoveryEntry (in a
// Decision, read by every rank) and gnmr.v1.RecoveryEntryState (in a
// controller checkpoint). The two messages have the same fields, so one
// template writes and one reads both; the checks a received entry must pass
// live here too, so the client and the state codec refuse the same things.
#pragma once

#include <cmath>
#include <string>

#include "controller/types/config_codec.h"
#include "controller/types/decision.h"
#include "gnmr/config.h"

namespace gnmr {

template <typename EntryProto>
void RecoveryEntryToProto(const RecoveryEntry& e, EntryProto* out) {
  out->set_unit_id(e.unit_id);
  out->set_action(ToProto(e.action));
  out->set_entry(ToProto(e.entry));
  out->set_since(e.since);
  out->set_until(e.until);
  out->set_clip_min_scale(e.clip_min_scale);
  out->set_ref_norm(e.ref_norm);
  out->set_denied_clip(e.denied_clip);
  out->set_trigger(ToProto(e.reason.trigger));
  out->set_gnmr(e.reason.gnmr);
  out->set_delta(e.reason.delta);
  out->set_fwd_ratio(e.reason.forward.fwd_ratio);
  out->set_saturation_ratio(e.reason.forward.saturation_ratio);
  out->set_underflow_ratio(e.reason.forward.underflow_ratio);
}

// Why the received entry cannot be in force, or "" when it can: a known
// action and entry treatment, a lock of 1..kMaxLockSteps steps starting in
// [0, kMaxStep + kMaxLag], and finite scales (clip_min_scale in [0, 1],
// ref_norm >= 0), a denied clip one step of action clip, and finite
// figures of why it is in recovery (its trigger may be one this build does
// not know: a newer daemon's, read as none). The unit id is checked by the
// caller, which knows the units.
template <typename EntryProto>
std::string RecoveryEntryProblem(const EntryProto& e) {
  if (!ValidAction(e.action())) return "unknown action " + std::to_string(e.action());
  if (!ValidEntry(e.entry())) return "unknown entry treatment " + std::to_string(e.entry());
  if (e.since() < 0 || e.since() > kMaxStep + ControllerConfig::kMaxLag) {
    return "since " + std::to_string(e.since()) + " out of range";
  }
  if (e.until() <= e.since() || e.until() - e.since() > ControllerConfig::kMaxLockSteps) {
    return "lock [" + std::to_string(e.since()) + ", " + std::to_string(e.until()) +
           ") is empty or longer than " + std::to_string(ControllerConfig::kMaxLockSteps) +
           " steps";
  }
  if (!(e.clip_min_scale() >= 0.0 && e.clip_min_scale() <= 1.0)) {
    return "clip_min_scale outside [0, 1]";
  }
  if (!(e.ref_norm() >= 0.0) || std::isinf(e.ref_norm())) {
    return "ref_norm is not a finite non-negative number";
  }
  if (e.denied_clip() && (e.action() != v1::ACTION_CLIP || e.until() != e.since() + 1)) {
    return "a denied clip must be a one-step clip";
  }
  if (!std::isfinite(e.gnmr()) || !std::isfinite(e.delta()) || !std::isfinite(e.fwd_ratio()) ||
      !std::isfinite(e.saturation_ratio()) || !std::isfinite(e.underflow_ratio())) {
    return "a figure of why the unit is in recovery (gnmr, delta, forward ratios) is not finite";
  }
  return "";
}

// The entry as the controller holds it; call RecoveryEntryProblem first.
template <typename EntryProto>
RecoveryEntry RecoveryEntryFromProto(const EntryProto& e) {
  RecoveryEntry r;
  r.unit_id = e.unit_id();
  r.action = FromProto(e.action());
  r.entry = FromProto(e.entry());
  r.since = e.since();
  r.until = e.until();
  r.clip_min_scale = e.clip_min_scale();
  r.ref_norm = e.ref_norm();
  r.denied_clip = e.denied_clip();
  r.reason.trigger = ValidTrigger(e.trigger()) ? FromProto(e.trigger()) : Trigger::kNone;
  r.reason.gnmr = e.gnmr();
  r.reason.delta = e.delta();
  r.reason.forward.fwd_ratio = e.fwd_ratio();
  r.reason.forward.saturation_ratio = e.saturation_ratio();
  r.reason.forward.underflow_ratio = e.underflow_ratio();
  return r;
}

}  // namespace gnmr
