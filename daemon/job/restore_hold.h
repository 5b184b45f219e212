// RestoreHold: what a job restored from its snapshot waits for before it
// decides again (docs/safety.md, rule 3, "Restore").
//
// gnmrd snapshots a job now and then, not at every decision. When it is
// killed, the decisions it made after the last snapshot are lost with it,
// but the ranks received them, planned steps with them, and may hold more
// for steps they have not reached yet. Every one of those decisions
// observed a step some rank had reported, so none applies past the
// furthest rank's step plus the decision lag. The restored job cannot know
// that step until the ranks come back; deciding at once (from the first
// rank to return, perhaps one far behind the others) would plan steps the
// others already planned, with other decisions.
//
// So the job holds: its ranks' reports and acks are validated and tell how
// far each rank has come, but no step opens. The hold ends when every rank
// of the job was heard from, or after `grace` (a rank that stays away
// longer is gone or cut off, and plans nothing with a decision either way).
// The job then decides from FirstStep(): past every step a rank it heard
// from reached, plus the lag and a margin. The steps before it are planned
// without a decision on every rank, counted as missed, never with two
// different ones.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <unordered_map>

namespace gnmr {

class RestoreHold {
 public:
  using Clock = std::chrono::steady_clock;

  // Steps added past the furthest rank's step: what a rank may plan from a
  // decision it received while the daemon was down, after it was heard.
  static constexpr int64_t kMargin = 8;

  RestoreHold(uint32_t world_size, Clock::time_point until)
      : world_size_(world_size), until_(until) {}

  // Rank `rank` reported or acked `step` (already bounded by the caller).
  void Heard(uint32_t rank, int64_t step);

  // Whether the hold is over at `now`: every rank heard, or the grace ran out.
  bool Over(Clock::time_point now) const {
    return heard_.size() >= world_size_ || now >= until_;
  }

  // The first step the restored generation may observe and decide, given the
  // decision lag; none if no rank was heard (nothing to step past).
  std::optional<int64_t> FirstStep(int lag) const;

  uint32_t ranks_heard() const { return static_cast<uint32_t>(heard_.size()); }
  uint32_t world_size() const { return world_size_; }

 private:
  uint32_t world_size_;
  Clock::time_point until_;
  std::unordered_map<uint32_t, int64_t> heard_;  // rank -> furthest step
};

}  // namespace gnmr
