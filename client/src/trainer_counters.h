// TrainerCounters: the counters of Client::Counters() that the training
// thread keeps (the I/O thread's are SharedState's): reports queued, plans
// that missed their decision, skipped steps, the run of steps without a
// decision, the host time spent on statistics and the host-wall overhead
// ratio. A plan asked for twice (before_forward, then apply) counts once:
// each per-step count remembers the step it counted last.
//
// Locking: written by the training thread only. The counts are atomics, so
// any thread reads them with a load and never takes a lock.
#pragma once

#include <atomic>
#include <cstdint>

#include "gnmr/client_counters.h"
#include "gnmr/plan.h"

namespace gnmr {

class TrainerCounters {
 public:
  void CountReportEnqueued() { reports_enqueued_.fetch_add(1, std::memory_order_relaxed); }
  // Host time spent computing statistics (ClientCounters::stats_seconds).
  void AddStatsNanos(int64_t nanos) { stats_nanos_.fetch_add(nanos, std::memory_order_relaxed); }
  // The newest host-path overhead ratio and its step.
  void SetHostOverhead(double ratio, int64_t step) {
    host_ratio_.store(ratio, std::memory_order_relaxed);
    host_ratio_step_.store(step, std::memory_order_relaxed);
  }

  // The plan of `step` has no decision although one covering it was due.
  void CountMissed(int64_t step) {
    if (step == missed_counted_step_) return;  // asked twice (before_forward, apply)
    missed_counted_step_ = step;
    missed_.fetch_add(1, std::memory_order_relaxed);
  }
  // The plan of `step` skips the optimizer step.
  void CountSkipped(int64_t step) {
    if (step == skip_counted_step_) return;
    skip_counted_step_ = step;
    skipped_steps_.fetch_add(1, std::memory_order_relaxed);
  }
  // Keeps steps_without_decision: a plan with a decision ends the run, one
  // without adds its step to it (once). Returns the run's length when the
  // run is now to be said (ProblemKind::kNoDecisions): it reached
  // kNoDecisionsWarnSteps, was not said yet, the plan's miss is not
  // kNoDecisionYet (no fault of the daemon's: a generation's first steps)
  // and `connected` (SharedState::connected_flag, loaded last); else 0.
  uint64_t CountDecisionRun(const Plan& p, const std::atomic<bool>& connected) {
    if (p.has_decision) {
      steps_without_decision_.store(0, std::memory_order_relaxed);
      no_decisions_said_ = false;
      return 0;
    }
    if (p.step == no_decision_counted_step_) return 0;  // asked twice
    no_decision_counted_step_ = p.step;
    const uint64_t run = steps_without_decision_.load(std::memory_order_relaxed) + 1;
    steps_without_decision_.store(run, std::memory_order_relaxed);
    if (run < kNoDecisionsWarnSteps || no_decisions_said_ ||
        p.miss_reason == MissReason::kNoDecisionYet || !connected.load(std::memory_order_relaxed)) {
      return 0;
    }
    no_decisions_said_ = true;
    return run;
  }

  // The count a report carries (Report::missed_decisions): the training
  // thread reads what it wrote.
  uint64_t missed_for_report() const { return missed_.load(std::memory_order_relaxed); }

  // Client::Counters(), any thread.
  uint64_t reports_enqueued() const { return reports_enqueued_.load(); }
  uint64_t missed() const { return missed_.load(); }
  uint64_t skipped_steps() const { return skipped_steps_.load(); }
  uint64_t steps_without_decision() const { return steps_without_decision_.load(); }
  double stats_seconds() const { return static_cast<double>(stats_nanos_.load()) * 1e-9; }
  double host_overhead_ratio() const { return host_ratio_.load(); }
  int64_t host_overhead_step() const { return host_ratio_step_.load(); }

 private:
  std::atomic<uint64_t> reports_enqueued_{0};
  std::atomic<uint64_t> missed_{0};
  std::atomic<uint64_t> skipped_steps_{0};
  std::atomic<uint64_t> steps_without_decision_{0};
  std::atomic<int64_t> stats_nanos_{0};
  std::atomic<double> host_ratio_{0.0};
  std::atomic<int64_t> host_ratio_step_{-1};

  // The steps counted last, and whether the current run of steps without a
  // decision was said.
  int64_t missed_counted_step_ = -1;
  int64_t skip_counted_step_ = -1;
  int64_t no_decision_counted_step_ = -1;
  bool no_decisions_said_ = false;
};

}  // namespace gnmr
