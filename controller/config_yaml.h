// ControllerConfig <-> YAML: the per-job config file of `gnmrctl replay`
// (and later gnmrd / `gnmrctl config get|set`).
//
// Keys are the documented names (docs/controller.md, "Config keys"); the scalar
// ones and their types come from the config schema (controller/types/config_schema.h), e.g.
//
//   warmup: 50
//   max_o: 4
//   actions:
//     - {pattern: "*.mlp.fc1", action: clip, clip_min_scale: 0.2}
//
// Every error names where it comes from and the 1-based line
// ("replay.yaml:7: unknown config key 'maxo'"), so a user can fix the file
// without guessing. Keys and values echoed in a message are escaped
// (EscapeForLog: binary bytes become \xNN) by ParseControllerConfigYaml,
// LoadControllerConfigFile and ApplyOverride; ParseControllerConfigNode
// leaves that to its caller (gnmrd's config loader escapes its own
// messages). yaml-cpp reports errors by throwing; its exceptions are caught
// here and nothing escapes this API.
#pragma once

#include <string>
#include <string_view>

#include "gnmr/config.h"
#include "gnmr/status.h"

namespace YAML {
class Node;  // yaml-cpp; include <yaml-cpp/yaml.h> to call the Node entry
}  // namespace YAML

namespace gnmr {

// Parses YAML `text` on top of `base`: keys absent from the text keep base's
// values. `source` names the text in error messages (usually the file path).
// The result is validated (ControllerConfig::Validate); its error is
// reported at the line of the offending key.
StatusOr<ControllerConfig> ParseControllerConfigYaml(
    std::string_view text, const std::string& source,
    const ControllerConfig& base = ControllerConfig());

// The same for an already parsed node, e.g. the `controller:` block of
// gnmrd's own config file: errors carry `source` and the node's lines in
// that file. A null node means all of `base`.
StatusOr<ControllerConfig> ParseControllerConfigNode(
    const YAML::Node& node, const std::string& source,
    const ControllerConfig& base = ControllerConfig());

// How error messages name a YAML value: "'text'", "a list", "a mapping"
// or "nothing".
std::string DescribeYamlNode(const YAML::Node& node);

// Reads and parses a YAML config file (see ParseControllerConfigYaml).
StatusOr<ControllerConfig> LoadControllerConfigFile(
    const std::string& path, const ControllerConfig& base = ControllerConfig());

// Applies one `--set key=value` override. The value is parsed as YAML, so
// `actions=[{pattern: "*.fc1", action: clip}]` works; `actions` is replaced
// as a whole. The result is validated; on error `config` is unchanged and
// the message starts with "--set <assignment>: ".
Status ApplyOverride(ControllerConfig* config, std::string_view assignment);

// Renders `config` as YAML with every key, in the documented order
// (docs/controller.md, "Config keys"). The output parses back to an equal
// config (doubles are written round-trippably).
std::string ControllerConfigToYaml(const ControllerConfig& config);

}  // namespace gnmr
