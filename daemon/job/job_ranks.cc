// Ranks without decisions: see "Ranks without decisions" in job.h and
// docs/safety.md.
#include <string>

#include <spdlog/spdlog.h>

#include "daemon/job/job.h"

namespace gnmr {

void Job::CheckRanksWithoutDecisions(int64_t closed_step) {
  if (++steps_since_rank_check_ < kWithoutDecisionsCheck) return;
  steps_since_rank_check_ = 0;
  uint32_t count = 0;
  std::string started;  // the ranks that crossed the line, for one log line
  const int64_t closed = aggregator_.last_closed();
  // Runs inside sessions_.ForEach, with mu_ held by this function's caller;
  // the analysis, following the lambda into ForEach (a template), does not
  // see it held there, so it cannot check the EmitEvent calls.
  sessions_.ForEach([&](uint32_t rank, RankSession& rs) GNMR_NO_THREAD_SAFETY_ANALYSIS {
    const int64_t without = rs.StepsWithoutDecision(closed);
    const bool now_without = without > kWithoutDecisionsSteps;
    if (now_without) ++count;
    if (now_without == rs.without_decisions) return;
    rs.without_decisions = now_without;
    const std::string who = "rank " + std::to_string(rank);
    if (!now_without) {
      EmitEvent(v1::EVENT_KIND_RANK_WITHOUT_DECISIONS, closed_step,
                who + " gets decisions again" +
                    (rs.last_decided_ack >= 0 ? " (its newest plan with a decision: step " +
                                                    std::to_string(rs.last_decided_ack) + ")"
                                              : " (registered again)"));
      return;
    }
    started += (started.empty() ? "" : ", ") + std::to_string(rank);
    EmitEvent(
        v1::EVENT_KIND_RANK_WITHOUT_DECISIONS, closed_step,
        who + " has had no decision for " + std::to_string(without) + " of the job's steps (" +
            (rs.last_decided_ack >= 0
                 ? "its newest plan with a decision: step " + std::to_string(rs.last_decided_ack)
                 : std::string("no plan with a decision since it registered")) +
            "; its stream is " + (rs.sink ? "attached" : "not attached") +
            "): it plans without GNMR (fail-open)");
  });
  if (!started.empty()) {
    spdlog::warn(
        "job {}: rank(s) {} got no decision for over {} steps (gnmrctl events --job {}; "
        "gnmr_ranks_without_decisions)",
        id_, started, kWithoutDecisionsSteps, id_);
  }
  if (count != ranks_without_decisions_) {
    ranks_without_decisions_ = count;
    if (listener_) listener_->OnRanksWithoutDecisions(id_, count);
  }
}

}  // namespace gnmr
