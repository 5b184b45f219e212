// StepAggregator: collects the per-rank reports of each step of one job and
// combines them into one UnitSample per unit (docs/statistics.md,
// "Combination in gnmrd").
//
// Design notes
// - A step closes when every registered rank has reported it or a later
//   step (ranks may skip steps), or at its deadline (first report + the
//   step deadline), or when more than max_open_steps steps are open or
//   their reports hold more than max_open_bytes (a stalled rank must not
//   make a large job buffer 64 steps of every other rank). Steps
//   close strictly in order; a report for a closed step is late: counted by
//   the caller and dropped, not an error.
// - A report may not jump more than max_step_jump steps ahead of the job's
//   last closed step (before any step closed: the earliest open one), or a
//   single rank could move the job's last closed step to the end of the
//   step range, after which every report of every rank would be late, for
//   good (docs/limits.md). The first report of a timeline (a new job, or
//   after StartOver(-1)) may name any step: a trainer resumes anywhere.
// - Combination: replicas of a shard are averaged (sumsq), max'd (amax) and
//   summed (counts); shards of a unit are then summed. Forward statistics
//   (docs/controller.md, "Forward channel") likewise, but their sizes are
//   summed over replicas too (each ran its own batch), and a unit has them
//   only when every reported shard sent them. Reports are kept per
//   rank and combined at close in rank order, so the floating-point result
//   does not depend on arrival order. A unit is evaluated only if every one
//   of its shards is covered; the rest are counted incomplete.
// - Sparse reports (docs/statistics.md): a rank's sparse report covers every
//   slot it holds, and lists only its active units. A covered slot that no
//   replica listed contributes nothing (zero); a unit that no report listed
//   is inactive at the step and yields no sample at all, so the controller
//   never sees it. A listed replica is averaged over the replicas that
//   listed the slot (an omitted replica is "nothing to report", not a
//   zero). Combination costs O(listed values) when every registered rank
//   sent a sparse report of the step (the normal case); otherwise (dense
//   reports, or a step closed without some rank) also O(units).
// - Reporter election (docs/scale.md): with SetReporters, a step is
//   complete once every listed reporter has reached it (the other ranks
//   stand by). A step whose deadline passes without some reporter may be
//   given one more deadline (Overdue, Extend) while another replica of
//   that reporter's shard sends the step in its place.
// - Completeness: a step is complete once every rank has reached it; a
//   cursor over the ascending rank list remembers the ranks already
//   checked for the oldest open step, so the check costs O(ranks) per step,
//   not per report.
// - Pure: no I/O, no threads; time is passed in. Not thread-safe (the job
//   lock serialises calls). Add() validates the whole report first and
//   changes nothing when it rejects it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "controller/types/decision.h"
#include "daemon/topology/topology.h"
#include "gnmr/status.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

class StepAggregator {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    Clock::duration deadline = std::chrono::seconds(2);
    size_t max_open_steps = 64;
    int64_t max_step_jump = 1000000;
    size_t max_open_bytes = size_t{64} << 20;
  };

  struct ClosedStep {
    int64_t step = 0;
    std::vector<UnitSample> samples;  // complete units, unit id order
    uint32_t incomplete_units = 0;    // registered units not evaluated
    uint32_t omitted_units = 0;       // inactive: listed by no report
    uint32_t ranks_reported = 0;
    uint32_t ranks_expected = 0;
    bool by_deadline = false;  // closed without every rank
    Clock::time_point first_report;
    Clock::time_point last_report;
  };

  enum class Outcome { kAccepted, kLate };

  StepAggregator(const JobTopology* topology, Options options)
      : topology_(topology), options_(options) {}

  // Validates and stores one report. InvalidArgument (columns of different
  // lengths, a unit twice, negative sumsq, step not after this rank's last
  // report; sparse: a unit id not below the job's unit count or not above
  // the one before it), OutOfRange (a step more than max_step_jump ahead)
  // or NotFound (a unit this rank did not register) change nothing.
  Status Add(uint32_t rank, const v1::StepStats& stats, Clock::time_point now, Outcome* outcome);

  // Pops the oldest step if it is ready to close at `now`.
  bool PopReady(Clock::time_point now, ClosedStep* out);

  // When the oldest open step reaches its deadline, if any step is open.
  std::optional<Clock::time_point> NextDeadline() const;

  // The ranks a step waits for: `ranks` (ascending, owned by the caller,
  // kept alive and up to date while set; reporter_election.h), or every
  // registered rank (null, the default).
  void SetReporters(const std::vector<uint32_t>* ranks) {
    reporters_ = ranks;
    complete_cursor_ = 0;
  }
  // The reporters changed (the vector SetReporters was given).
  void ReportersChanged() { complete_cursor_ = 0; }
  // The oldest open step if its deadline has passed at `now` while it is
  // incomplete and Extend was not called for it yet.
  std::optional<int64_t> Overdue(Clock::time_point now);
  // The expected ranks that have not reached `step`.
  std::vector<uint32_t> Missing(int64_t step) const;
  // Marks open `step` as handled for Overdue; with `longer`, its deadline
  // moves one more deadline away (another replica sends the step).
  void Extend(int64_t step, bool longer);

  // Forgets a rank's step history (it re-registered: a restarted trainer
  // may resume from an earlier checkpoint step).
  void ResetRank(uint32_t rank) {
    last_step_of_rank_.erase(rank);
    complete_cursor_ = 0;
  }

  // While held, reports are kept as always but no step closes (PopReady
  // returns none), Announce opens none, and Overdue names none: after a
  // restore the job decides nothing until it knows which steps its ranks
  // planned (restore_hold.h). Past max_open_steps or max_open_bytes the
  // oldest open step is dropped undecided (it becomes the last closed
  // step), so a hold never grows memory. StartOver and StartOverLive end
  // it.
  void Hold() { held_ = true; }
  bool held() const { return held_; }

  // Sets the last closed step (after a restore): older reports are late.
  void SetLastClosed(int64_t step) { last_closed_ = step; }

  // The job starts a new timeline of steps (a new generation: an imported
  // state, or a restarted trainer): drops every open step and each rank's
  // step history, and sets the last closed step to `last_closed` (the
  // imported controller's last step, or -1 when any step may come), which
  // may be earlier than before. Resumed steps after it are accepted again.
  void StartOver(int64_t last_closed);
  // A live generation switch (docs/safety.md, rule 3): the ranks go on with
  // their steps, so the open steps in (last_closed, keep_through] and the
  // ranks' step history they imply are kept (their reports are not sent
  // again); the rest is dropped as by StartOver.
  void StartOverLive(int64_t last_closed, int64_t keep_through);
  // Every open step waits a whole deadline from `now` again (the end of a
  // hold: its steps waited for the ranks to come back, not for their
  // reports).
  void RestartDeadlines(Clock::time_point now);
  // A step some rank has reached although no report of it came (a
  // standby's ack, docs/scale.md): opened without reports if it is after
  // the last closed step and within the step-jump and open-step bounds, so
  // that its deadline runs and a silent reporter is passed over. Returns
  // whether it opened one.
  bool Announce(int64_t step, Clock::time_point now);
  int64_t last_closed() const { return last_closed_; }
  int64_t last_step_of_rank(uint32_t rank) const;
  size_t open_steps() const { return open_.size(); }
  // Bytes of the reports held in open steps.
  size_t open_bytes() const { return open_bytes_; }

 private:
  struct ForwardStats {
    double sumsq;
    double amax;
    uint64_t saturated;
    uint64_t zeros;
    uint64_t numel;   // 0: none for this unit
    uint64_t order;   // ForwardOrderKey(stage, first-call position); 0: unknown
    uint64_t blocks;  // block figures (StepStats.fwd_blocks ...); 0: none
    uint64_t saturated_blocks;
    uint64_t dead_blocks;
    uint64_t scale_clamps;
    // Source figures (StepStats.fwd_source_numel ...); 0: none.
    uint64_t source_numel;
    uint64_t underflow;
    double error_sumsq;
    double source_sumsq;
  };
  // The backward columns of one row (StepStats.bwd_sumsq ...).
  struct BackwardStats {
    double sumsq;
    uint64_t saturated;
    uint64_t zeros;
    uint64_t numel;  // 0: none for this unit
    uint64_t order;  // BackwardOrderKey(stage, first-call position); 0: unknown
  };
  struct RankReport {
    bool sparse = false;
    std::vector<uint32_t> slots;
    std::vector<double> sumsq;
    std::vector<double> amax;
    std::vector<uint64_t> nonfinite;
    std::vector<uint64_t> zeros;
    std::vector<ForwardStats> forward;    // empty, or one per slot
    std::vector<BackwardStats> backward;  // the same
    size_t Bytes() const {
      return slots.size() * sizeof(uint32_t) +
             (sumsq.size() + amax.size() + nonfinite.size() + zeros.size()) * 8 +
             forward.size() * sizeof(ForwardStats) + backward.size() * sizeof(BackwardStats);
    }
  };
  struct OpenStep {
    std::map<uint32_t, RankReport> reports;  // rank order
    Clock::time_point first_report;
    Clock::time_point last_report;
    bool overdue_handled = false;  // Extend was called
    bool extended = false;         // ... with `longer`
    Clock::time_point Deadline(Clock::duration d) const {
      return first_report + (extended ? 2 * d : d);
    }
  };

  const std::vector<uint32_t>& Expected() const {
    return reporters_ ? *reporters_ : topology_->rank_list();
  }
  bool Complete(int64_t step);
  Status ValidateUnits(uint32_t rank, const v1::StepStats& s, RankReport* report);
  Status ValidateSparseUnits(uint32_t rank, const v1::StepStats& s, RankReport* report);
  // The forward columns: all empty or unit_id's length, and consistent.
  static Status ValidateForward(const v1::StepStats& s);
  // The backward columns: the same.
  static Status ValidateBackward(const v1::StepStats& s);
  // Row i's forward position (StepStats.fwd_order; 0: unknown).
  static uint32_t ForwardPosition(const v1::StepStats& s, int i);
  // What max_step_jump is measured from; none at the start of a timeline.
  std::optional<int64_t> StepAnchor() const;

  // Closing a step (step_combine.cc), in the order Combine runs them:
  // every report's rows into acc_ and listed_ (true if all were sparse);
  // which slots the reports cover (true: the fast path, where a slot is
  // covered iff some rank holds it); listed_ in unit id order; each listed
  // unit's sample (complete: every shard reported or covered; held: every
  // shard has a holder); and the unlisted units some shard of which no
  // report covered.
  void Combine(int64_t step, OpenStep& open, ClosedStep* out);
  bool AccumulateReports(const OpenStep& open);
  bool MarkCoverage(const OpenStep& open, bool all_sparse);
  bool Covered(uint32_t slot, bool fast) const;
  void SortListed();
  UnitSample CombineUnit(uint32_t id, bool fast, bool* complete, bool* held);
  uint32_t CountUnlistedIncomplete(bool fast, uint32_t listed_not_held) const;
  // Replicas' forward statistics are summed (sums averaged at close),
  // shards' added to the unit's sample.
  static void AddReplicaForward(const ForwardStats& f, ForwardStats* into);
  static void AddReplicaBackward(const BackwardStats& b, BackwardStats* into);

  const JobTopology* topology_;
  const std::vector<uint32_t>* reporters_ = nullptr;
  Options options_;
  std::map<int64_t, OpenStep> open_;
  size_t open_bytes_ = 0;
  std::unordered_map<uint32_t, int64_t> last_step_of_rank_;
  int64_t last_closed_ = -1;
  bool held_ = false;
  // Complete(): rank_list()[0, complete_cursor_) have reached
  // complete_step_.
  size_t complete_cursor_ = 0;
  int64_t complete_step_ = -1;

  // Scratch for validation and combination; not state.
  std::vector<uint64_t> seen_epoch_;
  uint64_t epoch_ = 0;
  struct SlotAcc {
    double sumsq;
    double amax;
    uint64_t nonfinite;
    uint64_t zeros;
    uint32_t replicas;
    uint32_t fwd_replicas;  // replicas that sent forward statistics
    ForwardStats fwd;       // sumsq summed (averaged at close), counts summed
    uint32_t bwd_replicas;  // replicas that sent backward statistics
    BackwardStats bwd;      // as fwd
  };
  static void AddShardForward(const SlotAcc& a, UnitSample* sample);
  static void AddShardBackward(const SlotAcc& a, UnitSample* sample);
  std::vector<SlotAcc> acc_;           // all zero between calls of Combine
  std::vector<uint64_t> unit_epoch_;   // == epoch_: listed in this step
  std::vector<uint64_t> cover_epoch_;  // == epoch_: slot covered (slow path)
  std::vector<uint32_t> listed_;       // unit ids listed in this step
};

}  // namespace gnmr
