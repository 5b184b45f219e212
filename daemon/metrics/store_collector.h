// StoreCollector: metrics computed when Prometheus scrapes, from the state
// store's own counters (docs/metrics.md, "Computed at scrape time": snapshot
// age and failures).
//
// A snapshot's age grows between writes without anyone updating a gauge,
// so it is computed at scrape time: now minus the job's last successful
// snapshot, or minus the time the job appeared in this process when it has
// none yet (so "no snapshot for 10 minutes" alerts also fire for a job that
// never managed one). The store counters are cumulative and exported as
// counters as they are.
//
// The sources are callbacks, so this library does not depend on the store:
// the daemon wires them to SnapshotWriter / EventLog.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "common/time_source.h"

namespace gnmr {
namespace metrics {

struct StoreFigures {
  uint64_t snapshot_writes = 0;
  uint64_t snapshot_failures = 0;
  uint64_t events_written = 0;
  uint64_t events_dropped = 0;
  uint64_t event_write_failures = 0;
  // Live trace recording (exported only when it is on).
  bool traces = false;
  uint64_t trace_steps_written = 0;
  uint64_t trace_steps_dropped = 0;
  uint64_t trace_steps_failed = 0;
  uint64_t trace_bytes_written = 0;
};

struct StoreSources {
  // Cumulative store counters; unset: not exported.
  std::function<StoreFigures()> figures;
  // Unix time of the job's last successful snapshot, nullopt if none.
  std::function<std::optional<double>(const std::string& job_id)> last_snapshot_unix;
};

class StoreCollector : public prometheus::Collectable {
 public:
  // `clock` (never null) dates the snapshot ages; it must outlive this.
  explicit StoreCollector(const TimeSource* clock) : clock_(clock) {}

  void SetSources(StoreSources sources);
  // The jobs to report a snapshot age for, with when they appeared.
  void AddJob(const std::string& job_id, double since_unix);
  void RemoveJob(const std::string& job_id);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const TimeSource* const clock_;
  mutable Mutex mu_;
  StoreSources sources_ GNMR_GUARDED_BY(mu_);
  std::map<std::string, double> jobs_ GNMR_GUARDED_BY(mu_);  // job id -> appeared (Unix time)
};

}  // namespace metrics
}  // namespace gnmr
