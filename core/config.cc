#include "gnmr/config.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/glob.h"

namespace gnmr {

const char* ActionName(Action a) {
  switch (a) {
    case Action::kPromote:
      return "promote";
    case Action::kClip:
      return "clip";
    case Action::kSkip:
      return "skip";
    case Action::kResetState:
      return "reset_state";
  }
  return "unknown";
}

const char* EntryTreatmentName(EntryTreatment e) {
  switch (e) {
    case EntryTreatment::kNone:
      return "none";
    case EntryTreatment::kClip:
      return "clip";
    case EntryTreatment::kSkip:
      return "skip";
  }
  return "unknown";
}

const char* TriggerName(Trigger t) {
  switch (t) {
    case Trigger::kNone:
      return "none";
    case Trigger::kGnmr:
      return "gnmr";
    case Trigger::kDelta:
      return "delta";
    case Trigger::kNonFinite:
      return "nonfinite";
  }
  return "unknown";
}

bool ParseAction(const std::string& s, Action* out) {
  for (Action a : {Action::kPromote, Action::kClip, Action::kSkip, Action::kResetState}) {
    if (s == ActionName(a)) {
      *out = a;
      return true;
    }
  }
  return false;
}

bool ParseEntryTreatment(const std::string& s, EntryTreatment* out) {
  for (EntryTreatment e : {EntryTreatment::kNone, EntryTreatment::kClip, EntryTreatment::kSkip}) {
    if (s == EntryTreatmentName(e)) {
      *out = e;
      return true;
    }
  }
  return false;
}

namespace {

Status Bad(const std::string& key, const std::string& why) {
  return InvalidArgument("config key '" + key + "' " + why);
}

bool Finite(double v) { return std::isfinite(v); }

}  // namespace

Status ControllerConfig::Validate() const {
  if (warmup < 1 || warmup > kMaxWarmup) {
    return Bad("warmup",
               "must be in [1, " + std::to_string(kMaxWarmup) + "], got " + std::to_string(warmup));
  }
  if (!Finite(ema_decay) || ema_decay <= 0.0 || ema_decay >= 1.0) {
    return Bad("ema_decay", "must be in (0, 1), got " + std::to_string(ema_decay));
  }
  if (!Finite(tau) || tau <= 1.0) {
    return Bad("tau", "must be a finite number > 1, got " + std::to_string(tau));
  }
  if (!Finite(tau_delta) || tau_delta <= 0.0) {
    return Bad("tau_delta", "must be a finite number > 0, got " + std::to_string(tau_delta));
  }
  if (!Finite(gnmr_floor) || gnmr_floor < 0.0) {
    return Bad("gnmr_floor", "must be a finite number >= 0, got " + std::to_string(gnmr_floor));
  }
  if (short_window < 0 || short_window > kMaxWindow) {
    return Bad("short_window", "must be in [0, " + std::to_string(kMaxWindow) + "], got " +
                                   std::to_string(short_window));
  }
  if (max_o < 0) {
    return Bad("max_o", "must be >= 0, got " + std::to_string(max_o));
  }
  if (lock_steps < 1 || lock_steps > kMaxLockSteps) {
    return Bad("lock_steps", "must be in [1, " + std::to_string(kMaxLockSteps) + "], got " +
                                 std::to_string(lock_steps));
  }
  if (lag < 0 || lag > kMaxLag) {
    return Bad("lag",
               "must be in [0, " + std::to_string(kMaxLag) + "], got " + std::to_string(lag));
  }
  if (!Finite(clip_min_scale) || clip_min_scale < 0.0 || clip_min_scale > 1.0) {
    return Bad("clip_min_scale", "must be in [0, 1], got " + std::to_string(clip_min_scale));
  }
  if (actions.size() > kMaxActionRules) {
    return Bad("actions", "has more than " + std::to_string(kMaxActionRules) + " rules");
  }
  for (size_t i = 0; i < actions.size(); ++i) {
    const ActionRule& r = actions[i];
    const std::string key = "actions[" + std::to_string(i) + "]";
    if (r.pattern.empty()) return Bad(key + ".pattern", "is empty");
    if (r.pattern.size() > 1024) return Bad(key + ".pattern", "is too long");
    // Unit names are printable ASCII without space (Register checks them),
    // so a pattern with any other byte matches nothing; and a byte that is
    // not UTF-8 would make the job's snapshots unreadable (a proto3 string).
    for (const char ch : r.pattern) {
      if (ch < 0x21 || ch > 0x7e) {
        return Bad(key + ".pattern",
                   "has a byte outside printable ASCII 0x21..0x7e (no unit name has one)");
      }
    }
    if (!(r.clip_min_scale < 0.0) && !(Finite(r.clip_min_scale) && r.clip_min_scale <= 1.0)) {
      return Bad(key + ".clip_min_scale", "must be in [0, 1]");
    }
  }
  return Status::Ok();
}

bool ControllerConfig::operator==(const ControllerConfig& o) const {
  return warmup == o.warmup && ema_decay == o.ema_decay && tau == o.tau &&
         tau_delta == o.tau_delta && gnmr_floor == o.gnmr_floor && short_window == o.short_window &&
         max_o == o.max_o && lock_steps == o.lock_steps && lag == o.lag && entry == o.entry &&
         clip_min_scale == o.clip_min_scale && actions == o.actions;
}

namespace {

std::string Show(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

std::vector<std::string> DifferingKeys(const ControllerConfig& a, const ControllerConfig& b) {
  std::vector<std::string> out;
  auto num = [&](const char* key, double x, double y) {
    if (x != y) out.push_back(std::string(key) + " (" + Show(x) + " vs " + Show(y) + ")");
  };
  num("warmup", a.warmup, b.warmup);
  num("ema_decay", a.ema_decay, b.ema_decay);
  num("tau", a.tau, b.tau);
  num("tau_delta", a.tau_delta, b.tau_delta);
  num("gnmr_floor", a.gnmr_floor, b.gnmr_floor);
  num("short_window", a.short_window, b.short_window);
  num("max_o", a.max_o, b.max_o);
  num("lock_steps", a.lock_steps, b.lock_steps);
  num("lag", a.lag, b.lag);
  if (a.entry != b.entry) {
    out.push_back(std::string("entry (") + EntryTreatmentName(a.entry) + " vs " +
                  EntryTreatmentName(b.entry) + ")");
  }
  num("clip_min_scale", a.clip_min_scale, b.clip_min_scale);
  if (a.actions != b.actions) out.push_back("actions");
  return out;
}

ResolvedAction ResolveAction(const ControllerConfig& config, const std::string& unit_name) {
  for (const ActionRule& r : config.actions) {
    if (GlobMatch(r.pattern, unit_name)) {
      return {r.action, r.clip_min_scale < 0.0 ? config.clip_min_scale : r.clip_min_scale};
    }
  }
  return {Action::kPromote, config.clip_min_scale};
}

}  // namespace gnmr
