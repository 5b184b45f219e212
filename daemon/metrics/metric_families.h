// MetricFamilies: the catalogue of gnmrd's Prometheus metrics
// (docs/metrics.md), every family created once in one registry.
//
// Conventions: prefix gnmr_, base units (seconds, bytes), counters end in
// _total, durations are _seconds histograms. The training job is the label
// `job_id` (never `job`, which Prometheus reserves for the scrape job); a
// rank is `rank`, a unit `unit`.
//
// Daemon-wide:
//   gnmr_build_info{version}                     1
//   gnmr_start_time_seconds                      Unix time the daemon started
//   gnmr_jobs                                    jobs known to the daemon
//   gnmr_rpcs_total{method,code}                 finished RPCs
// Per job {job_id}:
//   gnmr_ranks_expected, gnmr_ranks_connected    world size, live sessions
//   gnmr_ranks_without_decisions                 ranks with no decision for 20 steps
//   gnmr_last_step                               last decided step
//   gnmr_reports_total, gnmr_report_bytes_total  StepStats received
//   gnmr_late_reports_total                      reports for closed steps
//   gnmr_incomplete_steps_total                  steps closed by the deadline
//   gnmr_incomplete_unit_steps_total             units not evaluated there
//   gnmr_omitted_unit_steps_total                inactive: left out of reports
//   gnmr_decisions_total                         steps decided
//   gnmr_units, gnmr_units_in_recovery, gnmr_max_o
//   gnmr_admissions_total{action,trigger}
//   gnmr_denials_total, gnmr_releases_total, gnmr_global_skips_total
//   gnmr_denied_clips_total                      denials clipped (denied: clip)
//   gnmr_unit_steps_total, gnmr_unit_steps_in_recovery_total
//   gnmr_recovery_fraction                       their ratio (lifetime)
//   gnmr_decision_latency_seconds                last report in -> decision out
//   gnmr_aggregation_seconds                     combining the ranks' reports
//   gnmr_decision_broadcast_seconds              the decision queued to every stream
//   gnmr_ack_mismatches_total                    steps the ranks planned differently
//   gnmr_decision_failures_total                 closed steps not decided (a bug)
//   gnmr_replica_checks_total                    standbys' held reports compared
//   gnmr_replica_mismatches_total                ... that differed (report: all follows)
// Per job and rank {job_id,rank}:
//   gnmr_client_overhead_ratio                   stats time / step time
//   gnmr_client_dropped_reports_total, gnmr_client_missed_decisions_total
//   gnmr_client_stats_seconds_total              host time in Observe
//   gnmr_client_stats_gpu_seconds_total          GPU time of the statistics
// Per job and unit {job_id,unit}, only units in recovery and the top K by
// GNMR (unit_series.h):
//   gnmr_unit_gnmr, gnmr_unit_norm, gnmr_unit_mu, gnmr_unit_in_recovery,
//   gnmr_unit_forward, gnmr_unit_saturation (forward channel),
//   gnmr_unit_saturated_blocks, gnmr_unit_dead_blocks,
//   gnmr_unit_scale_clamps (block health of block-scaled forward tensors),
//   gnmr_unit_backward (backward channel)
// Per job and unit group {job_id,group}, every unit folded into at most
// metrics.max_unit_groups groups (group_series.h):
//   gnmr_group_gnmr_max, gnmr_group_units, gnmr_group_units_in_recovery
// Computed at scrape time (store_collector.h):
//   gnmr_snapshot_age_seconds{job_id}, gnmr_snapshot_writes_total,
//   gnmr_snapshot_failures_total, gnmr_events_written_total,
//   gnmr_events_dropped_total, gnmr_event_write_failures_total
// Process figures at scrape time (process_collector.h):
//   gnmr_process_resident_memory_bytes, gnmr_process_virtual_memory_bytes,
//   gnmr_process_open_fds
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace gnmr {
namespace metrics {

using CounterFamily = prometheus::Family<prometheus::Counter>;
using GaugeFamily = prometheus::Family<prometheus::Gauge>;
using HistogramFamily = prometheus::Family<prometheus::Histogram>;

// Bucket bounds of the latency histograms: 10 us .. 5 s.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets();

struct MetricFamilies {
  explicit MetricFamilies(prometheus::Registry& registry);

  GaugeFamily& build_info;
  GaugeFamily& start_time;
  GaugeFamily& jobs;
  CounterFamily& rpcs;

  GaugeFamily& ranks_expected;
  GaugeFamily& ranks_connected;
  GaugeFamily& ranks_without_decisions;
  GaugeFamily& last_step;
  CounterFamily& reports;
  CounterFamily& report_bytes;
  CounterFamily& late_reports;
  CounterFamily& incomplete_steps;
  CounterFamily& incomplete_unit_steps;
  CounterFamily& omitted_unit_steps;
  CounterFamily& decisions;
  GaugeFamily& units;
  GaugeFamily& units_in_recovery;
  GaugeFamily& max_o;
  CounterFamily& admissions;
  CounterFamily& denials;
  CounterFamily& denied_clips;
  CounterFamily& releases;
  CounterFamily& global_skips;
  CounterFamily& unit_steps;
  CounterFamily& unit_steps_in_recovery;
  GaugeFamily& recovery_fraction;
  HistogramFamily& decision_latency;
  HistogramFamily& aggregation_time;
  HistogramFamily& broadcast_time;
  CounterFamily& ack_mismatches;
  CounterFamily& decision_failures;
  CounterFamily& replica_checks;
  CounterFamily& replica_mismatches;

  GaugeFamily& client_overhead_ratio;
  CounterFamily& client_dropped_reports;
  CounterFamily& client_missed_decisions;
  CounterFamily& client_stats_seconds;
  CounterFamily& client_stats_gpu_seconds;

  GaugeFamily& unit_gnmr;
  GaugeFamily& unit_norm;
  GaugeFamily& unit_mu;
  GaugeFamily& unit_in_recovery;
  GaugeFamily& unit_forward;
  GaugeFamily& unit_saturation;
  GaugeFamily& unit_saturated_blocks;
  GaugeFamily& unit_dead_blocks;
  GaugeFamily& unit_scale_clamps;
  GaugeFamily& unit_backward;
  GaugeFamily& group_gnmr_max;
  GaugeFamily& group_units;
  GaugeFamily& group_units_in_recovery;
};

}  // namespace metrics
}  // namespace gnmr
