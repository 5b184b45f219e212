#include "daemon/daemon_config/config_keys.h"

#include <limits>
#include <utility>

#include "daemon/daemon_config/config_file.h"
#include "daemon/daemon_config/config_values.h"

namespace gnmr {
namespace daemon_config {
namespace {

template <typename Field>
KeyValue Uint(uint64_t lo, uint64_t hi, Field DaemonConfig::*field) {
  return {[=](DaemonConfig* c) -> Setter {
            return [=](const std::string& t) {
              uint64_t n = 0;
              Status s = ParseUint(t, lo, hi, &n);
              if (s.ok()) c->*field = static_cast<Field>(n);
              return s;
            };
          },
          [=](const DaemonConfig& c) { return std::to_string(c.*field); }};
}

// A byte count ("64MiB", "4096").
template <typename Field>
KeyValue ByteSize(uint64_t lo, uint64_t hi, Field DaemonConfig::*field) {
  return {[=](DaemonConfig* c) -> Setter {
            return [=](const std::string& t) {
              uint64_t n = 0;
              Status s = ParseByteSize(t, lo, hi, &n);
              if (s.ok()) c->*field = static_cast<Field>(n);
              return s;
            };
          },
          [=](const DaemonConfig& c) { return FormatByteSize(c.*field); }};
}

KeyValue Bool(bool DaemonConfig::*field) {
  return {[=](DaemonConfig* c) -> Setter {
            return [=](const std::string& t) { return ParseBool(t, &(c->*field)); };
          },
          [=](const DaemonConfig& c) { return std::string(c.*field ? "true" : "false"); }};
}

// A path, made absolute against the current directory. `field` is a
// generic lambda so that one accessor serves the setter and the formatter.
template <typename Field>
KeyValue PathIn(Field field, const char* when_unset = nullptr) {
  KeyValue v{[=](DaemonConfig* c) -> Setter {
               return [=](const std::string& t) {
                 if (t.empty()) return InvalidArgument("must not be empty");
                 field(*c) = AbsolutePath(t);
                 return Status::Ok();
               };
             },
             [=](const DaemonConfig& c) { return field(c); }};
  v.when_unset = when_unset;
  return v;
}

// A string that `check` accepts as it is.
KeyValue Checked(Status (*check)(std::string_view), std::string DaemonConfig::*field) {
  return {[=](DaemonConfig* c) -> Setter {
            return [=](const std::string& t) {
              Status s = check(t);
              if (s.ok()) c->*field = t;
              return s;
            };
          },
          [=](const DaemonConfig& c) { return c.*field; }};
}

KeyValue Token(std::string DaemonConfig::*field) {
  KeyValue v = Checked(&CheckToken, field);
  v.secret = true;
  return v;
}

std::vector<ScalarKey> MakeKeys() {
  constexpr uint64_t kMaxGrpcMessage = std::numeric_limits<int32_t>::max();
  return {
      {"unix_socket_mode",
       nullptr,
       "",
       "",
       {[](DaemonConfig* c) -> Setter {
          return [c](const std::string& t) { return ParseFileMode(t, &c->unix_socket_mode); };
        },
        [](const DaemonConfig& c) { return FormatFileMode(c.unix_socket_mode); }}},
      {"metrics.listen",
       "metrics",
       "ADDR",
       "ip:port of /metrics, or off",
       {[](DaemonConfig* c) -> Setter {
          return [c](const std::string& t) { return ParseMetricsAddress(t, &c->metrics_listen); };
        },
        [](const DaemonConfig& c) {
          return c.metrics_listen.empty() ? std::string("off") : c.metrics_listen;
        }}},
      {"metrics.top_k_units", nullptr, "", "", Uint(0, 10000, &DaemonConfig::metrics_top_k_units)},
      {"metrics.unit_group_depth", nullptr, "", "",
       Uint(0, 64, &DaemonConfig::metrics_unit_group_depth)},
      {"metrics.max_unit_groups", nullptr, "", "",
       Uint(1, 10000, &DaemonConfig::metrics_max_unit_groups)},
      {"state_dir", "state-dir", "DIR", "snapshots and event logs",
       PathIn([](auto& c) -> auto& { return c.state_dir; }), "/var/lib/gnmr or per user"},
      {"snapshot_every_steps", "snapshot-every", "N", "snapshot each job every N steps",
       Uint(1, 1000000, &DaemonConfig::snapshot_every_steps)},
      {"step_deadline_ms", "step-deadline-ms", "MS",
       "close a step this long after its first report",
       Uint(1, 3600000, &DaemonConfig::step_deadline_ms)},
      {"job_idle_expiry",
       "job-idle-expiry",
       "DURATION",
       "remove a job idle this long, e.g. 7d, 12h,\n0 or off (never)",
       {[](DaemonConfig* c) -> Setter {
          return [c](const std::string& t) {
            return ParseDurationMs(t, uint64_t{3650} * 86400000, &c->job_idle_expiry_ms);
          };
        },
        [](const DaemonConfig& c) { return FormatDurationMs(c.job_idle_expiry_ms); }}},
      {"event_log_max_bytes", "event-log-max-bytes", "SIZE",
       "rotate a job's event log past this size",
       ByteSize(4096, uint64_t{1} << 40, &DaemonConfig::event_log_max_bytes)},
      {"trace.dir", "trace-dir", "DIR",
       "record every job's steps there as replay\ntraces, docs/replay.md",
       PathIn([](auto& c) -> auto& { return c.trace_dir; }, "off")},
      {"trace.jobs",
       nullptr,
       "",
       "",
       {[](DaemonConfig* c) -> Setter {
          return [c](const std::string& t) {
            if (t.empty()) return InvalidArgument("must not be empty (a glob of job ids)");
            c->trace_jobs = t;
            return Status::Ok();
          };
        },
        [](const DaemonConfig& c) { return c.trace_jobs; }}},
      {"trace.max_file_bytes", nullptr, "", "",
       ByteSize(4096, uint64_t{1} << 40, &DaemonConfig::trace_max_file_bytes)},
      {"trace.queue_bytes", nullptr, "", "",
       ByteSize(1u << 20, uint64_t{1} << 36, &DaemonConfig::trace_queue_bytes)},
      {"max_message_bytes", nullptr, "", "",
       ByteSize(4096, kMaxGrpcMessage, &DaemonConfig::max_message_bytes)},
      {"max_jobs", nullptr, "", "", Uint(1, 1000000, &DaemonConfig::max_jobs)},
      {"max_ranks_per_job", nullptr, "", "", Uint(1, 65536, &DaemonConfig::max_ranks_per_job)},
      {"max_units_per_job", nullptr, "", "", Uint(1, 1u << 24, &DaemonConfig::max_units_per_job)},
      {"max_step_jump", nullptr, "", "", Uint(1, uint64_t{1} << 60, &DaemonConfig::max_step_jump)},
      {"max_queued_decision_bytes", nullptr, "", "",
       ByteSize(4096, uint64_t{1} << 34, &DaemonConfig::max_queued_decision_bytes)},
      {"max_window_cells_per_job", nullptr, "", "",
       Uint(1, uint64_t{1} << 34, &DaemonConfig::max_window_cells_per_job)},
      {"max_rank_units_per_job", nullptr, "", "",
       Uint(1, uint64_t{1} << 34, &DaemonConfig::max_rank_units_per_job)},
      {"max_slots_per_job", nullptr, "", "",
       Uint(1, uint64_t{1} << 32, &DaemonConfig::max_slots_per_job)},
      {"max_o_limit", nullptr, "", "", Uint(1, 1u << 24, &DaemonConfig::max_o_limit)},
      {"max_open_step_bytes", nullptr, "", "",
       ByteSize(1u << 20, uint64_t{1} << 40, &DaemonConfig::max_open_step_bytes)},
      {"max_request_bytes_in_flight", nullptr, "", "",
       ByteSize(1u << 20, uint64_t{1} << 40, &DaemonConfig::max_request_bytes_in_flight)},
      {"memory_budget", "memory-budget", "BYTES",
       "the sum of the jobs' memory footprints;\nsee docs/limits.md",
       ByteSize(16u << 20, uint64_t{1} << 44, &DaemonConfig::memory_budget)},
      {"allow_unregistered_jobs", nullptr, "", "", Bool(&DaemonConfig::allow_unregistered_jobs)},
      {"job_tokens_file", "job-tokens-file", "FILE", "YAML file mapping job ids to job tokens",
       PathIn([](auto& c) -> auto& { return c.job_tokens_file; })},
      {"insecure_tcp", nullptr, "", "", Bool(&DaemonConfig::insecure_tcp)},
      {"admin_token", nullptr, "", "", Token(&DaemonConfig::admin_token)},
      {"admin_token_file", "admin-token-file", "FILE", "file holding the token for Admin mutations",
       PathIn([](auto& c) -> auto& { return c.admin_token_file; })},
      {"read_token", nullptr, "", "", Token(&DaemonConfig::read_token)},
      {"read_token_file", "read-token-file", "FILE",
       "file holding the token for Admin reads over TCP",
       PathIn([](auto& c) -> auto& { return c.read_token_file; })},
      {"tls.cert", nullptr, "", "", PathIn([](auto& c) -> auto& { return c.tls.cert_file; })},
      {"tls.key", nullptr, "", "", PathIn([](auto& c) -> auto& { return c.tls.key_file; })},
      {"tls.client_ca", nullptr, "", "",
       PathIn([](auto& c) -> auto& { return c.tls.client_ca_file; })},
      {"log_level", "log-level", "LEVEL", "trace|debug|info|warn|error|critical|off",
       Checked(&CheckLogLevel, &DaemonConfig::log_level)},
  };
}

// Markdown table cells hold no '|' and no line break.
std::string Cell(std::string text) {
  for (char& ch : text) {
    if (ch == '\n') ch = ' ';
  }
  return text;
}

}  // namespace

const std::vector<ScalarKey>& ScalarKeys() {
  static const std::vector<ScalarKey> kKeys = MakeKeys();
  return kKeys;
}

const ScalarKey* FindScalarKey(const std::string& key) {
  for (const ScalarKey& k : ScalarKeys()) {
    if (key == k.key) return &k;
  }
  return nullptr;
}

std::string DefaultText(const ScalarKey& key) {
  if (key.machine_default != nullptr) return key.machine_default;
  const std::string value = key.format(DaemonConfig{});
  if (!value.empty()) return value;
  return key.when_unset != nullptr ? key.when_unset : "";
}

std::string DescribeValue(const ScalarKey& key, const DaemonConfig& config) {
  const std::string value = key.format(config);
  if (key.secret) return value.empty() ? "unset" : "set (not shown)";
  if (!value.empty()) return value;
  return key.when_unset != nullptr ? key.when_unset : "unset";
}

std::string HelpWithDefault(const std::string& help, const std::string& default_text) {
  if (default_text.empty()) return help;
  // Help text starts at column 26 (common/flag_parser.cc): keep lines to 80.
  constexpr size_t kWidth = 80 - 26;
  const std::string stated = "(default " + default_text + ")";
  if (help.empty()) return stated;
  const size_t last_line = help.size() - (help.rfind('\n') + 1);
  return help + (last_line + 1 + stated.size() <= kWidth ? " " : "\n") + stated;
}

std::string DaemonConfigKeysMarkdown() {
  std::string out = "| key | flag | default |\n| --- | --- | --- |\n";
  // A value as the file spells it is code; a rule in words is not.
  auto row = [&out](const std::string& key, const char* flag, const std::string& def, bool code) {
    out += "| `" + key + "` | " + (flag == nullptr ? "" : "`--" + std::string(flag) + "`") + " | " +
           (code ? "`" + def + "`" : Cell(def)) + " |\n";
  };
  row("listen", "listen", kListenMachineDefault, false);
  for (const ScalarKey& k : ScalarKeys()) {
    if (std::string(k.key) == "job_tokens_file") row("job_tokens", nullptr, "none", false);
    const std::string def = DefaultText(k);
    row(k.key, k.flag, def.empty() ? "unset" : def, !def.empty() && k.machine_default == nullptr);
  }
  row("controller", nullptr, "ControllerConfig's (docs/controller.md, \"Config keys\")", false);
  return out;
}

}  // namespace daemon_config
}  // namespace gnmr
