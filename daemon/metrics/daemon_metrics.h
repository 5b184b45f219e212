// DaemonMetrics: gnmrd's Prometheus registry and its /metrics endpoint
// (docs/metrics.md; metric_families.h lists every metric).
//
//   auto m = DaemonMetrics::Start({.listen = "127.0.0.1:9464"});
//   JobMetrics* jm = (*m)->ForJob("llama-7b");     // cached per job
//   jm->OnDecision(decision, controller, figures);
//   (*m)->RecordRpc("Register", StatusCode::kOk);
//   (*m)->RemoveJob("llama-7b");                  // drops its series
//
// The endpoint listens on 127.0.0.1 by default (deploy/README.md, "Security
// model"); port 0 picks a free port (port() tells which). An empty `listen`
// starts no endpoint: the registry still works and Render() shows its text.
//
// Thread-safe. A JobMetrics pointer stays valid until RemoveJob of that job
// (or the destruction of DaemonMetrics): remove a job from the daemon's own
// tables before removing its metrics.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "common/time_source.h"
#include "daemon/metrics/job_metrics.h"
#include "daemon/metrics/metric_families.h"
#include "daemon/metrics/process_collector.h"
#include "daemon/metrics/store_collector.h"
#include "gnmr/status.h"

namespace gnmr {
namespace metrics {

struct MetricsOptions {
  // "host:port" of the HTTP endpoint (IPv4, [IPv6] or localhost); "" none.
  std::string listen = "127.0.0.1:9464";
  size_t top_k_units = 10;  // per-unit series: top K by GNMR + in recovery
  // Per-unit series refresh at most this often between recovery changes.
  std::chrono::milliseconds unit_refresh{1000};
  GroupOptions unit_groups;  // gnmr_group_* series (group_series.h)
  std::string version;       // gnmr_build_info{version}
  // The HTTP server (civetweb) serves one connection per thread and waits
  // for a request on it up to http_request_timeout: idle connections each
  // hold a thread that long, so a few of them must not block a scrape.
  size_t http_threads = 8;
  std::chrono::milliseconds http_request_timeout{5000};
  // gnmrd's clock (common/time_source.h): the start time, when a job
  // appeared, the snapshot ages, the per-unit refresh pacing. Never null;
  // it must outlive the metrics.
  const TimeSource* clock = &TimeSource::Real();
};

class DaemonMetrics {
 public:
  // Unavailable if the endpoint cannot listen (address in use, bad address).
  static StatusOr<std::unique_ptr<DaemonMetrics>> Start(MetricsOptions options);
  ~DaemonMetrics();
  DaemonMetrics(const DaemonMetrics&) = delete;
  DaemonMetrics& operator=(const DaemonMetrics&) = delete;

  // The bound TCP port of the endpoint; 0 without one.
  int port() const { return port_; }

  // The job's metrics, created on first use.
  JobMetrics* ForJob(const std::string& job_id);
  // Removes every series of the job (and invalidates its JobMetrics).
  void RemoveJob(const std::string& job_id);
  size_t num_jobs() const;

  // One finished RPC: `method` is its short name ("Register", "Session",
  // "Admin.ListJobs"), a fixed set chosen by the server.
  void RecordRpc(std::string_view method, StatusCode code);

  // Scrape-time store figures (store_collector.h).
  void SetStoreSources(StoreSources sources);

  // The text exposition format, as /metrics serves it.
  std::string Render() const;

  prometheus::Registry& registry() { return *registry_; }

 private:
  explicit DaemonMetrics(MetricsOptions options);

  const MetricsOptions options_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<StoreCollector> store_collector_;
  std::shared_ptr<ProcessCollector> process_collector_;
  MetricFamilies families_;

  mutable Mutex mu_;
  std::map<std::string, std::unique_ptr<JobMetrics>> jobs_ GNMR_GUARDED_BY(mu_);
  std::map<std::pair<std::string, int>, prometheus::Counter*> rpcs_ GNMR_GUARDED_BY(mu_);

  // Declared last: destroyed first, so no scrape sees a half-destroyed
  // registry.
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace metrics
}  // namespace gnmr
