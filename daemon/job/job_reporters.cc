// Reporter election inside a job: see "Reporter election" in job.h and
// docs/scale.md.
#include <algorithm>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "controller/action_resolver.h"
#include "daemon/job/job.h"
#include "proto/report_fingerprint.h"

namespace gnmr {

void Job::SyncReportMode() {
  ReporterElection::Changes changes;
  election_.SetMode(controller_.config().report, &changes);
  replica_check_.Clear();
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
    RankSession* rs = sessions_.Find(c.rank);
    if (rs != nullptr && rs->sink) {
      rs->sink->SendDecision(RoleMessage(c.standby));
      rs->sink->Flush();
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

void Job::AnnounceStep(const v1::Ack& ack) {
  if (election_.mode() != ReportMode::kOnePerShard) return;
  // A standby's note names the newest report it held back: a step it has
  // observed (its ack may be of an earlier or a later one).
  int64_t step = ack.step();
  if (ack.has_standby()) step = std::max(step, ack.standby().step());
  aggregator_.Announce(step, Now());
}

void Job::CheckReport(uint32_t rank, const v1::StepStats& stats) {
  if (election_.mode() != ReportMode::kOnePerShard) return;
  const uint32_t group = topology_.group_of(rank);
  if (group == JobTopology::kNoGroup || topology_.group_members(group).size() < 2) return;
  bool compared = false;
  const std::optional<ReplicaCheck::Mismatch> m =
      replica_check_.Reported(group, rank, stats.step(), ReportFingerprint(stats), &compared);
  SettleCheck(compared, m);
}

void Job::CheckNote(uint32_t rank, const v1::StandbyNote& note) {
  // (A note from a rank that reports now, sent just after its election, is
  // a held report like any other: compared too, without a role lookup.)
  if (election_.mode() != ReportMode::kOnePerShard) return;
  const uint32_t group = topology_.group_of(rank);
  if (group == JobTopology::kNoGroup) return;
  // A note far ahead of the job would take a ring slot from real steps.
  const int64_t closed = aggregator_.last_closed();
  if (note.step() < 0 ||
      (closed >= 0 &&
       note.step() - closed >
           static_cast<int64_t>(ReplicaCheck::kSteps + options_.aggregation.max_open_steps))) {
    return;
  }
  bool compared = false;
  const std::optional<ReplicaCheck::Mismatch> m =
      replica_check_.Noted(group, rank, note.step(), note.fingerprint(), &compared);
  SettleCheck(compared, m);
}

void Job::SettleCheck(bool compared, const std::optional<ReplicaCheck::Mismatch>& m) {
  if (compared && listener_) listener_->OnReplicaCheck(id_, !m.has_value());
  if (m) FallBackToAllReports(*m);
}

void Job::FallBackToAllReports(const ReplicaCheck::Mismatch& m) {
  const std::string detail =
      "at step " + std::to_string(m.step) + " rank " + std::to_string(m.other) +
      " would have reported other gradient statistics than rank " + std::to_string(m.reporter) +
      ", the reporter of its replica group: these ranks are not data-parallel replicas of each "
      "other (docs/scale.md, \"Replica check\"), so one of them cannot report for the rest; "
      "every rank reports from now on (report: all)";
  ControllerConfig config = controller_.config();
  config.report = ReportMode::kAll;
  const Status fits = reservation_.Reserve(ShapeWith(config, ActionResolver(config).MemoryBytes()));
  if (!fits.ok()) {  // said once; the check rests until the roles change
    const std::string refused = detail + ", but that does not fit the job's caps (" +
                                fits.message() + "): one rank per group keeps reporting";
    spdlog::error("job {}: {}", id_, refused);
    EmitEvent(v1::EVENT_KIND_REPLICAS_DIFFER, m.step, refused);
    replica_check_.Pause();
    return;
  }
  spdlog::warn("job {}: {}", id_, detail);
  EmitEvent(v1::EVENT_KIND_REPLICAS_DIFFER, m.step, detail);
  ApplyConfigLocked(config);
}

}  // namespace gnmr
