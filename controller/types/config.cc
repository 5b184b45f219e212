#include "gnmr/config.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/glob.h"
#include "controller/types/config_schema.h"

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

const char* DeniedTreatmentName(DeniedTreatment d) {
  switch (d) {
    case DeniedTreatment::kNone:
      return "none";
    case DeniedTreatment::kClip:
      return "clip";
  }
  return "unknown";
}

const char* AttributionName(Attribution a) {
  switch (a) {
    case Attribution::kRank:
      return "rank";
    case Attribution::kExclusive:
      return "exclusive";
    case Attribution::kUpstream:
      return "upstream";
  }
  return "unknown";
}

const char* ReportModeName(ReportMode m) {
  switch (m) {
    case ReportMode::kAll:
      return "all";
    case ReportMode::kOnePerShard:
      return "one_per_shard";
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
    case Trigger::kForward:
      return "forward";
    case Trigger::kSaturation:
      return "saturation";
    case Trigger::kUnderflow:
      return "underflow";
    case Trigger::kBlockSaturation:
      return "block_saturation";
    case Trigger::kDeadBlocks:
      return "dead_blocks";
    case Trigger::kScaleClamps:
      return "scale_clamps";
    case Trigger::kRelativeError:
      return "relative_error";
    case Trigger::kBackward:
      return "backward";
    case Trigger::kBackwardSaturation:
      return "backward_saturation";
    case Trigger::kBackwardUnderflow:
      return "backward_underflow";
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
  for (const ConfigField& f : ConfigFields()) {
    const std::string problem = f.Problem(f.get(*this));
    if (!problem.empty()) return Bad(f.key, problem);
  }
  // The clip treats the gradient of the observed step, which only a
  // decision applying at that very step can reach.
  if (denied == DeniedTreatment::kClip && lag != 0) {
    return Bad("denied", "clip needs lag 0 (it clips the observed step's gradient), got lag " +
                             std::to_string(lag) + " (set lag to 0 first, or denied to none)");
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
  for (const ConfigField& f : ConfigFields()) {
    if (!(f.get(*this) == f.get(o))) return false;
  }
  return actions == o.actions;
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
  for (const ConfigField& f : ConfigFields()) {
    const double x = f.get(a), y = f.get(b);
    if (x == y) continue;
    const bool enumeration = f.type == ConfigType::kEnum;
    out.push_back(std::string(f.key) + " (" + (enumeration ? f.Render(x) : Show(x)) + " vs " +
                  (enumeration ? f.Render(y) : Show(y)) + ")");
  }
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
