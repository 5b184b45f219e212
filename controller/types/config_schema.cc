#include "controller/types/config_schema.h"

#include <cmath>
#include <type_traits>

#include "common/text.h"

namespace gnmr {
namespace {

constexpr double kInf = HUGE_VAL;

// Ranges as the rows below spell them.
constexpr ConfigRange Closed(double lo, double hi) { return {lo, true, hi, true}; }
constexpr ConfigRange Open(double lo, double hi) { return {lo, false, hi, false}; }
constexpr ConfigRange AtLeast(double lo) { return {lo, true, kInf, false}; }
constexpr ConfigRange Above(double lo) { return {lo, false, kInf, false}; }
// A rule's threshold that may also be 0: the rule is off.
constexpr ConfigRange OffOr(ConfigRange r) {
  r.zero_is_off = true;
  return r;
}

// A field's value as the double every accessor trades in, and back.
template <typename T>
double ToDouble(T v) {
  if constexpr (std::is_enum_v<T>) {
    return static_cast<double>(static_cast<int64_t>(v));
  } else {
    return static_cast<double>(v);
  }
}
template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v;
  } else {
    return static_cast<T>(static_cast<int64_t>(v));
  }
}

// The row of key `name`: the member `name` of ControllerConfig and the
// proto field `name` of gnmr.v1.ControllerConfig, so a key without its
// member or its proto field does not compile.
// (Unformatted: clang-format breaks the stringized name off its line.)
// clang-format off
#define GNMR_CONFIG_FIELD(name, type, range, choices, meaning)                          \
  ConfigField{                                                                          \
      #name, type, range, choices, meaning,                                             \
      [](const ControllerConfig& c) { return ToDouble(c.name); },                       \
      [](ControllerConfig* c, double v) { c->name = FromDouble<decltype(c->name)>(v); }, \
      [](const v1::ControllerConfig& p) { return ToDouble(p.name()); },                 \
      [](v1::ControllerConfig* p, double v) {                                           \
        p->set_##name(FromDouble<std::decay_t<decltype(p->name())>>(v));                \
      }}
// clang-format on

std::vector<std::string> EntryChoices() {
  std::vector<std::string> names;
  for (int i = v1::EntryTreatment_MIN; i <= v1::EntryTreatment_MAX; ++i) {
    names.push_back(EntryTreatmentName(static_cast<EntryTreatment>(i)));
  }
  return names;
}

std::vector<std::string> DeniedChoices() {
  std::vector<std::string> names;
  for (int i = v1::DeniedTreatment_MIN; i <= v1::DeniedTreatment_MAX; ++i) {
    names.push_back(DeniedTreatmentName(static_cast<DeniedTreatment>(i)));
  }
  return names;
}

std::vector<std::string> AttributionChoices() {
  std::vector<std::string> names;
  for (int i = v1::Attribution_MIN; i <= v1::Attribution_MAX; ++i) {
    names.push_back(AttributionName(static_cast<Attribution>(i)));
  }
  return names;
}

std::vector<std::string> ReportChoices() {
  std::vector<std::string> names;
  for (int i = v1::ReportMode_MIN; i <= v1::ReportMode_MAX; ++i) {
    names.push_back(ReportModeName(static_cast<ReportMode>(i)));
  }
  return names;
}

// A key added later (ConfigField::zero_is_unset).
ConfigField Later(ConfigField f) {
  f.zero_is_unset = true;
  return f;
}

std::vector<ConfigField> MakeFields() {
  using C = ControllerConfig;
  using T = ConfigType;
  return {
      GNMR_CONFIG_FIELD(warmup, T::kInt32, Closed(1, C::kMaxWarmup), {},
                        "valid samples per unit that only build its history"),
      GNMR_CONFIG_FIELD(ema_decay, T::kDouble, Open(0, 1), {},
                        "decay of the historical mean mu of a unit's norm"),
      GNMR_CONFIG_FIELD(tau, T::kDouble, Above(1), {}, "GNMR trigger threshold (norm / mu)"),
      GNMR_CONFIG_FIELD(tau_delta, T::kDouble, Above(0), {}, "Delta-GNMR trigger threshold"),
      GNMR_CONFIG_FIELD(gnmr_floor, T::kDouble, AtLeast(0), {},
                        "Delta-GNMR counts only at GNMR >= gnmr_floor"),
      GNMR_CONFIG_FIELD(short_window, T::kInt32, Closed(0, C::kMaxWindow), {},
                        "evaluated steps in the Delta-GNMR window (0 disables Delta-GNMR)"),
      GNMR_CONFIG_FIELD(max_o, T::kInt32, AtLeast(0), {},
                        "hard budget: units in recovery at once (0: monitor only)"),
      GNMR_CONFIG_FIELD(lock_steps, T::kInt32, Closed(1, C::kMaxLockSteps), {},
                        "steps an admitted unit stays in recovery"),
      GNMR_CONFIG_FIELD(lag, T::kInt32, Closed(0, C::kMaxLag), {},
                        "the decision for step t applies from step t + lag"),
      GNMR_CONFIG_FIELD(entry, T::kEnum, {}, EntryChoices(),
                        "lag 0 and promote: the treatment of the observed step's gradient "
                        "(its forward pass already ran)"),
      // 0 (none) is also what a peer before the key sends: no Later().
      GNMR_CONFIG_FIELD(denied, T::kEnum, {}, DeniedChoices(),
                        "lag 0: a candidate denied by max_o gets its observed step's gradient "
                        "clipped to its mean (clip) or nothing (none); clip needs lag 0"),
      GNMR_CONFIG_FIELD(clip_min_scale, T::kDouble, Closed(0, 1), {},
                        "lower bound of clip scales, unless a rule sets its own"),
      GNMR_CONFIG_FIELD(report, T::kEnum, {}, ReportChoices(),
                        "which ranks send statistics: every rank, or one elected "
                        "data-parallel replica per shard, checked against the others "
                        "(gnmrd; docs/scale.md)"),
      Later(GNMR_CONFIG_FIELD(tau_forward, T::kDouble, Above(1), {},
                              "forward channel: trigger threshold of a unit's forward norm / "
                              "its mean")),
      Later(GNMR_CONFIG_FIELD(tau_saturation, T::kDouble, Above(1), {},
                              "forward channel: trigger threshold of a unit's saturated "
                              "fraction / its mean")),
      Later(GNMR_CONFIG_FIELD(underflow_fraction, T::kDouble, Open(0, 1), {},
                              "forward channel: triggers when this share of a unit's usually "
                              "non-zero forward elements is flushed to zero")),
      // 0 (off) is also what a peer before the key sends: no Later().
      GNMR_CONFIG_FIELD(tau_block_saturation, T::kDouble, OffOr(Above(1)), {},
                        "block rules (block-scaled forward tensors): trigger threshold of a "
                        "unit's saturated-block fraction / its mean"),
      GNMR_CONFIG_FIELD(dead_block_fraction, T::kDouble, OffOr(Open(0, 1)), {},
                        "block rules: triggers when this share of a unit's usually live "
                        "blocks is dead (every code zero)"),
      GNMR_CONFIG_FIELD(scale_clamp_fraction, T::kDouble, OffOr(Open(0, 1)), {},
                        "block rules: triggers when this share of a unit's usually unclamped "
                        "block scales is clamped (at an end of its range, or NaN)"),
      GNMR_CONFIG_FIELD(tau_relative_error, T::kDouble, OffOr(Above(1)), {},
                        "source figures (tensors observed with their source): trigger "
                        "threshold of a unit's relative error / its mean"),
      Later(GNMR_CONFIG_FIELD(tau_backward, T::kDouble, Above(1), {},
                              "backward channel (the gradient as quantized): trigger threshold "
                              "of a unit's backward norm / its mean; its saturation and "
                              "underflow rules use tau_saturation and underflow_fraction")),
      // 0 (rank) is also what a peer before the key sends: no Later().
      GNMR_CONFIG_FIELD(attribution, T::kEnum, {}, AttributionChoices(),
                        "forward channel: a forward-triggered candidate ranks above the "
                        "gradient-only ones of its step (rank), or also keeps them out of "
                        "the budget that step (exclusive: denied, clipped with denied: clip), "
                        "and with upstream the forward-triggered ones that ran after the "
                        "step's first too"),
  };
}

#undef GNMR_CONFIG_FIELD

// A bound as a person writes it: 1000000, 0.5.
std::string Number(double v) {
  if (v == std::trunc(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return FormatDouble(v);
}

std::string Join(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : ", ") + p;
  return s;
}

const char* TypeName(ConfigType t) {
  switch (t) {
    case ConfigType::kInt32:
      return "int32";
    case ConfigType::kDouble:
      return "number";
    case ConfigType::kEnum:
      return "enum";
  }
  return "unknown";
}

}  // namespace

std::string ConfigField::RangeText() const {
  if (type == ConfigType::kEnum) return Join(choices);
  const std::string off = range.zero_is_off ? "0 (off) or " : "";
  if (range.hi == kInf) {
    return off + (type == ConfigType::kDouble ? "a finite number " : "") +
           (range.lo_closed ? ">= " : "> ") + Number(range.lo);
  }
  return off + (range.lo_closed ? "[" : "(") + Number(range.lo) + ", " + Number(range.hi) +
         (range.hi_closed ? "]" : ")");
}

std::string ConfigField::Problem(double v) const {
  const ConfigRange& r = range;
  bool ok;
  std::string got;
  switch (type) {
    case ConfigType::kEnum:
      ok = v >= 0 && v < static_cast<double>(choices.size());
      return ok ? "" : "must be one of " + RangeText() + ", got " + Number(v);
    case ConfigType::kInt32:
      got = std::to_string(static_cast<int32_t>(v));
      break;
    case ConfigType::kDouble:
      got = std::to_string(v);
      break;
  }
  ok = (r.zero_is_off && v == 0) || (std::isfinite(v) && (r.lo_closed ? v >= r.lo : v > r.lo) &&
                                     (r.hi_closed ? v <= r.hi : v < r.hi));
  if (ok) return "";
  return "must be " + std::string(r.hi == kInf || r.zero_is_off ? "" : "in ") + RangeText() +
         ", got " + got;
}

bool ConfigField::ParseChoice(std::string_view name, double* out) const {
  for (size_t i = 0; i < choices.size(); ++i) {
    if (name == choices[i]) {
      *out = static_cast<double>(i);
      return true;
    }
  }
  return false;
}

std::string ConfigField::Render(double v) const {
  std::string s;
  switch (type) {
    case ConfigType::kInt32:
      AppendInt(&s, static_cast<int64_t>(v));
      break;
    case ConfigType::kDouble:
      AppendDouble(&s, v);
      break;
    case ConfigType::kEnum:
      s = v >= 0 && v < static_cast<double>(choices.size()) ? choices[static_cast<size_t>(v)]
                                                            : "unknown";
      break;
  }
  return s;
}

const std::vector<ConfigField>& ConfigFields() {
  static const std::vector<ConfigField>* const kFields = new std::vector<ConfigField>(MakeFields());
  return *kFields;
}

const ConfigField* FindConfigField(std::string_view key) {
  for (const ConfigField& f : ConfigFields()) {
    if (key == f.key) return &f;
  }
  return nullptr;
}

const std::vector<std::string>& ConfigKeys() {
  static const std::vector<std::string>* const kKeys = [] {
    auto* keys = new std::vector<std::string>;
    for (const ConfigField& f : ConfigFields()) keys->push_back(f.key);
    keys->push_back(kActionsKey);
    return keys;
  }();
  return *kKeys;
}

std::string ConfigKeyList() { return Join(ConfigKeys()); }

std::vector<ConfigKeyDoc> ConfigKeyDocs() {
  std::vector<ConfigKeyDoc> rows;
  const ControllerConfig defaults;
  for (const ConfigField& f : ConfigFields()) {
    rows.push_back({f.key, TypeName(f.type), f.Render(f.get(defaults)), f.RangeText(), f.meaning});
  }
  rows.push_back({kActionsKey, "list", "[]",
                  "at most " + std::to_string(ControllerConfig::kMaxActionRules) +
                      " rules {pattern, action, clip_min_scale}",
                  "per unit-name glob, first match wins, default promote; a pattern is 1..1024 "
                  "bytes of printable ASCII without space (like unit names); a rule's "
                  "clip_min_scale is in [0, 1], left out for the config-wide one"});
  return rows;
}

std::string ConfigKeysMarkdown() {
  std::string out =
      "| key | type | default | valid values | meaning |\n| --- | --- | --- | --- | --- |\n";
  for (const ConfigKeyDoc& d : ConfigKeyDocs()) {
    out += "| `" + d.key + "` | " + d.type + " | " + d.default_value + " | " + d.range + " | " +
           d.meaning + " |\n";
  }
  return out;
}

}  // namespace gnmr
