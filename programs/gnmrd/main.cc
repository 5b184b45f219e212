// gnmrd: the GNMR daemon. Composes the server core (daemon/server) with the
// store and the metrics exporter, locks its state dir (one daemon per state
// dir), restores every job from its snapshot (restore.h), serves until a
// terminating signal (SIGTERM, SIGINT, SIGQUIT, SIGUSR1, ...; SIGHUP is
// ignored), then stops accepting, ends the streams and flushes snapshots
// and event logs. Exit codes: 0 clean stop, 1 cannot start or a snapshot
// failed, 2 bad config or command line.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/shutdown_signals.h"
#include "common/text.h"
#include "common/time_source.h"
#include "daemon/daemon_config/daemon_config.h"
#include "daemon/job/fan_out.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/server/daemon.h"
#include "daemon/store/event_log.h"
#include "daemon/store/job_removal.h"
#include "daemon/store/snapshot_store.h"
#include "daemon/store/snapshot_writer.h"
#include "daemon/store/state_dir.h"
#include "daemon/store/trace_recorder.h"
#include "gnmr/version.h"
#include "programs/gnmrd/fd_limit.h"
#include "programs/gnmrd/restore.h"
#include "programs/gnmrd/side_effects.h"

namespace gnmr {
namespace {

constexpr const char* kVersion = GNMR_VERSION_STRING;

// mkdir -p with `mode` for the directories it creates.
Status MakeDirs(const std::string& path, mode_t mode) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      partial = path.substr(0, i);
      if (::mkdir(partial.c_str(), mode) != 0 && errno != EEXIST) {
        return Status(StatusCode::kFailedPrecondition,
                      "cannot create " + partial + ": " + std::strerror(errno));
      }
    }
  }
  return Status::Ok();
}

DaemonOptions ToDaemonOptions(const DaemonConfig& c, const TimeSource* clock) {
  DaemonOptions o;
  // The jobs restored before Daemon::Start are made with registry.job too.
  o.clock = clock;
  o.registry.job.clock = clock;
  o.listen = c.listen;
  o.unix_socket_mode = static_cast<int>(c.unix_socket_mode);
  o.max_message_bytes = static_cast<int>(c.max_message_bytes);
  o.tls = {c.tls.cert_file, c.tls.key_file, c.tls.client_ca_file};
  o.registry.max_jobs = c.max_jobs;
  o.registry.allow_unregistered_jobs = c.allow_unregistered_jobs;
  o.registry.job_tokens = c.job_tokens;
  o.insecure_tcp = c.insecure_tcp;
  o.registry.default_config = c.controller;
  o.registry.job.aggregation.deadline = std::chrono::milliseconds(c.step_deadline_ms);
  o.registry.job.snapshot_every_steps = c.snapshot_every_steps;
  o.registry.job.max_units = c.max_units_per_job;
  o.registry.idle_expiry = std::chrono::milliseconds(c.job_idle_expiry_ms);
  o.registry.job.aggregation.max_step_jump = static_cast<int64_t>(c.max_step_jump);
  o.session_queue.max_bytes = c.max_queued_decision_bytes;
  JobCaps& caps = o.registry.job.caps;
  caps.max_window_cells = c.max_window_cells_per_job;
  caps.max_rank_units = c.max_rank_units_per_job;
  caps.max_slots = c.max_slots_per_job;
  caps.max_o = c.max_o_limit;
  caps.max_queued_bytes = c.max_queued_decision_bytes;
  caps.event_ring_bytes = store::RingMemoryBound(store::EventLogOptions{});  // event_log below
  o.registry.job.aggregation.max_open_bytes = c.max_open_step_bytes;
  o.registry.job.budget = std::make_shared<MemoryBudget>(c.memory_budget);
  o.registry.job.fan_out = std::make_shared<FanOut>(FanOut::DefaultHelpers());
  o.request_gate = std::make_shared<RequestGate>(c.max_request_bytes_in_flight);
  o.limits.max_world_size = c.max_ranks_per_job;
  return o;
}

// The state dir: created, writable (checked now, not at the first
// snapshot) and locked against a second daemon (state_dir.h).
StatusOr<std::unique_ptr<store::StateDirLock>> PrepareStateDir(const DaemonConfig& config) {
  Status s = MakeDirs(config.state_dir, 0700);
  if (s.ok()) s = store::CheckStateDirWritable(config.state_dir);
  if (!s.ok()) return s;
  return store::StateDirLock::Acquire(config.state_dir);
}

// The directories of the Unix sockets gnmrd listens on.
Status MakeSocketDirs(const DaemonConfig& config) {
  for (const std::string& l : config.listen) {
    if (l.rfind("unix:", 0) != 0) continue;
    const std::string path = l.substr(5);
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos || slash == 0) continue;
    if (Status s = MakeDirs(path.substr(0, slash), 0755); !s.ok()) return s;
  }
  return Status::Ok();
}

// The log level, the config file's warnings, the effective config, and the
// open-file limit, raised before any file or socket is opened (the limit
// caps the connections).
void SetUpLogging(const LoadedConfig& loaded) {
  const DaemonConfig& config = loaded.config;
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  for (const std::string& w : loaded.warnings) spdlog::warn("{}", w);
  spdlog::debug("effective config:\n{}", DescribeConfig(config));
  bool low_fd_limit = false;
  const std::string fd_limit = DescribeFdLimit(RaiseFdLimit(), &low_fd_limit);
  if (low_fd_limit) {
    spdlog::warn("{}", fd_limit);
  } else {
    spdlog::info("{}", fd_limit);
  }
}

// What a previous daemon left half done: temp files, deleted jobs.
void CleanStateDir(const store::SnapshotStore& snapshot_store, const std::string& state_dir) {
  if (Status t = snapshot_store.RemoveTempFiles(); !t.ok()) {
    spdlog::warn("state dir: {}", t.ToString());
  }
  // A job deleted while the previous daemon died: finish removing it.
  if (StatusOr<int> n = store::RemoveDeletedJobDirs(state_dir); !n.ok()) {
    spdlog::warn("state dir: {}", n.status().ToString());
  } else if (*n > 0) {
    spdlog::info("state dir: finished removing {} deleted job(s)", *n);
  }
}

// The step recorder (docs/replay.md), or null without trace_dir.
std::unique_ptr<store::TraceRecorder> StartTraces(const DaemonConfig& config) {
  if (config.trace_dir.empty()) return nullptr;
  store::TraceRecorderOptions trace_options;
  trace_options.dir = config.trace_dir;
  trace_options.jobs = config.trace_jobs;
  trace_options.max_file_bytes = config.trace_max_file_bytes;
  trace_options.max_queued_bytes = config.trace_queue_bytes;
  return std::make_unique<store::TraceRecorder>(trace_options);
}

// The Prometheus exporter with the store's figures, or null without
// metrics_listen. The sources read the store objects, which outlive it.
StatusOr<std::unique_ptr<metrics::DaemonMetrics>> StartMetrics(
    const DaemonConfig& config, const store::SnapshotWriter& snapshot_writer,
    const store::EventLog& event_log, const store::TraceRecorder* traces, const TimeSource* clock) {
  if (config.metrics_listen.empty()) return std::unique_ptr<metrics::DaemonMetrics>();
  metrics::MetricsOptions mo;
  mo.listen = config.metrics_listen;
  mo.top_k_units = config.metrics_top_k_units;
  mo.unit_groups.depth = config.metrics_unit_group_depth;
  mo.unit_groups.max_groups = config.metrics_max_unit_groups;
  mo.version = kVersion;
  mo.clock = clock;
  StatusOr<std::unique_ptr<metrics::DaemonMetrics>> m = metrics::DaemonMetrics::Start(mo);
  if (!m.ok()) return m;
  metrics::StoreSources sources;
  sources.figures = [&snapshot_writer, &event_log, traces] {
    metrics::StoreFigures f;
    const auto w = snapshot_writer.counters();
    const auto e = event_log.counters();
    f.snapshot_writes = w.writes;
    f.snapshot_failures = w.failures;
    f.events_written = e.written;
    f.events_dropped = e.dropped;
    f.event_write_failures = e.write_failures;
    if (traces) {
      const auto t = traces->counters();
      f.traces = true;
      f.trace_steps_written = t.steps_written;
      f.trace_steps_dropped = t.steps_dropped;
      f.trace_steps_failed = t.steps_failed;
      f.trace_bytes_written = t.bytes_written;
    }
    return f;
  };
  sources.last_snapshot_unix = [&snapshot_writer](const std::string& job) {
    return snapshot_writer.LastSuccessUnix(job);
  };
  (*m)->SetStoreSources(sources);
  return m;
}

AdminContext MakeAdminContext(const DaemonConfig& config, store::EventLog* event_log) {
  AdminContext admin;
  admin.version = kVersion;
  admin.admin_token = config.admin_token;
  admin.read_token = config.read_token;
  admin.state_dir = config.state_dir;
  admin.events = [event_log](const std::string& job, int64_t since, uint32_t limit) {
    return event_log->List(job, since, limit);
  };
  return admin;
}

void LogListening(const Daemon& daemon, const DaemonConfig& config,
                  const metrics::DaemonMetrics* metrics, size_t restored_count) {
  std::string where;
  for (const std::string& b : daemon.bound()) where += (where.empty() ? "" : ", ") + b;
  spdlog::info(
      "gnmrd {} listening on {}; metrics {}; state {}; {} job(s) restored", kVersion, where,
      metrics ? "on " + config.metrics_listen + " (port " + std::to_string(metrics->port()) + ")"
              : std::string("off"),
      config.state_dir, restored_count);
  if (!config.trace_dir.empty()) {
    spdlog::info("recording the steps of jobs matching '{}' to {} (docs/replay.md)",
                 EscapeForLog(config.trace_jobs), config.trace_dir);
  }
}

// The whole life of the daemon: the command line, the state dir, the
// store, the exporter, the restored jobs, the server; serve until a stop
// signal; then shut down in the reverse order, flushing everything.
int Run(int argc, char** argv) {
  StatusOr<LoadedConfig> loaded = LoadDaemonConfig(argc, argv);
  if (!loaded.ok()) {
    std::fprintf(stderr, "gnmrd: %s\n", loaded.status().message().c_str());
    return 2;
  }
  if (loaded->show_help) {
    std::fputs(DaemonHelpText("gnmrd").c_str(), stdout);
    return 0;
  }
  if (loaded->show_version) {
    std::fputs(DaemonVersionText().c_str(), stdout);
    return 0;
  }
  const DaemonConfig& config = loaded->config;
  SetUpLogging(*loaded);
  // Signals are taken by sigwait below: block them before any thread starts
  // (common/shutdown_signals.h).
  const sigset_t signals = BlockStopSignals();

  StatusOr<std::unique_ptr<store::StateDirLock>> lock = PrepareStateDir(config);
  Status dirs = lock.ok() ? MakeSocketDirs(config) : lock.status();
  if (!dirs.ok()) {
    std::fprintf(stderr, "gnmrd: %s\n", dirs.message().c_str());
    return 1;
  }

  // The one clock of the process: every part that reads the time is given
  // this one (tests of the parts give them a ManualClock instead).
  const TimeSource* const clock = &TimeSource::Real();
  store::SnapshotStore snapshot_store(config.state_dir, clock);
  CleanStateDir(snapshot_store, config.state_dir);
  store::SnapshotWriter snapshot_writer(&snapshot_store);
  store::EventLogOptions event_options;
  event_options.max_file_bytes = config.event_log_max_bytes;
  event_options.clock = clock;
  store::EventLog event_log(config.state_dir, event_options);
  std::unique_ptr<store::TraceRecorder> traces = StartTraces(config);
  StatusOr<std::unique_ptr<metrics::DaemonMetrics>> started =
      StartMetrics(config, snapshot_writer, event_log, traces.get(), clock);
  if (!started.ok()) {
    std::fprintf(stderr, "gnmrd: metrics on %s: %s\n", config.metrics_listen.c_str(),
                 started.status().message().c_str());
    return 1;
  }
  std::unique_ptr<metrics::DaemonMetrics> metrics = std::move(started).value();

  DaemonSideEffects effects(&snapshot_writer, &event_log, metrics.get(), config.state_dir,
                            traces.get(), clock);
  DaemonOptions options = ToDaemonOptions(config, clock);
  if (metrics) {
    options.record_rpc = [m = metrics.get()](std::string_view method, StatusCode code) {
      m->RecordRpc(method, code);
    };
  }
  std::vector<std::unique_ptr<Job>> restored =
      RestoreJobs(snapshot_store, options.registry.job, &effects);
  const size_t restored_count = restored.size();
  StatusOr<std::unique_ptr<Daemon>> daemon =
      Daemon::Start(options, &effects, MakeAdminContext(config, &event_log), std::move(restored));
  if (!daemon.ok()) {
    std::fprintf(stderr, "gnmrd: %s\n", daemon.status().message().c_str());
    return 1;
  }
  LogListening(**daemon, config, metrics.get(), restored_count);

  const std::string signal_name = WaitForStopSignal(signals, [] {
    spdlog::warn(
        "SIGHUP ignored: gnmrd does not reload its config file; restart it to apply changes");
  });
  spdlog::info("{}: shutting down", signal_name);
  (*daemon)->Shutdown(std::chrono::milliseconds(2000));  // also snapshots every job
  snapshot_writer.Stop();
  event_log.Stop();
  if (traces) traces->Stop();  // writes every queued step
  const auto w = snapshot_writer.counters();
  spdlog::info("stopped: {} snapshot writes, {} failures", w.writes, w.failures);
  return w.failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace gnmr

int main(int argc, char** argv) {
  try {
    return gnmr::Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gnmrd: fatal: %s\n", e.what());
    return 1;
  }
}
