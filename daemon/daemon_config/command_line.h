// gnmrd's command-line flags. They override the config file:
//
//   --config FILE            YAML config file (deploy/gnmrd.example.yaml)
//   --listen ADDR            repeatable; replaces the file's `listen` list
//   --metrics ADDR|off       metrics.listen
//   --state-dir DIR          state_dir
//   --log-level LEVEL        log_level
//   --admin-token-file FILE  admin_token_file (replaces admin_token)
//   --read-token-file FILE   read_token_file (replaces read_token)
//   --job-tokens-file FILE   job_tokens_file (replaces job_tokens)
//   --step-deadline-ms MS    step_deadline_ms
//   --snapshot-every N       snapshot_every_steps
//   --help, -h / --version
//
// Parsed by common/flag_parser.h (as every GNMR binary is); the same
// declarations produce --help. Both "--flag value" and "--flag=value"
// work. Values go through the same
// parsers as the file's (config_keys.h); errors name the flag
// ("--step-deadline-ms: must be an integer in [1, 3600000], got 'x'").
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "daemon/daemon_config/config_keys.h"
#include "daemon/daemon_config/daemon_config.h"
#include "gnmr/status.h"

namespace gnmr {
namespace daemon_config {

struct CommandLine {
  bool help = false;
  bool version = false;
  std::string config_file;
  std::vector<std::string> listen;  // in order given
  // Single-valued flags in the order given (the last one wins).
  std::vector<std::pair<const ScalarKey*, std::string>> values;
};

// argv[0] is the program. InvalidArgument for an unknown flag, a missing
// value or a positional argument.
StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv);

// Applies the flags' values on top of `config` (after the file); the
// config is unchanged on error.
Status ApplyCommandLine(const CommandLine& flags, DaemonConfig* config);

std::string CommandLineHelp(const std::string& program);

}  // namespace daemon_config
}  // namespace gnmr
