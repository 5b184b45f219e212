// Job generations (Job's methods in this file; docs/safety.md, rule 3).
// What each generation sent is kept by GenerationHistory
// (generation_history.h).
//
// Generations (docs/safety.md, rule 3). A job's generation changes when its
// controller state is replaced or its trainer restarts:
// - ImportState, and Restore (daemon start: the snapshot's generation + 1,
//   snapshotted at once so a second crash cannot reuse the number): the
//   steps start over after the imported state's last step, and the state's
//   last decision, rebuilt, is the generation's first decision. Importing
//   the very state of the current generation's import again, before the
//   controller changed (a decision, a config change, a release, a new
//   unit), changes nothing (every rank of a data-parallel job may load the
//   same checkpoint);
// - an operator's rewind (Rewind, gnmrctl rewind): like a new incarnation
//   for the steps (any step, or any from a given one, is accepted again),
//   while the live instances move to it as with an import;
// - a new incarnation: every client has a random `instance`. A rank that
//   registers with a new one while its previous instance belongs to the
//   current generation starts a new generation, unless another rank of the
//   current generation was heard from (a report or an ack) in the last
//   max(10 s, 5 deadlines), attached or reconnecting, or the job was
//   restored in that time: then its trainer did not restart as a whole
//   (one rank in a crash loop), the rank rejoins the current timeline,
//   and the new generation waits until no such rank is left (the rest of
//   a restarted job's old ranks go quiet a little later; a dead node's
//   stream can stay open, silent). A
//   rank whose previous instance belongs to an older one (its incarnation
//   was superseded) or that has none joins the current generation. An instance belongs to the
//   generation it last registered in, and moves to an imported generation
//   unless its session's stream has ended by then (a live instance, also
//   one registered but not attached yet, lives on in it; a killed one
//   stays behind, so its successor joins the import's generation). On a new
//   incarnation the job rewinds: the aggregator and the controller forget
//   the last step (Controller::Rewind), so a resumed trainer's steps are
//   accepted again; history and locks stay. Instance 0 (an old client)
//   never starts a generation.
// Every generation starts with a GenerationStart on every attached stream,
// followed (import, restore) by the rebuilt decision. The job keeps the
// current generation's recent decisions (generation_history.h); a stream
// that attaches gets the GenerationStart and then all of them, in order,
// so a late rank finds the decision that covers each recent step.
// Live switches (below): an import or a rewind while ranks
// train (a decision was published and a stream is attached) does not void
// the decisions the ranks plan with. Its GenerationStart names a step F
// past every step a rank can have planned with a decision of the old
// generation; the old generation keeps planning the steps before F (it is
// kept, retired, and sent before the current one to a stream that
// attaches), the new one plans F and later, and acks of both are compared.
// So every rank plans every step with the same generation, whenever it
// hears of the switch. A new incarnation voids at once: no rank is left
// that planned with the old generation. A restore cannot know how far the
// ranks planned with decisions made after its snapshot: it decides nothing
// until they are back (restore_hold.h), then from past all of them.
#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

#include "controller/publish/decision_message.h"
#include "controller/types/decision.h"
#include "daemon/job/job.h"

namespace gnmr {

bool Job::NewIncarnation(uint32_t rank, RankSession& rs, uint64_t instance) {
  // 0: an old client that does not say; a first registration (or one after
  // an old client) has no previous instance and joins.
  if (instance == 0 || rs.instance == 0 || rs.instance == instance) return false;
  // The previous instance lived in this generation: this is the first rank
  // of a new incarnation. If it belongs to an older one, a rank of this
  // incarnation has started the current generation already: join it.
  if (rs.instance_generation != generations_.generation()) return false;
  // Others still train on the current timeline: not a restart of the job
  // but of this rank (a crash loop cannot split their plans). It rejoins,
  // and the generation waits until they are gone.
  if (OldTimelineAlive(rank)) {
    if (!rs.incarnation_pending) ++pending_incarnations_;
    rs.incarnation_pending = true;
    return false;
  }
  return true;
}

bool Job::OldTimelineAlive(uint32_t except) const {
  // Heard from lately, attached or not: a trainer on the old timeline
  // reports or acks every step, and one whose stream just dropped (a relay
  // restarting) is reconnecting. A restarted job's ranks go quiet (a dead
  // node's stream may stay open, silent, for a long time). Right after a
  // restore no rank has registered again yet: the ranks of the snapshot
  // count as heard from then.
  const Clock::time_point now = Now();
  const Clock::duration silence = OldTimelineSilence();
  if (restored_at_ && now - *restored_at_ <= silence) return true;
  bool found = false;
  // Read here, not in the lambda: ForEach runs it where the thread-safety
  // analysis does not see mu_ held.
  const uint64_t generation = generations_.generation();
  sessions_.ForEach([&](uint32_t rank, const RankSession& rs) {
    if (found || rank == except || rs.incarnation_pending || !rs.seen) return;
    if (now - rs.last_seen > silence) return;
    found = rs.instance == 0 || rs.instance_generation == generation;
  });
  return found;
}

Job::Clock::duration Job::OldTimelineSilence() const {
  return std::max<Clock::duration>(options_.incarnation_silence, 5 * options_.aggregation.deadline);
}

void Job::MaybeEndRestoreHold(Clock::time_point now, const char* forced) {
  if (!restore_hold_ || (forced == nullptr && !restore_hold_->Over(now))) return;
  const RestoreHold hold = std::move(*restore_hold_);
  restore_hold_.reset();
  // The steps before `first` are late: those a rank can have planned with
  // a lost decision, and those up to where its decisions apply. The
  // reports of later steps, kept while holding, are decided now.
  const std::optional<int64_t> first = hold.FirstStep(controller_.next_lag());
  const int64_t closed = std::max(aggregator_.last_closed(), first.value_or(0) - 1);
  aggregator_.StartOverLive(closed, kMaxStep);  // also ends the aggregator's hold
  aggregator_.RestartDeadlines(now);
  // Steps left undecided after the rebuilt decision: the ranks must not
  // take it for them (client_plan.cc covers a step with a decision only up
  // to its successor's apply step, and only when their sequence numbers are
  // consecutive).
  const bool skipped = closed > controller_.last_step().value_or(-1);
  if (skipped && controller_.last_step()) controller_.LeaveSequenceGap();
  sessions_.ForEach(
      [closed](uint32_t, RankSession& rs) { rs.watched_from = std::max(rs.watched_from, closed); });
  std::string said = "restore hold over (" + std::to_string(hold.ranks_known()) + " of " +
                     std::to_string(hold.world_size()) + " ranks known";
  said += forced != nullptr ? std::string(", ") + forced + ")" : ")";
  said += "; generation " + std::to_string(generations_.generation()) + " decides from step " +
          std::to_string(closed + 1);
  if (skipped) said += ", the steps before it plan without a decision";
  spdlog::info("job {}: {}", id_, said);
  EmitEvent(v1::EVENT_KIND_GENERATION, closed, said);
  RequestSnapshot();  // a second crash restores past these steps
}

void Job::MaybeStartPendingIncarnation() {
  if (pending_incarnations_ == 0 || OldTimelineAlive(UINT32_MAX)) return;
  StartGeneration(GenerationCause::kIncarnation,
                  "the ranks that registered as a new incarnation are the only ones left");
}

std::optional<int64_t> Job::TrainersFrontier() const {
  struct Attached {
    uint32_t rank;
    int64_t last_acked_step;
  };
  std::vector<Attached> attached;
  sessions_.ForEach([&](uint32_t rank, const RankSession& rs) {
    if (rs.sink) attached.push_back({rank, rs.last_acked_step});
  });
  // The aggregator's part here, not in the lambda: ForEach runs it where
  // the thread-safety analysis does not see mu_ held.
  std::vector<int64_t> acked;
  for (const Attached& a : attached) {
    const int64_t step = std::max(a.last_acked_step, aggregator_.last_step_of_rank(a.rank));
    if (step >= 0) acked.push_back(step);
  }
  if (acked.empty()) return std::nullopt;
  auto lower_median = acked.begin() + static_cast<ptrdiff_t>((acked.size() - 1) / 2);
  std::nth_element(acked.begin(), lower_median, acked.end());
  return *lower_median;
}

std::optional<LiveSwitch> Job::LiveSwitchPoint(int64_t floor) const {
  if (sessions_.connected() == 0) return std::nullopt;
  const v1::Decision* newest = generations_.newest_decision();
  const std::optional<int64_t> retired_until = generations_.retired_until();
  if (newest == nullptr) {
    if (!retired_until) {
      // Nothing decided yet, but ranks may be training: those that observed
      // a step before the switch and those that observe it after must plan
      // it alike. The old generation plans no step up to past the trainers'
      // frontier (no decision, on every rank); the new one decides from
      // there. (Found by generation_property_test under ASan: a rewind at
      // step 2 voided at once, and a rank that had observed step 2 before it
      // planned without the decision its peer's later report got.)
      const std::optional<int64_t> frontier = TrainersFrontier();
      if (!frontier) return std::nullopt;  // no rank planned anything yet
      return LiveSwitch{*frontier + kSwitchMargin + 2, std::max(floor, aggregator_.last_closed())};
    }
    // A live generation that decided nothing yet plans no step: the new one
    // takes its place, from the same step (switches in quick succession).
    return LiveSwitch{*retired_until, std::max(floor, aggregator_.last_closed())};
  }
  // A rank that observes every step can plan with a decision of this
  // generation at most up to newest.observed + next_lag: past it, the next
  // decision is due and it waits. The ranks' acked frontier caps that
  // bound, should the newest decision have observed a step far ahead of the
  // trainers (a bogus step closed by its deadline, an import of a far step:
  // the very cases a rewind is for).
  int64_t planned = newest->observed_step();
  if (const std::optional<int64_t> frontier = TrainersFrontier()) {
    planned = std::min(planned, *frontier + kSwitchMargin);
  }
  LiveSwitch live;
  live.from_step = planned + std::max(newest->next_lag(), 1) + 1;
  if (retired_until) live.from_step = std::max(live.from_step, *retired_until);
  // Kept open steps (StartOverLive) are decided by the new generation;
  // those up to here were decided by this one, or never will be.
  live.decided_through = std::max(floor, aggregator_.last_closed());
  return live;
}

void Job::StartGeneration(GenerationCause cause, const std::string& detail, int64_t rewind_to) {
  // A restored job still holding knows how far its ranks are: that goes
  // into this switch as it would with a live one.
  if (cause != GenerationCause::kRestore) {
    MaybeEndRestoreHold(Now(), "a new generation starts");
  }
  // An import or a rewind while ranks train is a live switch (job.h); the
  // rest void every decision at once.
  std::optional<LiveSwitch> live;
  if (cause == GenerationCause::kImport) {
    live = LiveSwitchPoint(controller_.last_step().value_or(-1));
  } else if (cause == GenerationCause::kRewind) {
    live = LiveSwitchPoint(rewind_to - 1);
  }
  if (live) {
    // Without a decision it plans no step.
    if (generations_.newest_decision() != nullptr) generations_.Retire(live->from_step);
  } else {
    generations_.VoidSent();
    acks_.Clear();
  }
  generations_.Advance();
  const uint64_t generation = generations_.generation();
  imported_state_.clear();  // ImportState sets it after this
  replica_check_.Forget();  // a step number of the new timeline is another step
  switch (cause) {
    case GenerationCause::kIncarnation:
      // A trainer restarted (from a checkpoint, without importing the
      // state): any step may come next.
      controller_.Rewind();
      aggregator_.StartOver(-1);
      break;
    case GenerationCause::kImport:
    case GenerationCause::kResume: {
      // Resumed steps after the imported state's last step are accepted,
      // also when that step is earlier than the job's.
      const int64_t floor = controller_.last_step().value_or(-1);
      if (live) {
        aggregator_.StartOverLive(
            floor, TrainersFrontier().value_or(aggregator_.last_closed()) + kSwitchMargin);
      } else {
        aggregator_.StartOver(floor);
      }
      break;
    }
    case GenerationCause::kRestore:
      aggregator_.StartOver(
          std::max(aggregator_.last_closed(), controller_.last_step().value_or(-1)));
      break;
    case GenerationCause::kRewind:
      controller_.Rewind();
      if (live) {
        aggregator_.StartOverLive(
            rewind_to - 1, TrainersFrontier().value_or(aggregator_.last_closed()) + kSwitchMargin);
      } else {
        aggregator_.StartOver(rewind_to - 1);
      }
      break;
  }
  if (!live) {
    // The steps ranks acked start over with the aggregator's (a rank's last
    // step in gnmrctl is the newest it reported or acked), and so does the
    // watch for ranks without decisions.
    const int64_t closed = aggregator_.last_closed();
    sessions_.ForEach([closed](uint32_t, RankSession& rs) {
      rs.last_acked_step = -1;
      rs.last_decided_ack = -1;
      rs.watched_from = closed;
    });
  }
  // Import, rewind: live instances (attached, or registered and not
  // attached yet) live on in the new generation: a restart of theirs later
  // starts another one. One whose stream has ended stays behind: its
  // successor joins. A new incarnation takes the ranks that waited for it
  // (incarnation_pending); the registering rank joins in Register.
  const bool moves_live = cause == GenerationCause::kImport || cause == GenerationCause::kResume ||
                          cause == GenerationCause::kRewind;
  pending_incarnations_ = 0;
  sessions_.ForEach([&](uint32_t, RankSession& rs) {
    const bool moves = rs.incarnation_pending || (moves_live && !rs.stream_ended);
    if (moves && rs.instance != 0) rs.instance_generation = generation;
    rs.incarnation_pending = false;
  });
  // Import and restore begin with the rebuilt last decision (below), if the
  // controller has one; a new incarnation with the next one to be made.
  const bool rebuilds = cause == GenerationCause::kImport || cause == GenerationCause::kResume ||
                        cause == GenerationCause::kRestore;
  const bool rebuilt =
      rebuilds && controller_.last_step() && controller_.last_apply() && controller_.sequence() > 0;
  generations_.set_start(ToWire(GenerationStartMessage(
      generation, controller_.next_lag(),
      rebuilt ? controller_.sequence() : controller_.next_sequence(), live, rebuilt)));
  sessions_.Broadcast(generations_.start());
  if (rebuilds) RebuildLastDecision();
  std::string said = detail;
  if (live) {
    said += "; live switch: generation " + std::to_string(generation - 1) +
            " still plans the steps before " + std::to_string(live->from_step);
  }
  spdlog::info("job {}: generation {}: {}", id_, generation, said);
  EmitEvent(v1::EVENT_KIND_GENERATION, controller_.last_step().value_or(-1),
            "generation " + std::to_string(generation) + ": " + said);
  RequestSnapshot();
}

// The decision of the controller's last observed step as the ranks
// received it: observed and apply step, the set in force, global_skip,
// next_lag and sequence, hence the original digest. As the first decision
// of a new generation it gives a rank that resumes from a checkpoint (or
// attaches after a restart) the plan of its next step without waiting for
// a new decision.
void Job::RebuildLastDecision() {
  Decision d;
  if (::gnmr::RebuildLastDecision(controller_, &d)) {
    sessions_.Broadcast(generations_.Record(DecisionMessage(d, generations_.generation())));
  }
}

uint64_t Job::generation() const {
  MutexLock lock(mu_);
  return generations_.generation();
}

uint64_t Job::decision_failures() const {
  MutexLock lock(mu_);
  return decision_failures_;
}

}  // namespace gnmr
