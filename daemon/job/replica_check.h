// ReplicaCheck: with `report: one_per_shard`, checks that the ranks of a
// replica group really are replicas (docs/scale.md, "Replica check").
//
// Only the elected reporter of a group sends statistics; the standbys hold
// theirs back and send, with their acks, the fingerprint of their newest
// held report (proto/report_fingerprint.h). Replicas hold the same
// gradients after the all-reduce, so a standby's fingerprint of step t
// equals the fingerprint of the report gnmrd received for t. When it does
// not, the ranks are not the replicas their registration says (FSDP shards
// registered as whole units, experts of different ranks registered under
// the same names, statistics taken before the all-reduce), one rank's
// report stands for gradients it never saw, and the job must go back to
// every rank reporting (Job::FallBackToAllReports).
//
// Design notes
// - Per group, a ring of the last kSteps steps: what the reporter sent and
//   at most one standby fingerprint waiting for it (a standby's ack may
//   come before its reporter's report). The job calls it only for groups
//   of more than one rank, so a group of one costs a null pointer.
// - A report or note of a step older than the ring's entry for that slot is
//   ignored (checked less, never wrongly): the check is a sample, not a
//   ledger. Two reports of one step (a takeover) are compared as well.
// - Pure: no I/O, no locks (the job's lock serialises calls).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace gnmr {

class ReplicaCheck {
 public:
  static constexpr size_t kSteps = 8;

  struct Mismatch {
    uint32_t group = 0;
    int64_t step = 0;
    uint32_t reporter = 0;  // the rank whose report gnmrd received
    uint32_t other = 0;     // the standby (or second reporter) that differs
  };

  // Each call returns a mismatch, if the call's fingerprint was compared
  // and differs; `*compared` is set when a comparison was made.
  // The report of `step` from `rank` (a reporter) arrived.
  std::optional<Mismatch> Reported(uint32_t group, uint32_t rank, int64_t step,
                                   uint64_t fingerprint, bool* compared);
  // Standby `rank` held back its report of `step`.
  std::optional<Mismatch> Noted(uint32_t group, uint32_t rank, int64_t step, uint64_t fingerprint,
                                bool* compared);
  // Forgets everything and checks again (the job's roles changed).
  void Clear() {
    groups_.clear();
    paused_ = false;
  }
  // Forgets what it kept of past steps (a new timeline, or a rank that may
  // send steps again): a step number may now stand for another step.
  void Forget() { groups_.clear(); }
  // Stops checking until Clear (a mismatch the job could not act on).
  void Pause() {
    groups_.clear();
    paused_ = true;
  }

 private:
  struct Entry {
    int64_t step = -1;
    bool reported = false;
    uint32_t reporter = 0;
    uint64_t reported_fp = 0;
    bool noted = false;  // a standby's fingerprint waits for the report
    uint32_t standby = 0;
    uint64_t noted_fp = 0;
  };
  using Ring = std::array<Entry, kSteps>;

  // The entry of `step`, reset if it held an older step; null if it holds
  // a newer one (or while paused).
  Entry* At(uint32_t group, int64_t step);

  std::vector<std::unique_ptr<Ring>> groups_;  // by group id
  bool paused_ = false;
};

}  // namespace gnmr
