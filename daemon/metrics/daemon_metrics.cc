#include "daemon/metrics/daemon_metrics.h"

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include <prometheus/text_serializer.h>

namespace gnmr {
namespace metrics {
namespace {

// civetweb takes numeric addresses only.
std::string CivetAddress(const std::string& listen) {
  const std::string localhost = "localhost:";
  if (listen.compare(0, localhost.size(), localhost) == 0) {
    return "127.0.0.1:" + listen.substr(localhost.size());
  }
  return listen;
}

// civetweb's options: enough threads that idle connections do not starve a
// scrape, and a request timeout so that they give their thread back (the
// default is 30 s, and no keep-alive: a connection serves one request).
std::vector<std::string> CivetOptions(const MetricsOptions& o) {
  return {"listening_ports",    CivetAddress(o.listen),
          "num_threads",        std::to_string(std::max<size_t>(o.http_threads, 1)),
          "request_timeout_ms", std::to_string(o.http_request_timeout.count()),
          "enable_keep_alive",  "no",
          "linger_timeout_ms",  "1000"};
}

}  // namespace

DaemonMetrics::DaemonMetrics(MetricsOptions options)
    : options_(std::move(options)),
      registry_(std::make_shared<prometheus::Registry>()),
      store_collector_(std::make_shared<StoreCollector>(options_.clock)),
      process_collector_(std::make_shared<ProcessCollector>()),
      families_(*registry_) {
  families_.build_info.Add({{"version", options_.version}}).Set(1);
  families_.start_time.Add({}).Set(options_.clock->UnixSeconds());
  families_.jobs.Add({}).Set(0);
}

DaemonMetrics::~DaemonMetrics() {
  exposer_.reset();  // stop serving before anything else goes
  MutexLock lock(mu_);
  jobs_.clear();
}

StatusOr<std::unique_ptr<DaemonMetrics>> DaemonMetrics::Start(MetricsOptions options) {
  std::unique_ptr<DaemonMetrics> m(new DaemonMetrics(std::move(options)));
  if (m->options_.listen.empty()) return m;
  try {
    m->exposer_ = std::make_unique<prometheus::Exposer>(CivetOptions(m->options_));
  } catch (const std::exception& e) {
    return Status(StatusCode::kUnavailable,
                  "metrics: cannot listen on " + m->options_.listen + ": " + e.what());
  }
  m->exposer_->RegisterCollectable(m->registry_);
  m->exposer_->RegisterCollectable(m->store_collector_);
  m->exposer_->RegisterCollectable(m->process_collector_);
  const std::vector<int> ports = m->exposer_->GetListeningPorts();
  if (!ports.empty()) m->port_ = ports.front();
  return m;
}

JobMetrics* DaemonMetrics::ForJob(const std::string& job_id) {
  MutexLock lock(mu_);
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) return it->second.get();
  auto jm =
      std::make_unique<JobMetrics>(&families_, job_id, options_.top_k_units, options_.unit_refresh,
                                   options_.unit_groups, options_.clock);
  JobMetrics* raw = jm.get();
  jobs_.emplace(job_id, std::move(jm));
  families_.jobs.Add({}).Set(static_cast<double>(jobs_.size()));
  store_collector_->AddJob(job_id, options_.clock->UnixSeconds());
  return raw;
}

void DaemonMetrics::RemoveJob(const std::string& job_id) {
  std::unique_ptr<JobMetrics> gone;
  {
    MutexLock lock(mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return;
    gone = std::move(it->second);
    jobs_.erase(it);
    families_.jobs.Add({}).Set(static_cast<double>(jobs_.size()));
  }
  store_collector_->RemoveJob(job_id);
}

size_t DaemonMetrics::num_jobs() const {
  MutexLock lock(mu_);
  return jobs_.size();
}

void DaemonMetrics::RecordRpc(std::string_view method, StatusCode code) {
  MutexLock lock(mu_);
  auto key = std::make_pair(std::string(method), static_cast<int>(code));
  auto it = rpcs_.find(key);
  if (it == rpcs_.end()) {
    prometheus::Counter* c =
        &families_.rpcs.Add({{"method", key.first}, {"code", StatusCodeName(code)}});
    it = rpcs_.emplace(std::move(key), c).first;
  }
  it->second->Increment();
}

void DaemonMetrics::SetStoreSources(StoreSources sources) {
  store_collector_->SetSources(std::move(sources));
}

std::string DaemonMetrics::Render() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (prometheus::MetricFamily& f : store_collector_->Collect()) {
    families.push_back(std::move(f));
  }
  for (prometheus::MetricFamily& f : process_collector_->Collect()) {
    families.push_back(std::move(f));
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace metrics
}  // namespace gnmr
