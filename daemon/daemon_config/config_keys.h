// The single-valued keys of gnmrd's config: one table that the YAML file
// reader and the command line both use, so a key and its flag accept the
// same values, with the same limits and messages.
//
// Keys of nested blocks are dotted ("metrics.listen", "tls.cert"). The
// list-, map- and block-valued keys (listen, job_tokens, controller) are
// handled by the file reader itself.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "daemon/daemon_config/daemon_config.h"
#include "gnmr/status.h"

namespace gnmr {
namespace daemon_config {

// Parses one value into the config; the problem alone on error.
using Setter = std::function<Status(const std::string& value)>;

struct ScalarKey {
  const char* key;      // "step_deadline_ms", "metrics.listen"
  const char* flag;     // "step-deadline-ms", or nullptr: file only
  const char* metavar;  // for --help
  const char* help;     // for --help
  std::function<Setter(DaemonConfig*)> bind;
};

const std::vector<ScalarKey>& ScalarKeys();

// nullptr if `key` is not in the table.
const ScalarKey* FindScalarKey(const std::string& key);

}  // namespace daemon_config
}  // namespace gnmr
