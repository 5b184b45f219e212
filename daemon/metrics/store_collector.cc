#include "daemon/metrics/store_collector.h"

#include <algorithm>

namespace gnmr {
namespace metrics {
namespace {

prometheus::MetricFamily Counter(const char* name, const char* help, uint64_t value) {
  prometheus::MetricFamily f{name, help, prometheus::MetricType::Counter, {}};
  prometheus::ClientMetric m;
  m.counter.value = static_cast<double>(value);
  f.metric.push_back(std::move(m));
  return f;
}

}  // namespace

void StoreCollector::SetSources(StoreSources sources) {
  MutexLock lock(mu_);
  sources_ = std::move(sources);
}

void StoreCollector::AddJob(const std::string& job_id, double since_unix) {
  MutexLock lock(mu_);
  jobs_.emplace(job_id, since_unix);
}

void StoreCollector::RemoveJob(const std::string& job_id) {
  MutexLock lock(mu_);
  jobs_.erase(job_id);
}

std::vector<prometheus::MetricFamily> StoreCollector::Collect() const {
  MutexLock lock(mu_);
  std::vector<prometheus::MetricFamily> out;
  if (sources_.figures) {
    const StoreFigures s = sources_.figures();
    out.push_back(
        Counter("gnmr_snapshot_writes_total", "Controller snapshots written.", s.snapshot_writes));
    out.push_back(Counter("gnmr_snapshot_failures_total", "Controller snapshot writes that failed.",
                          s.snapshot_failures));
    out.push_back(
        Counter("gnmr_events_written_total", "Event log lines written.", s.events_written));
    out.push_back(Counter("gnmr_events_dropped_total",
                          "Events not written: the write buffer was full.", s.events_dropped));
    out.push_back(Counter("gnmr_event_write_failures_total",
                          "Events lost to event log write errors.", s.event_write_failures));
    if (s.traces) {
      out.push_back(Counter("gnmr_trace_steps_written_total",
                            "Decided steps written to the jobs' replay traces.",
                            s.trace_steps_written));
      out.push_back(Counter("gnmr_trace_steps_dropped_total",
                            "Decided steps left out of the traces: the recorder's queue was "
                            "full.",
                            s.trace_steps_dropped));
      out.push_back(Counter("gnmr_trace_steps_failed_total",
                            "Decided steps lost to trace write errors.", s.trace_steps_failed));
      out.push_back(Counter("gnmr_trace_bytes_written_total",
                            "Bytes written to the jobs' replay traces.", s.trace_bytes_written));
    }
  }
  if (sources_.last_snapshot_unix && !jobs_.empty()) {
    prometheus::MetricFamily age{
        "gnmr_snapshot_age_seconds",
        "Seconds since the job's last successful snapshot (or since the job "
        "appeared, if it has none).",
        prometheus::MetricType::Gauge,
        {}};
    const double now = clock_->UnixSeconds();
    for (const auto& [job_id, since] : jobs_) {
      const std::optional<double> last = sources_.last_snapshot_unix(job_id);
      prometheus::ClientMetric m;
      m.label.push_back({"job_id", job_id});
      m.gauge.value = std::max(0.0, now - (last ? *last : since));
      age.metric.push_back(std::move(m));
    }
    out.push_back(std::move(age));
  }
  return out;
}

}  // namespace metrics
}  // namespace gnmr
