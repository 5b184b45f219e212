// The single-valued keys of gnmrd's config: one table that the YAML file
// reader, the command line, --help, the startup log (DescribeConfig) and
// the key table of deploy/README.md all use, so a key and its flag accept
// the same values, with the same limits and messages, and a default is
// stated in one place: DaemonConfig's member (daemon_config.h), itself
// read from the module's Options where a module owns the value.
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

// How a key's value is read and written.
struct KeyValue {
  std::function<Setter(DaemonConfig*)> bind;
  // The value in the key's own syntax, which `bind` reads back to the same
  // value ("64MiB", "7d", "0660", "127.0.0.1:9464", "off"); "" while an
  // optional path or token is unset.
  std::function<std::string(const DaemonConfig&)> format;
  // What "" means where it means more than "unset" ("off" for trace.dir);
  // null: unset, and --help states no default.
  const char* when_unset = nullptr;
  // A token: DescribeConfig says only whether one is set.
  bool secret = false;
};

struct ScalarKey {
  ScalarKey(const char* key, const char* flag, const char* metavar, const char* help,
            KeyValue value, const char* machine_default = nullptr)
      : key(key),
        flag(flag),
        metavar(metavar),
        help(help),
        bind(std::move(value.bind)),
        format(std::move(value.format)),
        when_unset(value.when_unset),
        secret(value.secret),
        machine_default(machine_default) {}

  const char* key;      // "step_deadline_ms", "metrics.listen"
  const char* flag;     // "step-deadline-ms", or nullptr: file only
  const char* metavar;  // for --help
  const char* help;     // for --help, without the default (DefaultText adds it)
  std::function<Setter(DaemonConfig*)> bind;
  std::function<std::string(const DaemonConfig&)> format;
  const char* when_unset;
  bool secret;
  // A default that depends on the machine (daemon_config.h), in words; the
  // key is empty in DaemonConfig{} and filled in by LoadDaemonConfig.
  const char* machine_default;
};

const std::vector<ScalarKey>& ScalarKeys();

// `listen`'s default (daemon_config.h), for --help and the docs table.
inline constexpr char kListenMachineDefault[] = "unix:/run/gnmr/gnmrd.sock or per user";

// nullptr if `key` is not in the table.
const ScalarKey* FindScalarKey(const std::string& key);

// The default as --help and the docs state it: the machine rule, or the
// value of DaemonConfig{} in the key's syntax, or when_unset; "" when
// there is none to state (an optional file or token).
std::string DefaultText(const ScalarKey& key);

// The value as the startup log shows it: tokens redacted, "unset" for "".
std::string DescribeValue(const ScalarKey& key, const DaemonConfig& config);

// `help` with "(default X)" after it, on its last line if it fits there.
std::string HelpWithDefault(const std::string& help, const std::string& default_text);

// The key table of deploy/README.md ("gnmrd's config keys"): one row per
// key of the file, its flag and its default.
std::string DaemonConfigKeysMarkdown();

}  // namespace daemon_config
}  // namespace gnmr
