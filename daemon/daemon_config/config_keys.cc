#include "daemon/daemon_config/config_keys.h"

#include <limits>

#include "daemon/daemon_config/config_file.h"
#include "daemon/daemon_config/config_values.h"

namespace gnmr {
namespace daemon_config {
namespace {

template <typename Field>
std::function<Setter(DaemonConfig*)> Uint(uint64_t lo, uint64_t hi, Field DaemonConfig::*field) {
  return [=](DaemonConfig* c) -> Setter {
    return [=](const std::string& t) {
      uint64_t n = 0;
      Status s = ParseUint(t, lo, hi, &n);
      if (s.ok()) c->*field = static_cast<Field>(n);
      return s;
    };
  };
}

// A byte count ("64MiB", "4096").
std::function<Setter(DaemonConfig*)> ByteSize(uint64_t lo, uint64_t hi,
                                              uint64_t DaemonConfig::*field) {
  return [=](DaemonConfig* c) -> Setter {
    return [=](const std::string& t) {
      uint64_t n = 0;
      Status s = ParseByteSize(t, lo, hi, &n);
      if (s.ok()) c->*field = n;
      return s;
    };
  };
}

// A path, made absolute against the current directory.
std::function<Setter(DaemonConfig*)> PathIn(std::string* (*field)(DaemonConfig*)) {
  return [=](DaemonConfig* c) -> Setter {
    return [=](const std::string& t) {
      if (t.empty()) return InvalidArgument("must not be empty");
      *field(c) = AbsolutePath(t);
      return Status::Ok();
    };
  };
}

// A string that `check` accepts as it is.
std::function<Setter(DaemonConfig*)> Checked(Status (*check)(std::string_view),
                                             std::string DaemonConfig::*field) {
  return [=](DaemonConfig* c) -> Setter {
    return [=](const std::string& t) {
      Status s = check(t);
      if (s.ok()) c->*field = t;
      return s;
    };
  };
}

std::vector<ScalarKey> MakeKeys() {
  constexpr uint64_t kMaxGrpcMessage = std::numeric_limits<int32_t>::max();
  return {
      {"unix_socket_mode", nullptr, "", "",
       [](DaemonConfig* c) -> Setter {
         return [c](const std::string& t) { return ParseFileMode(t, &c->unix_socket_mode); };
       }},
      {"metrics.listen", "metrics", "ADDR", "ip:port of /metrics, or off (default 127.0.0.1:9464)",
       [](DaemonConfig* c) -> Setter {
         return [c](const std::string& t) { return ParseMetricsAddress(t, &c->metrics_listen); };
       }},
      {"metrics.top_k_units", nullptr, "", "", Uint(0, 10000, &DaemonConfig::metrics_top_k_units)},
      {"metrics.unit_group_depth", nullptr, "", "",
       Uint(0, 64, &DaemonConfig::metrics_unit_group_depth)},
      {"metrics.max_unit_groups", nullptr, "", "",
       Uint(1, 10000, &DaemonConfig::metrics_max_unit_groups)},
      {"state_dir", "state-dir", "DIR", "snapshots and event logs (default /var/lib/gnmr)",
       PathIn([](DaemonConfig* c) { return &c->state_dir; })},
      {"snapshot_every_steps", "snapshot-every", "N",
       "snapshot each job every N steps (default 50)",
       Uint(1, 1000000, &DaemonConfig::snapshot_every_steps)},
      {"step_deadline_ms", "step-deadline-ms", "MS",
       "close a step this long after its first report\n(default 2000)",
       Uint(1, 3600000, &DaemonConfig::step_deadline_ms)},
      {"job_idle_expiry", "job-idle-expiry", "DURATION",
       "remove a job idle this long, e.g. 7d, 12h, 0\n(never); default 7d",
       [](DaemonConfig* c) -> Setter {
         return [c](const std::string& t) {
           return ParseDurationMs(t, uint64_t{3650} * 86400000, &c->job_idle_expiry_ms);
         };
       }},
      {"event_log_max_bytes", "event-log-max-bytes", "SIZE",
       "rotate a job's event log past this size\n(default 64MiB)",
       [](DaemonConfig* c) -> Setter {
         return [c](const std::string& t) {
           return ParseByteSize(t, 4096, uint64_t{1} << 40, &c->event_log_max_bytes);
         };
       }},
      {"trace.dir", "trace-dir", "DIR",
       "record every job's steps as replay traces\nthere (docs/replay.md; default off)",
       PathIn([](DaemonConfig* c) { return &c->trace_dir; })},
      {"trace.jobs", nullptr, "", "",
       [](DaemonConfig* c) -> Setter {
         return [c](const std::string& t) {
           if (t.empty()) return InvalidArgument("must not be empty (a glob of job ids)");
           c->trace_jobs = t;
           return Status::Ok();
         };
       }},
      {"trace.max_file_bytes", nullptr, "", "",
       ByteSize(4096, uint64_t{1} << 40, &DaemonConfig::trace_max_file_bytes)},
      {"trace.queue_bytes", nullptr, "", "",
       ByteSize(1u << 20, uint64_t{1} << 36, &DaemonConfig::trace_queue_bytes)},
      {"max_message_bytes", nullptr, "", "",
       [=](DaemonConfig* c) -> Setter {
         return [=](const std::string& t) {
           uint64_t n = 0;
           Status s = ParseByteSize(t, 4096, kMaxGrpcMessage, &n);
           if (s.ok()) c->max_message_bytes = static_cast<uint32_t>(n);
           return s;
         };
       }},
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
       "the sum of the jobs' memory footprints\n(default 1GiB; docs/limits.md)",
       ByteSize(16u << 20, uint64_t{1} << 44, &DaemonConfig::memory_budget)},
      {"allow_unregistered_jobs", nullptr, "", "",
       [](DaemonConfig* c) -> Setter {
         return [c](const std::string& t) { return ParseBool(t, &c->allow_unregistered_jobs); };
       }},
      {"job_tokens_file", "job-tokens-file", "FILE", "YAML file mapping job ids to job tokens",
       PathIn([](DaemonConfig* c) { return &c->job_tokens_file; })},
      {"insecure_tcp", nullptr, "", "",
       [](DaemonConfig* c) -> Setter {
         return [c](const std::string& t) { return ParseBool(t, &c->insecure_tcp); };
       }},
      {"admin_token", nullptr, "", "", Checked(&CheckToken, &DaemonConfig::admin_token)},
      {"admin_token_file", "admin-token-file", "FILE", "file holding the token for Admin mutations",
       PathIn([](DaemonConfig* c) { return &c->admin_token_file; })},
      {"read_token", nullptr, "", "", Checked(&CheckToken, &DaemonConfig::read_token)},
      {"read_token_file", "read-token-file", "FILE",
       "file holding the token for Admin reads over TCP",
       PathIn([](DaemonConfig* c) { return &c->read_token_file; })},
      {"tls.cert", nullptr, "", "", PathIn([](DaemonConfig* c) { return &c->tls.cert_file; })},
      {"tls.key", nullptr, "", "", PathIn([](DaemonConfig* c) { return &c->tls.key_file; })},
      {"tls.client_ca", nullptr, "", "",
       PathIn([](DaemonConfig* c) { return &c->tls.client_ca_file; })},
      {"log_level", "log-level", "LEVEL",
       "trace|debug|info|warn|error|critical|off\n(default info)",
       Checked(&CheckLogLevel, &DaemonConfig::log_level)},
  };
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

}  // namespace daemon_config
}  // namespace gnmr
