// The job's events (the event log, through JobListener::OnEvents): what each
// decision changed, and the job's own notes (a generation, an ack mismatch,
// a step that could not be decided).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "common/wall_clock.h"
#include "daemon/job/job.h"

namespace gnmr {

void Job::DecisionFailed(int64_t step, const Status& why) {
  ++decision_failures_;
  // Never silent, but one line per 10 s at most: a broken job fails every
  // step.
  const Clock::time_point now = Clock::now();
  if (decision_failures_ == 1 || now - last_failure_log_ >= std::chrono::seconds(10)) {
    spdlog::error("job {}: step {} closed but not decided ({} more since the last report): {}",
                  id_, step, failures_not_logged_, why.ToString());
    last_failure_log_ = now;
    failures_not_logged_ = 0;
  } else {
    ++failures_not_logged_;
  }
  if (listener_) listener_->OnDecisionFailed(id_);
  EmitEvent("decision_failed", step,
            "step " + std::to_string(step) + " not decided (a daemon bug): " + why.ToString());
}

void Job::EmitEvent(const char* kind, int64_t step, std::string detail) {
  if (!listener_) return;
  v1::Event e;
  e.set_observed_step(step);
  e.set_kind(kind);
  e.set_time_unix(UnixNowSeconds());
  e.set_detail(std::move(detail));
  listener_->OnEvents(id_, {e});
}

void Job::EmitEvents(const Decision& d) {
  if (!listener_ || (!d.HasChanges())) return;
  std::vector<v1::Event> events;
  const double now = UnixNowSeconds();
  auto base = [&](const char* kind, uint32_t unit) {
    v1::Event e;
    e.set_observed_step(d.observed_step);
    e.set_apply_step(d.apply_step);
    e.set_kind(kind);
    e.set_unit(controller_.unit(unit).name);
    e.set_time_unix(now);
    return e;
  };
  for (const Admission& a : d.admitted) {
    v1::Event e = base("admission", a.unit_id);
    // d.recovery is in unit id order: a search, not a scan (it may be as
    // large as max_o, and so may the admissions).
    auto r = std::lower_bound(
        d.recovery.begin(), d.recovery.end(), a.unit_id,
        [](const RecoveryEntry& x, uint32_t id) { return x.unit_id < id; });
    if (r != d.recovery.end() && r->unit_id == a.unit_id) {
      e.set_action(static_cast<v1::Action>(r->action));
      e.set_until(r->until);
    }
    e.set_trigger(static_cast<v1::Trigger>(a.trigger));
    // A non-finite sample is not evaluated: no GNMR or Delta exists for it.
    const bool evaluated = a.trigger != Trigger::kNonFinite;
    e.set_gnmr(evaluated ? a.gnmr : std::nan(""));
    e.set_delta(evaluated ? a.delta : std::nan(""));
    e.set_norm(a.norm);
    e.set_mu(a.mu);
    if (a.nonfinite) e.set_detail("nonfinite=" + std::to_string(a.nonfinite));
    events.push_back(std::move(e));
  }
  for (uint32_t u : d.released) events.push_back(base("release", u));
  for (const Denial& x : d.denied) {
    v1::Event e = base("denial", x.unit_id);
    e.set_trigger(static_cast<v1::Trigger>(x.trigger));
    const UnitState& st = controller_.unit(x.unit_id);
    e.set_gnmr(st.last_gnmr);
    e.set_delta(st.last_delta);
    e.set_norm(st.last_norm);
    e.set_mu(st.mu);
    e.set_detail("max_o reached");
    events.push_back(std::move(e));
  }
  if (d.global_skip) {
    v1::Event e;
    e.set_observed_step(d.observed_step);
    e.set_apply_step(d.apply_step);
    e.set_kind("global_skip");
    e.set_time_unix(now);
    e.set_detail("non-finite gradient observed");
    events.push_back(std::move(e));
  }
  listener_->OnEvents(id_, events);
}

}  // namespace gnmr
