#include "controller/types/config_codec.h"

#include <string>
#include <utility>

#include "controller/types/config_schema.h"

namespace gnmr {

bool ValidAction(int v) { return v >= v1::Action_MIN && v <= v1::Action_MAX; }
bool ValidEntry(int v) { return v >= v1::EntryTreatment_MIN && v <= v1::EntryTreatment_MAX; }
bool ValidTrigger(int v) { return v >= v1::Trigger_MIN && v <= v1::Trigger_MAX; }

void ConfigToProto(const ControllerConfig& c, v1::ControllerConfig* out) {
  out->Clear();
  for (const ConfigField& f : ConfigFields()) f.set_proto(out, f.get(c));
  for (const ActionRule& r : c.actions) {
    v1::ActionRule* pr = out->add_actions();
    pr->set_pattern(r.pattern);
    pr->set_action(ToProto(r.action));
    pr->set_clip_min_scale(r.clip_min_scale);
  }
}

StatusOr<ControllerConfig> ConfigFromProto(const v1::ControllerConfig& in) {
  ControllerConfig c;
  for (const ConfigField& f : ConfigFields()) {
    const double v = f.get_proto(in);
    if (f.zero_is_unset && v == 0) continue;  // a peer before the key: its default
    // An open proto3 enum may carry any number; the struct's may not.
    if (f.type == ConfigType::kEnum && !f.Problem(v).empty()) {
      return InvalidArgument("config key '" + std::string(f.key) + "' is invalid");
    }
    f.set(&c, v);
  }
  if (static_cast<size_t>(in.actions_size()) > ControllerConfig::kMaxActionRules) {
    return InvalidArgument("config key 'actions' has too many rules");
  }
  for (const v1::ActionRule& pr : in.actions()) {
    if (!ValidAction(pr.action())) {
      return InvalidArgument("config key 'actions' has an invalid action");
    }
    ActionRule r;
    r.pattern = pr.pattern();
    r.action = FromProto(pr.action());
    r.clip_min_scale = pr.clip_min_scale();
    c.actions.push_back(std::move(r));
  }
  GNMR_RETURN_IF_ERROR(c.Validate());
  return c;
}

}  // namespace gnmr
