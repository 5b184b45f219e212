// The one description of ControllerConfig's scalar keys. Every reader and
// writer of a config walks this table instead of naming the fields: the
// wire codec (config_codec.h), Validate() and DifferingKeys (gnmr/config.h),
// YAML files and `--set key=value` (controller/config_yaml.h), the Python
// dict (python/src/config_dict.h), the key lists of gnmrctl's help and
// `gnmrctl config keys`, and the key table of docs/controller.md.
//
// Adding a scalar key touches three places: the struct member with its
// default (gnmr/config.h: the one place defaults live), the proto field of
// the same name (controller.proto) and one row in config_schema.cc.
// tests/controller/config_schema_test.cc fails when the proto has a field
// the table lacks or the docs table is not the one ConfigKeysMarkdown()
// renders.
//
// `actions` is not in the table: a list of rules with their own keys and
// messages, read and written by dedicated code in each place. The table
// knows its name (kActionsKey) so that key lists stay complete.
//
// Values travel as double: every scalar type here (int32, the number of a
// small enum) is exact in a double, so one getter/setter pair per side
// serves all fields.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gnmr/config.h"
#include "gnmr/status.h"
#include "gnmr/v1/controller.pb.h"

namespace gnmr {

enum class ConfigType : uint8_t {
  kInt32,   // YAML/dict integer
  kDouble,  // any number; must be finite
  kEnum,    // one of `choices`, by name; the value is the choice's index
};

// The valid values of a number: lo and hi, each closed or open; hi = +inf
// means no upper bound. With zero_is_off, 0 is valid too and turns the
// key's rule off.
struct ConfigRange {
  double lo = 0;
  bool lo_closed = true;
  double hi = 0;
  bool hi_closed = true;
  bool zero_is_off = false;
};

struct ConfigField {
  const char* key;  // YAML, dict and `--set` key; the proto field's name
  ConfigType type;
  ConfigRange range;                 // numbers only
  std::vector<std::string> choices;  // kEnum only: names by value
  const char* meaning;               // one line, for help and docs

  double (*get)(const ControllerConfig&);
  void (*set)(ControllerConfig*, double);
  double (*get_proto)(const v1::ControllerConfig&);
  void (*set_proto)(v1::ControllerConfig*, double);
  // A key added after peers that send the whole message existed, whose
  // valid range excludes 0: a proto value of 0 means the peer (or a saved
  // state) predates the key, and it takes its default.
  bool zero_is_unset = false;

  // The valid values in words: "[1, 1000000]", "(0, 1)", ">= 0",
  // "a finite number > 1", "0 (off) or (0, 1)", "none, clip, skip".
  std::string RangeText() const;
  // "" when `v` is a valid value, else what Validate() says after the key
  // ("must be in [1, 1000000], got 0").
  std::string Problem(double v) const;
  // Enums: the value of the choice `name`; false when there is none.
  bool ParseChoice(std::string_view name, double* out) const;
  // `v` as a config file writes it: "50", "0.98", "clip" (round-trips).
  std::string Render(double v) const;
};

// The scalar keys in the documented order (docs/controller.md, "Config keys"),
// that of ControllerConfig's members.
const std::vector<ConfigField>& ConfigFields();
// nullptr when `key` is not a scalar key (also for "actions").
const ConfigField* FindConfigField(std::string_view key);

inline constexpr char kActionsKey[] = "actions";

// Every top-level key: the scalar keys, then "actions".
const std::vector<std::string>& ConfigKeys();
// ConfigKeys() as "warmup, ema_decay, ..., actions" (for messages).
std::string ConfigKeyList();

// The key table of docs/controller.md ("Config keys"): key, type,
// default, valid values, meaning; `gnmrctl config keys --markdown` prints it.
std::string ConfigKeysMarkdown();

// One row per key of that table, as plain text (for `gnmrctl config keys`).
struct ConfigKeyDoc {
  std::string key, type, default_value, range, meaning;
};
std::vector<ConfigKeyDoc> ConfigKeyDocs();

}  // namespace gnmr
