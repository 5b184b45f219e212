// JobMetrics: every Prometheus series of one training job (label job_id),
// updated by the daemon as the job runs. Get one from
// DaemonMetrics::ForJob; it is valid until DaemonMetrics::RemoveJob.
//
// The calls map one to one onto the job's side effects (JobListener):
//   SetWorldSize        when the job is created or restored
//   SetRanksConnected   a Session stream opened or closed
//   SetRanksWithoutDecisions  the job counted its ranks without decisions
//   OnReport            a StepStats report arrived (with client figures)
//   OnLateReport        a report for a closed step was dropped
//   OnAckMismatch       ranks acked different plans for a step (once per
//                       step), or a decision with another digest than sent
//   OnStandbyNote       a standby's ack carried its client figures
//   OnReplicaCheck      a standby's held report was compared with its
//                       reporter's
//   OnDecisionFailed    a closed step could not be decided
//   OnDecision          a step was decided
//   Refresh             the controller changed outside a decision (restore,
//                       import, SetConfig, admin release)
//
// Counters that the controller keeps cumulatively (unit-steps) are advanced
// by the difference since the previous decision; when decisions were missed
// (a restored or imported controller) the next one only re-bases, so a
// restart never shows up as a burst. Client figures are cumulative per rank
// and handled the same way (a client restart re-bases). The client's
// statistics times are per report and summed; a time that is not finite,
// negative or above an hour is ignored.
//
// Per-unit and unit-group series are refreshed when the recovery set
// changes and at most every `unit_refresh` otherwise (0: every decision),
// since choosing the top K and folding the groups cost O(units).
//
// Thread-safe: one mutex per job; the Prometheus metrics are atomic.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "common/time_source.h"
#include "controller/controller.h"
#include "daemon/metrics/group_series.h"
#include "daemon/metrics/metric_families.h"
#include "daemon/metrics/unit_series.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {
namespace metrics {

// Figures of one closed step, besides its decision.
struct StepFigures {
  uint32_t incomplete_units = 0;   // registered units not evaluated
  uint32_t omitted_units = 0;      // inactive: listed by no sparse report
  bool by_deadline = false;        // closed without every rank's report
  double aggregation_seconds = 0;  // combining the ranks' reports
  double decision_seconds = 0;     // last report in -> decision out
  double broadcast_seconds = 0;    // of which: queueing it to every stream
};

class JobMetrics {
 public:
  using Clock = std::chrono::steady_clock;

  // `clock` (never null, outlives this) paces the per-unit refresh.
  JobMetrics(MetricFamilies* families, std::string job_id, size_t top_k_units,
             Clock::duration unit_refresh, GroupOptions groups = {},
             const TimeSource* clock = &TimeSource::Real());
  ~JobMetrics();  // removes every series of the job
  JobMetrics(const JobMetrics&) = delete;
  JobMetrics& operator=(const JobMetrics&) = delete;

  void SetWorldSize(uint32_t ranks);
  void SetRanksConnected(uint32_t ranks);
  void SetRanksWithoutDecisions(uint32_t ranks);
  void OnReport(uint32_t rank, size_t bytes, const v1::ClientOverhead& overhead);
  void OnStandbyNote(uint32_t rank, const v1::ClientOverhead& overhead);
  void OnReplicaCheck(bool match);
  void OnLateReport();
  void OnAckMismatch();
  void OnDecisionFailed();
  void OnDecision(const Decision& decision, const Controller& controller, const StepFigures& step);
  void Refresh(const Controller& controller);

  // Per-unit series from a full unit list, for callers without a
  // Controller: exports the units in recovery and the top K by GNMR.
  void UpdateUnits(const std::vector<UnitFigures>& units);

  const std::string& job_id() const { return job_id_; }
  size_t unit_series() const;
  size_t group_series() const;

 private:
  struct RankSeries {
    prometheus::Gauge* overhead_ratio;
    prometheus::Counter* dropped_reports;
    prometheus::Counter* missed_decisions;
    prometheus::Counter* stats_seconds;
    prometheus::Counter* stats_gpu_seconds;
    uint64_t last_dropped = 0;
    uint64_t last_missed = 0;
  };

  void SyncController(const Controller& c, bool count) GNMR_REQUIRES(mu_);
  void RefreshUnits(const Controller& c) GNMR_REQUIRES(mu_);
  prometheus::Counter& Admissions(Action action, Trigger trigger) GNMR_REQUIRES(mu_);
  RankSeries& Rank(uint32_t rank) GNMR_REQUIRES(mu_);
  // Takes mu_.
  void RecordClientFigures(uint32_t rank, const v1::ClientOverhead& overhead) GNMR_EXCLUDES(mu_);

  MetricFamilies* const f_;
  const std::string job_id_;
  const prometheus::Labels labels_;
  const size_t top_k_;
  const Clock::duration unit_refresh_;
  const TimeSource* const clock_;

  mutable Mutex mu_;
  prometheus::Gauge& ranks_expected_;
  prometheus::Gauge& ranks_connected_;
  prometheus::Gauge& ranks_without_decisions_;
  prometheus::Gauge& last_step_;
  prometheus::Counter& reports_;
  prometheus::Counter& report_bytes_;
  prometheus::Counter& late_reports_;
  prometheus::Counter& incomplete_steps_;
  prometheus::Counter& incomplete_unit_steps_;
  prometheus::Counter& omitted_unit_steps_;
  prometheus::Counter& decisions_;
  prometheus::Gauge& units_;
  prometheus::Gauge& units_in_recovery_;
  prometheus::Gauge& max_o_;
  prometheus::Counter& denials_;
  prometheus::Counter& denied_clips_;
  prometheus::Counter& releases_;
  prometheus::Counter& global_skips_;
  prometheus::Counter& unit_steps_;
  prometheus::Counter& unit_steps_in_recovery_;
  prometheus::Gauge& recovery_fraction_;
  prometheus::Histogram& decision_latency_;
  prometheus::Histogram& aggregation_time_;
  prometheus::Histogram& broadcast_time_;
  prometheus::Counter& ack_mismatches_;
  prometheus::Counter& replica_checks_;
  prometheus::Counter& replica_mismatches_;
  prometheus::Counter& decision_failures_;
  prometheus::Counter* admissions_[4][4] GNMR_GUARDED_BY(mu_) = {};  // [action][trigger]
  // By rank (ranks are below the job's world size): at 16,384 ranks every
  // rank's ack or report finds its series, so a lookup must not be a
  // tree walk.
  std::vector<std::unique_ptr<RankSeries>> ranks_ GNMR_GUARDED_BY(mu_);
  UnitSeries unit_series_ GNMR_GUARDED_BY(mu_);
  GroupSeries group_series_ GNMR_GUARDED_BY(mu_);

  uint64_t last_sequence_ GNMR_GUARDED_BY(mu_) = 0;  // controller sequence last synced
  uint64_t last_unit_steps_ GNMR_GUARDED_BY(mu_) = 0;
  uint64_t last_unit_steps_in_recovery_ GNMR_GUARDED_BY(mu_) = 0;
  Clock::time_point last_unit_refresh_ GNMR_GUARDED_BY(mu_) = {};
};

}  // namespace metrics
}  // namespace gnmr
