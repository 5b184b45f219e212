// A job's shape: what its memory depends on (resource_caps.h, docs/limits.md
// "Memory"), checked and reserved through its JobReservation
// (job_reservation.h).
#include "daemon/job/job.h"

namespace gnmr {
namespace {

// Units summed over the ranks that send reports under `mode` (JobShape).
uint64_t ReportedRankUnits(const JobTopology& topology, ReportMode mode) {
  return mode == ReportMode::kAll ? topology.rank_units() : topology.distinct_layout_entries();
}

}  // namespace

Job::~Job() = default;  // reservation_ gives the job's memory budget back

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
  s.reported_rank_units = ReportedRankUnits(topology_, config.report);
  s.ranks = topology_.num_ranks();
  s.window = static_cast<uint64_t>(config.short_window);
  s.max_o = static_cast<uint64_t>(config.max_o);
  s.rule_bytes = rule_bytes;
  return s;
}

}  // namespace gnmr
