// The job's events (the event log, through JobListener::OnEvents): what each
// decision changed, and the job's own notes (a generation, an ack mismatch,
// a step that could not be decided).
#include <spdlog/spdlog.h>

#include "controller/publish/decision_events.h"
#include "daemon/job/job.h"

namespace gnmr {

void Job::DecisionFailed(int64_t step, const Status& why) {
  ++decision_failures_;
  // Never silent, but one line per 10 s at most: a broken job fails every
  // step.
  const Clock::time_point now = Now();
  if (decision_failures_ == 1 || now - last_failure_log_ >= std::chrono::seconds(10)) {
    spdlog::error("job {}: step {} closed but not decided ({} more since the last report): {}", id_,
                  step, failures_not_logged_, why.ToString());
    last_failure_log_ = now;
    failures_not_logged_ = 0;
  } else {
    ++failures_not_logged_;
  }
  if (listener_) listener_->OnDecisionFailed(id_);
  EmitEvent(v1::EVENT_KIND_DECISION_FAILED, step,
            "step " + std::to_string(step) + " not decided (a daemon bug): " + why.ToString());
}

void Job::EmitEvent(v1::EventKind kind, int64_t step, std::string detail) {
  if (!listener_) return;
  listener_->OnEvents(id_,
                      {JobEvent(kind, step, options_.clock->UnixSeconds(), std::move(detail))});
}

void Job::EmitEvents(const Decision& d) {
  if (!listener_ || (!d.HasChanges())) return;
  std::vector<v1::Event> events;
  AppendDecisionEvents(d, controller_, options_.clock->UnixSeconds(), &events);
  listener_->OnEvents(id_, events);
}

}  // namespace gnmr
