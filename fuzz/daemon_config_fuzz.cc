// Fuzz target: gnmrd's YAML config file (daemon/daemon_config/
// config_file.h), including its `controller:` block. The input is the
// file's text.
//
// Properties: no crash, nothing throws, every refusal has a message; the
// start-up log's description of an accepted config (DescribeConfig) shows
// no token.
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/daemon_config/config_file.h"
#include "daemon/daemon_config/daemon_config.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  gnmr::DaemonConfig config;
  gnmr::Status s = gnmr::daemon_config::ApplyConfigText(text, "fuzz.yaml", &config);
  if (s.ok()) {
    // Tokens never reach the description: the same config with other
    // (non-empty) tokens describes the same way.
    gnmr::DaemonConfig other = config;
    for (auto& [job, token] : other.job_tokens) token = token == "x" ? "y" : "x";
    if (!other.admin_token.empty()) other.admin_token += "-other";
    if (!other.read_token.empty()) other.read_token += "-other";
    FUZZ_CHECK(gnmr::DescribeConfig(config) == gnmr::DescribeConfig(other),
               "a token shows in DescribeConfig");
  } else {
    FUZZ_CHECK(!s.message().empty(), "an error without a message");
  }
  return 0;
}
