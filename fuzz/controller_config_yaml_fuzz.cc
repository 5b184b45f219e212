// Fuzz target: controller configs in YAML (controller/config_yaml.h): a
// config file (`gnmrctl replay --config`, `gnmrctl config set`) and a
// `--set key=value` override. The input is the
// file's text; its first line is also tried as an override.
//
// Properties: an accepted config validates, and its rendering
// (ControllerConfigToYaml) parses back to an equal config; a refused
// override leaves the config unchanged; nothing throws.
#include <cstdint>
#include <string>
#include <string_view>

#include "controller/config_yaml.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  gnmr::StatusOr<gnmr::ControllerConfig> c = gnmr::ParseControllerConfigYaml(text, "fuzz.yaml");
  if (c.ok()) {
    FUZZ_CHECK(c->Validate().ok(), "accepted config does not validate: %s",
               c->Validate().ToString().c_str());
    const std::string yaml = gnmr::ControllerConfigToYaml(*c);
    gnmr::StatusOr<gnmr::ControllerConfig> back =
        gnmr::ParseControllerConfigYaml(yaml, "rendered.yaml");
    FUZZ_CHECK(back.ok(), "rendered config does not parse: %s\n%s",
               back.status().ToString().c_str(), yaml.c_str());
    FUZZ_CHECK(*back == *c, "rendered config parses to a different config:\n%s", yaml.c_str());
  }

  const std::string_view first_line = text.substr(0, text.find('\n'));
  gnmr::ControllerConfig config;
  config.max_o = 7;  // not a default, so a half-applied override would show
  const gnmr::ControllerConfig before = config;
  gnmr::Status s = gnmr::ApplyOverride(&config, first_line);
  if (s.ok()) {
    FUZZ_CHECK(config.Validate().ok(), "override gave an invalid config");
  } else {
    FUZZ_CHECK(config == before, "a refused override changed the config");
  }
  return 0;
}
