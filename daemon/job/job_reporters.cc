// Reporter election inside a job: see "Reporter election" in job.h and
// docs/scale.md.
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "daemon/job/job.h"

namespace gnmr {

void Job::SyncReportMode() {
  ReporterElection::Changes changes;
  election_.SetMode(controller_.config().report, &changes);
  aggregator_.SetReporters(election_.mode() == ReportMode::kAll ? nullptr : &election_.reporters());
  ApplyRoleChanges(changes);
}

std::shared_ptr<const WireMessage> Job::RoleMessage(bool standby) const {
  auto msg = std::make_shared<v1::ServerMessage>();
  v1::ReporterRole* role = msg->mutable_role();
  role->set_standby(standby);
  // Every step not closed yet: a new reporter sends the ones it held back.
  role->set_from_step(aggregator_.last_closed() + 1);
  return ToWire(std::move(msg));
}

void Job::ApplyRoleChanges(const ReporterElection::Changes& changes) {
  if (changes.empty()) return;
  aggregator_.ReportersChanged();
  for (const ReporterElection::RoleChange& c : changes) {
    if (!election_.can_stand_by(c.rank)) continue;  // it reports anyway
    auto it = sessions_.find(c.rank);
    if (it != sessions_.end() && it->second.sink) {
      it->second.sink->SendDecision(RoleMessage(c.standby));
      it->second.sink->Flush();
    }
  }
}

void Job::HandleOverdue(Clock::time_point now) {
  if (election_.mode() != ReportMode::kOnePerShard) return;
  const std::optional<int64_t> step = aggregator_.Overdue(now);
  if (!step) return;
  ReporterElection::Changes changes;
  std::string replaced;
  for (uint32_t rank : aggregator_.Missing(*step)) {
    if (const std::optional<uint32_t> next = election_.PassOver(rank, &changes)) {
      replaced +=
          (replaced.empty() ? "" : ", ") + std::to_string(rank) + " -> " + std::to_string(*next);
    }
  }
  // Another replica sends the step: it gets one more deadline. Otherwise
  // it closes now, as in `report: all`.
  aggregator_.Extend(*step, !replaced.empty());
  ApplyRoleChanges(changes);
  if (!replaced.empty()) {
    spdlog::warn(
        "job {}: step {} passed its deadline without reporters; their replicas report "
        "for them (rank {})",
        id_, *step, replaced);
  }
}

}  // namespace gnmr
