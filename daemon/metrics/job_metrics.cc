#include "daemon/metrics/job_metrics.h"

#include <algorithm>
#include <cmath>

namespace gnmr {
namespace metrics {
namespace {

// Increment of a cumulative figure; a decrease means its source restarted.
uint64_t Advance(uint64_t now, uint64_t* last) {
  const uint64_t delta = now >= *last ? now - *last : now;
  *last = now;
  return delta;
}

// The client's overhead ratio, if this report carries a usable one. The
// figure is untrusted: a value that is not a finite fraction, or one the
// client marks as not measured, leaves the gauge as it was; a share of the
// step cannot exceed 1, so larger values are clamped.
bool UsableOverheadRatio(const v1::ClientOverhead& o, double* ratio) {
  switch (o.overhead_source()) {
    case v1::OVERHEAD_SOURCE_UNSPECIFIED:  // 0.1 clients: host wall clock
    case v1::OVERHEAD_SOURCE_HOST_WALL:
    case v1::OVERHEAD_SOURCE_CUPTI:
      break;
    default:  // UNAVAILABLE, or a value this daemon does not know
      return false;
  }
  const double r = o.overhead_ratio();
  if (!std::isfinite(r) || r < 0.0) return false;
  *ratio = std::min(r, 1.0);
  return true;
}

// A client-reported duration of one step, if usable: untrusted, so only a
// finite value in [0, 1 h] counts (one report cannot claim more).
bool UsableSeconds(double seconds) {
  constexpr double kMaxSecondsPerReport = 3600.0;
  return std::isfinite(seconds) && seconds >= 0.0 && seconds <= kMaxSecondsPerReport;
}

}  // namespace

JobMetrics::JobMetrics(MetricFamilies* f, std::string job_id, size_t top_k_units,
                       Clock::duration unit_refresh, GroupOptions groups, const TimeSource* clock)
    : f_(f),
      job_id_(std::move(job_id)),
      labels_({{"job_id", job_id_}}),
      top_k_(top_k_units),
      unit_refresh_(unit_refresh),
      clock_(clock),
      ranks_expected_(f->ranks_expected.Add(labels_)),
      ranks_connected_(f->ranks_connected.Add(labels_)),
      ranks_without_decisions_(f->ranks_without_decisions.Add(labels_)),
      last_step_(f->last_step.Add(labels_)),
      reports_(f->reports.Add(labels_)),
      report_bytes_(f->report_bytes.Add(labels_)),
      late_reports_(f->late_reports.Add(labels_)),
      incomplete_steps_(f->incomplete_steps.Add(labels_)),
      incomplete_unit_steps_(f->incomplete_unit_steps.Add(labels_)),
      omitted_unit_steps_(f->omitted_unit_steps.Add(labels_)),
      decisions_(f->decisions.Add(labels_)),
      units_(f->units.Add(labels_)),
      units_in_recovery_(f->units_in_recovery.Add(labels_)),
      max_o_(f->max_o.Add(labels_)),
      denials_(f->denials.Add(labels_)),
      denied_clips_(f->denied_clips.Add(labels_)),
      releases_(f->releases.Add(labels_)),
      global_skips_(f->global_skips.Add(labels_)),
      unit_steps_(f->unit_steps.Add(labels_)),
      unit_steps_in_recovery_(f->unit_steps_in_recovery.Add(labels_)),
      recovery_fraction_(f->recovery_fraction.Add(labels_)),
      decision_latency_(f->decision_latency.Add(labels_, LatencyBuckets())),
      aggregation_time_(f->aggregation_time.Add(labels_, LatencyBuckets())),
      broadcast_time_(f->broadcast_time.Add(labels_, LatencyBuckets())),
      ack_mismatches_(f->ack_mismatches.Add(labels_)),
      replica_checks_(f->replica_checks.Add(labels_)),
      replica_mismatches_(f->replica_mismatches.Add(labels_)),
      decision_failures_(f->decision_failures.Add(labels_)),
      unit_series_(f, job_id_),
      group_series_(f, job_id_, groups) {
  // Every real (action, trigger) pair exists from the start, so rate()
  // sees a zero before the first admission.
  for (Action a : {Action::kPromote, Action::kClip, Action::kSkip, Action::kResetState}) {
    for (Trigger t :
         {Trigger::kGnmr, Trigger::kDelta, Trigger::kNonFinite, Trigger::kForward,
          Trigger::kSaturation, Trigger::kUnderflow, Trigger::kBlockSaturation,
          Trigger::kDeadBlocks, Trigger::kScaleClamps, Trigger::kRelativeError, Trigger::kBackward,
          Trigger::kBackwardSaturation, Trigger::kBackwardUnderflow}) {
      Admissions(a, t);
    }
  }
}

JobMetrics::~JobMetrics() {
  f_->ranks_expected.Remove(&ranks_expected_);
  f_->ranks_connected.Remove(&ranks_connected_);
  f_->ranks_without_decisions.Remove(&ranks_without_decisions_);
  f_->last_step.Remove(&last_step_);
  f_->reports.Remove(&reports_);
  f_->report_bytes.Remove(&report_bytes_);
  f_->late_reports.Remove(&late_reports_);
  f_->incomplete_steps.Remove(&incomplete_steps_);
  f_->incomplete_unit_steps.Remove(&incomplete_unit_steps_);
  f_->omitted_unit_steps.Remove(&omitted_unit_steps_);
  f_->decisions.Remove(&decisions_);
  f_->units.Remove(&units_);
  f_->units_in_recovery.Remove(&units_in_recovery_);
  f_->max_o.Remove(&max_o_);
  f_->denials.Remove(&denials_);
  f_->denied_clips.Remove(&denied_clips_);
  f_->releases.Remove(&releases_);
  f_->global_skips.Remove(&global_skips_);
  f_->unit_steps.Remove(&unit_steps_);
  f_->unit_steps_in_recovery.Remove(&unit_steps_in_recovery_);
  f_->recovery_fraction.Remove(&recovery_fraction_);
  f_->decision_latency.Remove(&decision_latency_);
  f_->aggregation_time.Remove(&aggregation_time_);
  f_->broadcast_time.Remove(&broadcast_time_);
  f_->ack_mismatches.Remove(&ack_mismatches_);
  f_->replica_checks.Remove(&replica_checks_);
  f_->replica_mismatches.Remove(&replica_mismatches_);
  f_->decision_failures.Remove(&decision_failures_);
  for (auto& by_trigger : admissions_) {
    for (prometheus::Counter* c : by_trigger) {
      if (c != nullptr) f_->admissions.Remove(c);
    }
  }
  for (const std::unique_ptr<RankSeries>& r : ranks_) {
    if (!r) continue;
    f_->client_overhead_ratio.Remove(r->overhead_ratio);
    f_->client_dropped_reports.Remove(r->dropped_reports);
    f_->client_missed_decisions.Remove(r->missed_decisions);
    f_->client_stats_seconds.Remove(r->stats_seconds);
    f_->client_stats_gpu_seconds.Remove(r->stats_gpu_seconds);
  }
}

prometheus::Counter& JobMetrics::Admissions(Action action, Trigger trigger) {
  prometheus::Counter*& c =
      admissions_[static_cast<int>(action) & 3][static_cast<int>(trigger) & 3];
  if (c == nullptr) {
    prometheus::Labels labels = labels_;
    labels["action"] = ActionName(action);
    labels["trigger"] = TriggerName(trigger);
    c = &f_->admissions.Add(labels);
  }
  return *c;
}

JobMetrics::RankSeries& JobMetrics::Rank(uint32_t rank) {
  if (rank >= ranks_.size()) ranks_.resize(static_cast<size_t>(rank) + 1);
  if (ranks_[rank]) return *ranks_[rank];
  prometheus::Labels labels = labels_;
  labels["rank"] = std::to_string(rank);
  RankSeries r{&f_->client_overhead_ratio.Add(labels), &f_->client_dropped_reports.Add(labels),
               &f_->client_missed_decisions.Add(labels), &f_->client_stats_seconds.Add(labels),
               &f_->client_stats_gpu_seconds.Add(labels)};
  ranks_[rank] = std::make_unique<RankSeries>(r);
  return *ranks_[rank];
}

void JobMetrics::SetWorldSize(uint32_t ranks) { ranks_expected_.Set(ranks); }

void JobMetrics::SetRanksConnected(uint32_t ranks) { ranks_connected_.Set(ranks); }

void JobMetrics::SetRanksWithoutDecisions(uint32_t ranks) { ranks_without_decisions_.Set(ranks); }

void JobMetrics::OnReport(uint32_t rank, size_t bytes, const v1::ClientOverhead& overhead) {
  reports_.Increment();
  report_bytes_.Increment(static_cast<double>(bytes));
  RecordClientFigures(rank, overhead);
}

void JobMetrics::OnStandbyNote(uint32_t rank, const v1::ClientOverhead& overhead) {
  RecordClientFigures(rank, overhead);
}

void JobMetrics::OnReplicaCheck(bool match) {
  replica_checks_.Increment();
  if (!match) replica_mismatches_.Increment();
}

void JobMetrics::RecordClientFigures(uint32_t rank, const v1::ClientOverhead& overhead) {
  // Called for every rank at every step (reports and standbys' notes):
  // a zero is not added, since each Increment is a compare-and-swap loop.
  MutexLock lock(mu_);
  RankSeries& r = Rank(rank);
  double ratio = 0.0;
  if (UsableOverheadRatio(overhead, &ratio)) r.overhead_ratio->Set(ratio);
  const uint64_t dropped = Advance(overhead.dropped_reports(), &r.last_dropped);
  if (dropped > 0) r.dropped_reports->Increment(static_cast<double>(dropped));
  const uint64_t missed = Advance(overhead.missed_decisions(), &r.last_missed);
  if (missed > 0) r.missed_decisions->Increment(static_cast<double>(missed));
  if (overhead.stats_seconds() > 0 && UsableSeconds(overhead.stats_seconds())) {
    r.stats_seconds->Increment(overhead.stats_seconds());
  }
  if (overhead.stats_gpu_seconds() > 0 && UsableSeconds(overhead.stats_gpu_seconds())) {
    r.stats_gpu_seconds->Increment(overhead.stats_gpu_seconds());
  }
}

void JobMetrics::OnLateReport() { late_reports_.Increment(); }

void JobMetrics::OnAckMismatch() { ack_mismatches_.Increment(); }

void JobMetrics::OnDecisionFailed() { decision_failures_.Increment(); }

void JobMetrics::OnDecision(const Decision& d, const Controller& c, const StepFigures& step) {
  decisions_.Increment();
  decision_latency_.Observe(step.decision_seconds);
  aggregation_time_.Observe(step.aggregation_seconds);
  broadcast_time_.Observe(step.broadcast_seconds);
  if (step.by_deadline) incomplete_steps_.Increment();
  incomplete_unit_steps_.Increment(step.incomplete_units);
  omitted_unit_steps_.Increment(step.omitted_units);
  denials_.Increment(static_cast<double>(d.denied.size()));
  size_t clipped = 0;
  for (const Denial& x : d.denied) clipped += x.clipped ? 1 : 0;
  if (clipped > 0) denied_clips_.Increment(static_cast<double>(clipped));
  releases_.Increment(static_cast<double>(d.released.size()));
  if (d.global_skip) global_skips_.Increment();

  MutexLock lock(mu_);
  // An admitted unit gets the action its name resolves to (controller.cc).
  for (const Admission& a : d.admitted) {
    if (a.unit_id >= c.num_units()) continue;
    Admissions(c.unit(a.unit_id).resolved.action, a.trigger).Increment();
  }
  SyncController(c, /*count=*/true);
  const Clock::time_point now = clock_->Now();
  if (!d.admitted.empty() || !d.released.empty() || now - last_unit_refresh_ >= unit_refresh_) {
    RefreshUnits(c);
    last_unit_refresh_ = now;
  }
}

void JobMetrics::Refresh(const Controller& c) {
  MutexLock lock(mu_);
  SyncController(c, /*count=*/false);
  group_series_.Reset();  // the units may have been replaced
  RefreshUnits(c);
  last_unit_refresh_ = clock_->Now();
}

void JobMetrics::SyncController(const Controller& c, bool count) {
  const ControllerStats& s = c.stats();
  // Count only a decision that follows the last one synced: otherwise the
  // controller was restored or replaced, and this only re-bases.
  const bool consecutive = count && c.sequence() == last_sequence_ + 1;
  const uint64_t steps = Advance(s.unit_steps_observed, &last_unit_steps_);
  const uint64_t in_recovery = Advance(s.unit_steps_in_force, &last_unit_steps_in_recovery_);
  if (consecutive) {
    unit_steps_.Increment(static_cast<double>(steps));
    unit_steps_in_recovery_.Increment(static_cast<double>(in_recovery));
  }
  last_sequence_ = c.sequence();
  recovery_fraction_.Set(s.recovery_fraction());
  units_.Set(static_cast<double>(c.num_units()));
  units_in_recovery_.Set(static_cast<double>(c.recovery().size()));
  max_o_.Set(c.config().max_o);
  if (c.last_step()) last_step_.Set(static_cast<double>(*c.last_step()));
}

void JobMetrics::RefreshUnits(const Controller& c) {
  const std::vector<size_t> chosen = SelectExportedUnits(
      c.num_units(), [&c](size_t i) { return c.unit(static_cast<uint32_t>(i)).last_gnmr; },
      [&c](size_t i) { return c.InRecovery(static_cast<uint32_t>(i)); }, top_k_);
  std::vector<UnitFigures> figures;
  figures.reserve(chosen.size());
  for (size_t i : chosen) {
    const UnitState& u = c.unit(static_cast<uint32_t>(i));
    figures.push_back({u.name, u.last_gnmr, u.last_norm, u.mu,
                       c.InRecovery(static_cast<uint32_t>(i)), u.last_forward, u.last_saturation,
                       u.last_saturated_blocks, u.last_dead_blocks, u.last_scale_clamps,
                       u.last_backward});
  }
  unit_series_.Set(figures);
  group_series_.Set(c.num_units(),
                    UnitView{[&c](size_t i) -> const std::string& {
                               return c.unit(static_cast<uint32_t>(i)).name;
                             },
                             [&c](size_t i) { return c.unit(static_cast<uint32_t>(i)).last_gnmr; },
                             [&c](size_t i) { return c.InRecovery(static_cast<uint32_t>(i)); }});
}

void JobMetrics::UpdateUnits(const std::vector<UnitFigures>& units) {
  const std::vector<size_t> chosen = SelectExportedUnits(
      units.size(), [&units](size_t i) { return units[i].gnmr; },
      [&units](size_t i) { return units[i].in_recovery; }, top_k_);
  std::vector<UnitFigures> figures;
  figures.reserve(chosen.size());
  for (size_t i : chosen) figures.push_back(units[i]);
  MutexLock lock(mu_);
  unit_series_.Set(figures);
  group_series_.Set(units.size(),
                    UnitView{[&units](size_t i) -> const std::string& { return units[i].name; },
                             [&units](size_t i) { return units[i].gnmr; },
                             [&units](size_t i) { return units[i].in_recovery; }});
}

size_t JobMetrics::group_series() const {
  MutexLock lock(mu_);
  return group_series_.size();
}

size_t JobMetrics::unit_series() const {
  MutexLock lock(mu_);
  return unit_series_.size();
}

}  // namespace metrics
}  // namespace gnmr
