// gnmrd: the GNMR daemon. Composes the server core (daemon/server) with the
// store and the metrics exporter, restores every job from its snapshot,
// serves until SIGTERM/SIGINT, then stops accepting, ends the streams and
// flushes snapshots and event logs.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "daemon/daemon_config/daemon_config.h"
#include "daemon/gnmrd/side_effects.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/server/daemon.h"
#include "daemon/store/event_log.h"
#include "daemon/store/snapshot_store.h"
#include "daemon/store/snapshot_writer.h"

namespace gnmr {
namespace {

constexpr const char* kVersion = "0.1.0";

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

DaemonOptions ToDaemonOptions(const DaemonConfig& c) {
  DaemonOptions o;
  o.listen = c.listen;
  o.unix_socket_mode = static_cast<int>(c.unix_socket_mode);
  o.max_message_bytes = static_cast<int>(c.max_message_bytes);
  o.tls = {c.tls.cert_file, c.tls.key_file, c.tls.client_ca_file};
  o.registry.max_jobs = c.max_jobs;
  o.registry.allow_unregistered_jobs = c.allow_unregistered_jobs;
  o.registry.job_tokens = c.job_tokens;
  o.registry.default_config = c.controller;
  o.registry.job.aggregation.deadline = std::chrono::milliseconds(c.step_deadline_ms);
  o.registry.job.snapshot_every_steps = c.snapshot_every_steps;
  o.registry.job.max_units = c.max_units_per_job;
  o.limits.max_world_size = c.max_ranks_per_job;
  return o;
}

// Every job with a snapshot, restored; a job that cannot be restored is
// logged and skipped (its files stay for inspection), never fatal.
std::vector<std::unique_ptr<Job>> RestoreJobs(const store::SnapshotStore& store,
                                              const JobOptions& options, JobListener* listener) {
  std::vector<std::unique_ptr<Job>> jobs;
  StatusOr<std::vector<std::string>> ids = store.ListJobs();
  if (!ids.ok()) {
    spdlog::error("cannot list saved jobs: {}", ids.status().ToString());
    return jobs;
  }
  for (const std::string& id : *ids) {
    StatusOr<store::SnapshotStore::Loaded> loaded = store.Load(id);
    if (!loaded.ok()) {
      spdlog::error("job {}: snapshot unusable, not restored: {}", id,
                    loaded.status().ToString());
      continue;
    }
    if (loaded->from_previous) {
      spdlog::warn("job {}: newest snapshot damaged, restored the previous one", id);
    }
    v1::JobMeta meta;
    if (!meta.ParseFromString(loaded->job_meta)) {
      spdlog::error("job {}: job metadata unreadable, not restored", id);
      continue;
    }
    StatusOr<std::unique_ptr<Job>> job = Job::Restore(loaded->state, meta, options, listener);
    if (!job.ok()) {
      spdlog::error("job {}: not restored: {}", id, job.status().ToString());
      continue;
    }
    spdlog::info("job {}: restored at step {} ({} units, {} in recovery)", id,
                 loaded->state.last_step(), loaded->state.units_size(),
                 loaded->state.recovery_size());
    jobs.push_back(std::move(job).value());
  }
  return jobs;
}

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
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  for (const std::string& w : loaded->warnings) spdlog::warn("{}", w);
  spdlog::debug("effective config:\n{}", DescribeConfig(config));

  // Signals are taken by sigwait below: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  Status s = MakeDirs(config.state_dir, 0700);
  for (const std::string& l : config.listen) {
    if (s.ok() && l.rfind("unix:", 0) == 0) {
      const std::string path = l.substr(5);
      const size_t slash = path.rfind('/');
      if (slash != std::string::npos && slash > 0) s = MakeDirs(path.substr(0, slash), 0755);
    }
  }
  if (!s.ok()) {
    std::fprintf(stderr, "gnmrd: %s\n", s.message().c_str());
    return 1;
  }

  store::SnapshotStore snapshot_store(config.state_dir);
  if (Status t = snapshot_store.RemoveTempFiles(); !t.ok()) {
    spdlog::warn("state dir: {}", t.ToString());
  }
  store::SnapshotWriter snapshot_writer(&snapshot_store);
  store::EventLog event_log(config.state_dir);

  std::unique_ptr<metrics::DaemonMetrics> metrics;
  if (!config.metrics_listen.empty()) {
    metrics::MetricsOptions mo;
    mo.listen = config.metrics_listen;
    mo.top_k_units = config.metrics_top_k_units;
    mo.version = kVersion;
    StatusOr<std::unique_ptr<metrics::DaemonMetrics>> m = metrics::DaemonMetrics::Start(mo);
    if (!m.ok()) {
      std::fprintf(stderr, "gnmrd: metrics on %s: %s\n", config.metrics_listen.c_str(),
                   m.status().message().c_str());
      return 1;
    }
    metrics = std::move(m).value();
    metrics::StoreSources sources;
    sources.figures = [&] {
      metrics::StoreFigures f;
      const auto w = snapshot_writer.counters();
      const auto e = event_log.counters();
      f.snapshot_writes = w.writes;
      f.snapshot_failures = w.failures;
      f.events_written = e.written;
      f.events_dropped = e.dropped;
      f.event_write_failures = e.write_failures;
      return f;
    };
    sources.last_snapshot_unix = [&](const std::string& job) {
      return snapshot_writer.LastSuccessUnix(job);
    };
    metrics->SetStoreSources(sources);
  }

  DaemonSideEffects effects(&snapshot_writer, &event_log, metrics.get());
  DaemonOptions options = ToDaemonOptions(config);
  std::vector<std::unique_ptr<Job>> restored =
      RestoreJobs(snapshot_store, options.registry.job, &effects);
  const size_t restored_count = restored.size();

  AdminContext admin;
  admin.version = kVersion;
  admin.admin_token = config.admin_token;
  admin.state_dir = config.state_dir;
  admin.events = [&](const std::string& job, int64_t since, uint32_t limit) {
    return event_log.List(job, since, limit);
  };
  StatusOr<std::unique_ptr<Daemon>> daemon =
      Daemon::Start(options, &effects, admin, std::move(restored));
  if (!daemon.ok()) {
    std::fprintf(stderr, "gnmrd: %s\n", daemon.status().message().c_str());
    return 1;
  }
  if (metrics) {
    (*daemon)->stats().record_rpc = [m = metrics.get()](std::string_view method, StatusCode code) {
      m->RecordRpc(method, code);
    };
  }
  std::string where;
  for (const std::string& b : (*daemon)->bound()) where += (where.empty() ? "" : ", ") + b;
  spdlog::info("gnmrd {} listening on {}; metrics {}; state {}; {} job(s) restored", kVersion,
               where,
               metrics ? "on " + config.metrics_listen + " (port " +
                             std::to_string(metrics->port()) + ")"
                       : std::string("off"),
               config.state_dir, restored_count);

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("{}: shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  (*daemon)->Shutdown(std::chrono::milliseconds(2000));  // also snapshots every job
  snapshot_writer.Stop();
  event_log.Stop();
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
