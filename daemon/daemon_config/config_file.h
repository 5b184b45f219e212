// gnmrd's YAML config file onto a DaemonConfig. deploy/gnmrd.example.yaml
// shows and explains every key; DaemonConfigKeys() lists them.
//
// Keys absent from the file keep the values already in the config, so the
// file only needs what differs from the defaults. Unknown keys, duplicate
// keys, wrong types and out-of-range values are errors naming the file and
// line ("gnmrd.yaml:7: step_deadline_ms: must be an integer in
// [1, 3600000], got 'abc'"). The `controller:` block is parsed by the
// controller config loader (daemon/config). Relative paths are made
// absolute against the current directory.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/daemon_config/daemon_config.h"
#include "gnmr/status.h"

namespace gnmr {
namespace daemon_config {

// NotFound if the file cannot be read.
Status ApplyConfigFile(const std::string& path, DaemonConfig* config);

// The same for text; `source` names it in messages.
Status ApplyConfigText(std::string_view text, const std::string& source, DaemonConfig* config);

const std::vector<std::string>& DaemonConfigKeys();

// A job tokens file: a YAML mapping of job ids to tokens, checked like the
// job_tokens key. Errors name the file and line.
StatusOr<std::map<std::string, std::string>> ReadJobTokensFile(const std::string& path);

// `path` made absolute against the current directory (unchanged if it is).
std::string AbsolutePath(const std::string& path);

}  // namespace daemon_config
}  // namespace gnmr
