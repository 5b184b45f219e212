// A job's share of the daemon's resources: its shape, the caps it must
// stay within and its reservation of the memory budget (resource_caps.h,
// docs/limits.md "Memory").
#include "daemon/job/job.h"

namespace gnmr {

Job::~Job() {
  if (options_.budget) options_.budget->ForceResize(reserved_bytes_, 0);
}

JobShape Job::ShapeLocked() const {
  return ShapeWith(controller_.config(), controller_.action_rule_bytes());
}

JobShape Job::ShapeWith(const ControllerConfig& config, uint64_t rule_bytes) const {
  JobShape s;
  s.units = topology_.num_units();
  s.name_bytes = topology_.name_bytes();
  s.slots = topology_.num_slots();
  s.rank_units = topology_.rank_units();
  s.layout_entries = topology_.distinct_layout_entries();
  s.reported_rank_units = ReportedRankUnits(config.report);
  s.ranks = topology_.num_ranks();
  s.window = static_cast<uint64_t>(config.short_window);
  s.max_o = static_cast<uint64_t>(config.max_o);
  s.rule_bytes = rule_bytes;
  return s;
}

uint64_t Job::ReportedRankUnits(ReportMode mode) const {
  return mode == ReportMode::kAll ? topology_.rank_units() : topology_.distinct_layout_entries();
}

JobCaps Job::EffectiveCaps() const {
  JobCaps caps = options_.caps;
  caps.max_open_step_bytes = options_.aggregation.max_open_bytes;
  caps.decision_history_bytes = options_.decision_history_bytes;
  return caps;
}

Status Job::Reserve(const JobShape& next) {
  const JobCaps caps = EffectiveCaps();
  Status s = CheckJobCaps(next, caps);
  if (!s.ok()) return Status(s.code(), "job '" + id_ + "': " + s.message());
  const uint64_t bytes = JobFootprint(next, caps);
  if (options_.budget) {
    s = options_.budget->Resize("job '" + id_ + "'", reserved_bytes_, bytes);
    if (!s.ok()) return s;
  }
  reserved_bytes_ = bytes;
  return Status::Ok();
}

}  // namespace gnmr
