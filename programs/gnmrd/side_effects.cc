#include "programs/gnmrd/side_effects.h"

#include <spdlog/spdlog.h>

#include "common/text.h"
#include "daemon/store/job_removal.h"

namespace gnmr {

void DaemonSideEffects::OnJobStarted(const std::string& job_id, uint32_t world_size,
                                     const Controller& controller) {
  if (traces_) traces_->ForgetNames(job_id);  // a restored job's units
  if (events_) {                              // before the job's first Append
    const Status s = events_->ReloadTail(job_id);
    if (!s.ok()) {
      // The file stays; only ListEvents' recent view starts empty.
      spdlog::warn("job {}: recent events not reloaded: {}", EscapeForLog(job_id),
                   EscapeMessageForLog(s.ToString()));
    }
  }
  if (!metrics_) return;
  metrics::JobMetrics* jm = metrics_->ForJob(job_id);
  jm->SetWorldSize(world_size);
  jm->Refresh(controller);
}

void DaemonSideEffects::OnReport(const std::string& job_id, uint32_t rank, size_t bytes,
                                 const v1::ClientOverhead& overhead) {
  if (metrics_) metrics_->ForJob(job_id)->OnReport(rank, bytes, overhead);
}

void DaemonSideEffects::OnStandbyNote(const std::string& job_id, uint32_t rank,
                                      const v1::ClientOverhead& overhead) {
  if (metrics_) metrics_->ForJob(job_id)->OnStandbyNote(rank, overhead);
}

void DaemonSideEffects::OnReplicaCheck(const std::string& job_id, bool match) {
  if (metrics_) metrics_->ForJob(job_id)->OnReplicaCheck(match);
}

void DaemonSideEffects::OnLateReport(const std::string& job_id, uint32_t) {
  if (metrics_) metrics_->ForJob(job_id)->OnLateReport();
}

void DaemonSideEffects::OnDecision(const std::string& job_id,
                                   const StepAggregator::ClosedStep& step, const Decision& decision,
                                   const Controller& controller, const StepTiming& timing) {
  if (traces_ && traces_->Record(job_id, step.step, step.samples, controller) ==
                     store::TraceRecorder::Outcome::kGapStarted) {
    if (events_) {
      v1::Event e;
      e.set_observed_step(step.step);
      e.set_kind(v1::EVENT_KIND_TRACE_DROPPED);
      e.set_time_unix(clock_->UnixSeconds());
      e.set_detail(
          "the trace recorder's queue is full: this step and the next ones until it drains are "
          "missing from the trace (gnmr_trace_steps_dropped_total counts them)");
      events_->Append(job_id, std::move(e));
    }
  }
  if (!metrics_) return;
  metrics::StepFigures f;
  f.incomplete_units = step.incomplete_units;
  f.omitted_units = step.omitted_units;
  f.by_deadline = step.by_deadline;
  f.aggregation_seconds = timing.aggregation_seconds;
  f.decision_seconds = timing.decision_seconds;
  f.broadcast_seconds = timing.broadcast_seconds;
  metrics_->ForJob(job_id)->OnDecision(decision, controller, f);
}

void DaemonSideEffects::OnEvents(const std::string& job_id, const std::vector<v1::Event>& events) {
  if (events_) events_->Append(job_id, events);
}

void DaemonSideEffects::OnControllerChanged(const std::string& job_id,
                                            const Controller& controller) {
  if (traces_) traces_->ForgetNames(job_id);  // an import may rename the units
  if (metrics_) metrics_->ForJob(job_id)->Refresh(controller);
}

void DaemonSideEffects::OnAckMismatch(const std::string& job_id, const AckMismatch&) {
  if (metrics_) metrics_->ForJob(job_id)->OnAckMismatch();  // the event: OnEvents
}

void DaemonSideEffects::OnDecisionFailed(const std::string& job_id) {
  if (metrics_) metrics_->ForJob(job_id)->OnDecisionFailed();
}

void DaemonSideEffects::OnSessions(const std::string& job_id, uint32_t connected) {
  if (metrics_) metrics_->ForJob(job_id)->SetRanksConnected(connected);
}

void DaemonSideEffects::OnRanksWithoutDecisions(const std::string& job_id, uint32_t ranks) {
  if (metrics_) metrics_->ForJob(job_id)->SetRanksWithoutDecisions(ranks);
}

void DaemonSideEffects::OnSnapshot(const std::string& job_id, v1::ControllerState state,
                                   const v1::JobMeta& meta) {
  if (snapshots_) snapshots_->Submit(job_id, std::move(state), meta.SerializeAsString());
}

Status DaemonSideEffects::OnJobRemoved(const std::string& job_id) {
  // Nothing writes the job's files after these two; then the directory goes
  // at once, and the metric series last (a scrape meanwhile still shows the
  // job, never half of it).
  if (snapshots_) snapshots_->CancelJob(job_id);
  if (traces_) traces_->RemoveJob(job_id);  // its trace files stay: the operator's
  Status result;
  if (events_) result = events_->RemoveJob(job_id, /*delete_files=*/state_dir_.empty());
  if (!state_dir_.empty()) {
    Status s = store::RemoveJobDir(state_dir_, job_id, *clock_);
    if (result.ok()) result = s;
  }
  if (metrics_) metrics_->RemoveJob(job_id);
  return result;
}

}  // namespace gnmr
