#include "core/config_codec.h"

#include <utility>

namespace gnmr {

// The internal enums and the wire enums share their numbers, so the
// conversions below are casts; these keep that true.
static_assert(static_cast<int>(Action::kPromote) == v1::ACTION_PROMOTE &&
              static_cast<int>(Action::kClip) == v1::ACTION_CLIP &&
              static_cast<int>(Action::kSkip) == v1::ACTION_SKIP &&
              static_cast<int>(Action::kResetState) == v1::ACTION_RESET_STATE &&
              v1::Action_MAX == 3);
static_assert(static_cast<int>(EntryTreatment::kNone) == v1::ENTRY_NONE &&
              static_cast<int>(EntryTreatment::kClip) == v1::ENTRY_CLIP &&
              static_cast<int>(EntryTreatment::kSkip) == v1::ENTRY_SKIP &&
              v1::EntryTreatment_MAX == 2);
static_assert(static_cast<int>(Trigger::kNone) == v1::TRIGGER_NONE &&
              static_cast<int>(Trigger::kGnmr) == v1::TRIGGER_GNMR &&
              static_cast<int>(Trigger::kDelta) == v1::TRIGGER_DELTA &&
              static_cast<int>(Trigger::kNonFinite) == v1::TRIGGER_NONFINITE &&
              v1::Trigger_MAX == 3);

bool ValidAction(int v) { return v >= v1::Action_MIN && v <= v1::Action_MAX; }
bool ValidEntry(int v) { return v >= v1::EntryTreatment_MIN && v <= v1::EntryTreatment_MAX; }
bool ValidTrigger(int v) { return v >= v1::Trigger_MIN && v <= v1::Trigger_MAX; }

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

}  // namespace gnmr
