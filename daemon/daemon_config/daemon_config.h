// DaemonConfig: everything gnmrd is configured with, from its YAML file
// (deploy/gnmrd.example.yaml documents every key) and command-line flags.
//
//   StatusOr<LoadedConfig> loaded = LoadDaemonConfig(argc, argv);
//   if (!loaded.ok()) { print loaded.status().message(); exit 2; }
//   if (loaded->show_help) { print DaemonHelpText("gnmrd"); exit 0; }
//   for (auto& w : loaded->warnings) spdlog::warn(w);
//
// Precedence: defaults < config file (--config) < flags. Every error is one
// line naming where the bad value came from ("gnmrd.yaml:12: ..." or
// "--listen: ..."), returned as InvalidArgument (NotFound for a missing
// file); nothing is exited or printed here.
//
// A TCP listener needs authentication: job_tokens (every job over TCP then
// needs its token) or mutual TLS (tls.client_ca), or the explicit
// `insecure_tcp: true`; otherwise loading fails (deploy/README.md,
// "Security model").
//
// Defaults that depend on the machine, resolved only when nothing sets them:
// - listen: unix:/run/gnmr/gnmrd.sock if /run/gnmr is a writable directory
//   (systemd RuntimeDirectory=gnmr), else unix:$XDG_RUNTIME_DIR/gnmrd.sock
//   if that is set, else unix:/tmp/gnmrd-<uid>.sock. Clients look in the
//   same places.
// - state_dir: /var/lib/gnmr if it (or, to create it, /var/lib) is
//   writable, else $XDG_STATE_HOME/gnmr, else $HOME/.local/state/gnmr,
//   else /tmp/gnmr-<uid>/state.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/aggregator/step_aggregator.h"
#include "daemon/job/job_options.h"
#include "daemon/job/resource_caps.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/metrics/group_series.h"
#include "daemon/server/daemon.h"
#include "daemon/server/decision_queue.h"
#include "daemon/server/job_registry.h"
#include "daemon/server/request_validation.h"
#include "daemon/store/event_log.h"
#include "daemon/store/trace_recorder.h"
#include "gnmr/config.h"
#include "gnmr/status.h"

namespace gnmr {

struct DaemonTls {
  std::string cert_file;       // PEM certificate chain; empty: plaintext
  std::string key_file;        // PEM private key (required with cert_file)
  std::string client_ca_file;  // set: mutual TLS, client certs required
  bool enabled() const { return !cert_file.empty(); }
};

// A default is written once. Where a module's Options (that gnmrd's main
// sets from the key) holds one, the member below is read from it; the
// others (job_idle_expiry_ms, whose module default is "never",
// memory_budget, max_request_bytes_in_flight, log_level) are gnmrd's own.
// tests/daemon_config/check_defaults_once.py keeps it so.
struct DaemonConfig {
  // "unix:/abs/path" and/or "host:port" (IPv4, [IPv6] or a name; port 0
  // picks a free one). Empty after loading means nothing was set: the
  // machine default above is filled in by LoadDaemonConfig.
  std::vector<std::string> listen;
  uint32_t unix_socket_mode = static_cast<uint32_t>(DaemonOptions{}.unix_socket_mode);
  std::string metrics_listen = metrics::MetricsOptions{}.listen;  // "" : no /metrics
  size_t metrics_top_k_units = metrics::MetricsOptions{}.top_k_units;
  // gnmr_group_* series: units grouped by the first N parts of their names
  // (0: none), at most this many groups per job (docs/metrics.md).
  size_t metrics_unit_group_depth = metrics::GroupOptions{}.depth;
  size_t metrics_max_unit_groups = metrics::GroupOptions{}.max_groups;
  std::string state_dir;
  uint32_t snapshot_every_steps = JobOptions{}.snapshot_every_steps;
  uint32_t step_deadline_ms = static_cast<uint32_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(StepAggregator::Options{}.deadline)
          .count());
  // Job lifecycle (deploy/README.md): a job with no stream attached and no
  // report for this long is removed (0: never); a job's event log rotates
  // to events.jsonl.1 past this many bytes.
  uint64_t job_idle_expiry_ms = uint64_t{7} * 24 * 3600 * 1000;
  uint64_t event_log_max_bytes = store::EventLogOptions{}.max_file_bytes;
  // Live trace recording (docs/replay.md, "Recording a live job"): the
  // decided steps of every job whose id matches trace_jobs (a glob) are
  // written to <trace_dir>/<escaped job id>.csv; off while trace_dir is
  // empty. A file is renamed to .csv.1 past trace_max_file_bytes; at most
  // trace_queue_bytes of steps wait for the writer (more are dropped).
  std::string trace_dir;
  std::string trace_jobs = store::TraceRecorderOptions{}.jobs;
  uint64_t trace_max_file_bytes = store::TraceRecorderOptions{}.max_file_bytes;
  uint64_t trace_queue_bytes = store::TraceRecorderOptions{}.max_queued_bytes;
  uint32_t max_message_bytes = static_cast<uint32_t>(DaemonOptions{}.max_message_bytes);
  uint32_t max_jobs = static_cast<uint32_t>(RegistryOptions{}.max_jobs);
  uint32_t max_ranks_per_job = RequestLimits{}.max_world_size;
  uint32_t max_units_per_job = static_cast<uint32_t>(JobOptions{}.max_units);
  // How far a report's step may jump ahead of its job's last closed step
  // (docs/limits.md); the first report of a job or generation may name any.
  uint64_t max_step_jump = static_cast<uint64_t>(StepAggregator::Options{}.max_step_jump);
  // Bytes of messages queued for one rank's stream while it does not read
  // (older decisions are dropped beyond it; the newest one and the newest
  // GenerationStart stay).
  uint64_t max_queued_decision_bytes = DecisionQueue::Limits{}.max_bytes;
  // The caps of one job and the daemon's memory budget (docs/limits.md,
  // "Memory"): refused with RESOURCE_EXHAUSTED naming the key.
  uint64_t max_window_cells_per_job = JobCaps{}.max_window_cells;  // units x short_window
  uint64_t max_rank_units_per_job = JobCaps{}.max_rank_units;      // ranks x units, summed
  uint64_t max_slots_per_job = JobCaps{}.max_slots;                // shards, summed
  uint64_t max_o_limit = JobCaps{}.max_o;                          // the largest max_o
  // Reports in open steps.
  uint64_t max_open_step_bytes = StepAggregator::Options{}.max_open_bytes;
  uint64_t memory_budget = uint64_t{1} << 30;  // all jobs' footprints
  // Bytes of unary requests (Register, Admin) parsed and served at once.
  uint64_t max_request_bytes_in_flight = uint64_t{64} << 20;
  // Configured job tokens; unknown jobs bind their token on first
  // registration (trust on first use) when allow_unregistered_jobs, over
  // the Unix socket or mutual TLS only (plain TCP needs a configured one).
  // job_tokens_file (if set: a YAML map of job id to token, e.g. a mounted
  // Kubernetes Secret) is read into job_tokens on load.
  std::map<std::string, std::string> job_tokens;
  std::string job_tokens_file;
  bool allow_unregistered_jobs = RegistryOptions{}.allow_unregistered_jobs;
  // Admin mutations need this token; empty: allowed only over the Unix
  // socket. admin_token_file (if set) is read into admin_token on load.
  std::string admin_token;
  std::string admin_token_file;
  // Admin reads over plain TCP need this token or the admin token.
  std::string read_token;
  std::string read_token_file;
  // true: plain TCP peers are trusted like the Unix socket's (no tokens for
  // reads or first-use registration). Only for a trusted network; a TCP
  // listener without job_tokens or mutual TLS is refused unless this is set.
  bool insecure_tcp = DaemonOptions{}.insecure_tcp;
  DaemonTls tls;
  std::string log_level = "info";  // trace debug info warn error critical off
  ControllerConfig controller;     // for jobs that register without one

  // Where each key got its value: "gnmrd.yaml:12", "--listen", "default".
  std::map<std::string, std::string> origin;
};

// The machine, as the defaults see it; tests substitute their own.
struct Environment {
  std::function<std::optional<std::string>(const std::string&)> getenv;
  std::function<bool(const std::string&)> writable_dir;
  uint32_t uid = 0;
};
Environment SystemEnvironment();

std::string DefaultListen(const Environment& env);
std::string DefaultStateDir(const Environment& env);

struct LoadedConfig {
  DaemonConfig config;
  bool show_help = false;             // --help: print DaemonHelpText, exit 0
  bool show_version = false;          // --version: print DaemonVersionText, exit 0
  std::vector<std::string> warnings;  // worth a log line, not fatal
};

// Parses flags (argv[0] is the program), reads --config, applies the
// flags, fills machine defaults, reads the admin token file and checks the
// result. With --help or --version nothing else is read.
StatusOr<LoadedConfig> LoadDaemonConfig(int argc, const char* const* argv,
                                        const Environment& env = SystemEnvironment());

std::string DaemonHelpText(const std::string& program);
std::string DaemonVersionText();

// The effective config, one "key: value (origin)" line per key, tokens
// redacted: for the startup log.
std::string DescribeConfig(const DaemonConfig& config);

}  // namespace gnmr
