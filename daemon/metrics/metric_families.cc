#include "daemon/metrics/metric_families.h"

namespace gnmr {
namespace metrics {
namespace {

GaugeFamily& Gauge(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}

CounterFamily& Counter(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}

HistogramFamily& Histogram(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r);
}

}  // namespace

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3,
      0.01, 0.025,  0.05, 0.1,  0.25,   0.5,  1.0,  2.5,    5.0};
  return kBuckets;
}

MetricFamilies::MetricFamilies(prometheus::Registry& r)
    : build_info(Gauge(r, "gnmr_build_info", "Always 1; the label carries the gnmrd version.")),
      start_time(Gauge(r, "gnmr_start_time_seconds", "Unix time at which gnmrd started.")),
      jobs(Gauge(r, "gnmr_jobs", "Training jobs known to the daemon.")),
      rpcs(Counter(r, "gnmr_rpcs_total", "Finished RPCs by method and gRPC status code.")),
      ranks_expected(Gauge(r, "gnmr_ranks_expected", "World size of the job.")),
      ranks_connected(
          Gauge(r, "gnmr_ranks_connected", "Ranks of the job with a live Session stream.")),
      ranks_without_decisions(
          Gauge(r, "gnmr_ranks_without_decisions",
                "Registered ranks of the job that had no decision for more than 20 of its steps.")),
      last_step(Gauge(r, "gnmr_last_step", "Last step the job decided.")),
      reports(Counter(r, "gnmr_reports_total", "StepStats reports received from the job's ranks.")),
      report_bytes(Counter(r, "gnmr_report_bytes_total", "Bytes of StepStats reports received.")),
      late_reports(
          Counter(r, "gnmr_late_reports_total", "Reports for steps already closed (dropped).")),
      incomplete_steps(Counter(r, "gnmr_incomplete_steps_total",
                               "Steps closed by the deadline without every rank's report.")),
      incomplete_unit_steps(
          Counter(r, "gnmr_incomplete_unit_steps_total",
                  "Unit-steps not evaluated because a shard's report was missing.")),
      omitted_unit_steps(Counter(r, "gnmr_omitted_unit_steps_total",
                                 "Unit-steps inactive because no sparse report listed the unit.")),
      decisions(Counter(r, "gnmr_decisions_total", "Steps decided.")),
      units(Gauge(r, "gnmr_units", "Units registered by the job.")),
      units_in_recovery(Gauge(r, "gnmr_units_in_recovery", "Units of the job in recovery now.")),
      max_o(Gauge(r, "gnmr_max_o", "Recovery budget: most units in recovery at once.")),
      admissions(Counter(r, "gnmr_admissions_total",
                         "Units admitted to recovery, by action and trigger.")),
      denials(
          Counter(r, "gnmr_denials_total", "Triggered units left out because max_o was reached.")),
      denied_clips(Counter(r, "gnmr_denied_clips_total",
                           "Denials whose gradient was clipped on the observed step (denied: "
                           "clip); also counted in gnmr_denials_total.")),
      releases(Counter(r, "gnmr_releases_total", "Units released from recovery.")),
      global_skips(
          Counter(r, "gnmr_global_skips_total", "Decisions asking to skip the whole step.")),
      unit_steps(Counter(r, "gnmr_unit_steps_total", "Unit-steps evaluated by the controller.")),
      unit_steps_in_recovery(
          Counter(r, "gnmr_unit_steps_in_recovery_total",
                  "Evaluated unit-steps whose unit was in recovery (in force).")),
      recovery_fraction(Gauge(r, "gnmr_recovery_fraction",
                              "Unit-steps in recovery / unit-steps, over the job's lifetime.")),
      decision_latency(Histogram(r, "gnmr_decision_latency_seconds",
                                 "From the last report of a step to its decision being sent.")),
      aggregation_time(Histogram(r, "gnmr_aggregation_seconds",
                                 "Time to combine the ranks' reports of a step.")),
      broadcast_time(Histogram(r, "gnmr_decision_broadcast_seconds",
                               "Time to serialize a decision and queue it to every attached "
                               "stream (part of the decision latency).")),
      ack_mismatches(Counter(r, "gnmr_ack_mismatches_total",
                             "Steps whose acks differ between ranks (generation, decision, "
                             "digest, skip) or from the decision sent; once per step.")),
      decision_failures(Counter(r, "gnmr_decision_failures_total",
                                "Closed steps the controller could not decide (a daemon bug).")),
      replica_checks(Counter(r, "gnmr_replica_checks_total",
                             "Standbys' held reports compared with their reporter's "
                             "(report: one_per_shard).")),
      replica_mismatches(Counter(r, "gnmr_replica_mismatches_total",
                                 "Held reports that differed from their reporter's; the job "
                                 "falls back to report: all.")),
      client_overhead_ratio(Gauge(r, "gnmr_client_overhead_ratio",
                                  "Client-reported statistics time / step time, per rank.")),
      client_dropped_reports(
          Counter(r, "gnmr_client_dropped_reports_total",
                  "Reports the client dropped from its bounded queue, per rank.")),
      client_missed_decisions(Counter(r, "gnmr_client_missed_decisions_total",
                                      "Steps for which the client had no decision, per rank.")),
      client_stats_seconds(Counter(r, "gnmr_client_stats_seconds_total",
                                   "Client-reported host time spent in Observe, per rank.")),
      client_stats_gpu_seconds(
          Counter(r, "gnmr_client_stats_gpu_seconds_total",
                  "Client-reported GPU time of the statistics launches, per rank.")),
      unit_gnmr(Gauge(r, "gnmr_unit_gnmr", "Last GNMR of a unit (units in recovery and top K).")),
      unit_norm(Gauge(r, "gnmr_unit_norm",
                      "Last gradient norm of a unit (units in recovery "
                      "and top K).")),
      unit_mu(Gauge(r, "gnmr_unit_mu",
                    "Historical mean norm of a unit (units in recovery "
                    "and top K).")),
      unit_in_recovery(Gauge(r, "gnmr_unit_in_recovery",
                             "1 while the unit is in recovery, else 0 "
                             "(units in recovery and top K).")),
      unit_forward(Gauge(r, "gnmr_unit_forward",
                         "Last forward norm / its historical mean; 0 without forward "
                         "statistics or in their warmup (units in recovery and top K).")),
      unit_saturation(Gauge(r, "gnmr_unit_saturation",
                            "Last saturated fraction of the forward tensors / its historical "
                            "mean (floored at one element); 0 without forward statistics or in "
                            "their warmup (units in recovery and top K).")),
      unit_saturated_blocks(Gauge(r, "gnmr_unit_saturated_blocks",
                                  "Fraction of the blocks of the last block-scaled forward "
                                  "tensors with a code at the element format's maximum; 0 "
                                  "without block-scaled forward tensors (units in recovery "
                                  "and top K).")),
      unit_dead_blocks(Gauge(r, "gnmr_unit_dead_blocks",
                             "Fraction of the blocks of the last block-scaled forward tensors "
                             "whose codes are all zero; 0 without block-scaled forward tensors "
                             "(units in recovery and top K).")),
      unit_scale_clamps(Gauge(r, "gnmr_unit_scale_clamps",
                              "Fraction of the blocks of the last block-scaled forward tensors "
                              "whose scale is at an end of its range or NaN; 0 without "
                              "block-scaled forward tensors (units in recovery and top K).")),
      unit_backward(Gauge(r, "gnmr_unit_backward",
                          "Last quantized-gradient norm / its historical mean (backward "
                          "channel); 0 without backward statistics or in their warmup (units "
                          "in recovery and top K).")),
      group_gnmr_max(Gauge(r, "gnmr_group_gnmr_max",
                           "Highest last GNMR of the units of a unit group (every unit).")),
      group_units(Gauge(r, "gnmr_group_units", "Units of a unit group.")),
      group_units_in_recovery(
          Gauge(r, "gnmr_group_units_in_recovery", "Units of a unit group in recovery now.")) {}

}  // namespace metrics
}  // namespace gnmr
