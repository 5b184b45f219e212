// RestoreHold: what a job restored from its snapshot waits for before it
// decides again (docs/safety.md, rule 3, "A restore holds until the ranks
// are back").
//
// gnmrd snapshots a job now and then, not at every decision. When it is
// killed, the decisions it made after the last snapshot are lost with it,
// but the ranks received them, planned steps with them, and may hold more
// for steps they have not reached yet. Deciding again at once from the
// snapshot (from the first rank to return, perhaps one far behind the
// others) would decide steps the others planned with the lost decisions,
// differently.
//
// So the job holds: it keeps its ranks' reports but closes no step until it
// knows every rank of the job, or until `grace` ran out (a rank away that
// long is gone or cut off). A rank is known when it registers saying up to
// which step it planned, or can plan, with the decisions it holds
// (RegisterRequest.held_through: exact), or, for an old client that does
// not say, once it was heard from (a report or an ack): it has then planned
// at most up to its step plus the lag, give or take the messages in flight
// (kMargin). The job then decides from FirstStep(): no decision of the
// restored generation applies at a step a known rank can have planned. The
// steps before it plan without a decision on every rank (counted misses),
// never with two different ones.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <unordered_map>

namespace gnmr {

class RestoreHold {
 public:
  using Clock = std::chrono::steady_clock;

  // Steps an old client may plan past its step as heard (its messages in
  // flight, a GPU report behind its acks).
  static constexpr int64_t kMargin = 8;

  RestoreHold(uint32_t world_size, Clock::time_point until)
      : world_size_(world_size), until_(until) {}

  // Rank `rank` registered; `held_through` as it said (nullopt: it did not).
  void Registered(uint32_t rank, std::optional<int64_t> held_through);
  // Rank `rank` reported or acked `step` (already bounded by the caller).
  void Heard(uint32_t rank, int64_t step);

  // Whether the hold is over at `now`: every rank known, or the grace ran out.
  bool Over(Clock::time_point now) const { return known_ >= world_size_ || now >= until_; }

  // The first step the restored generation may observe and decide, given
  // its decision lag: one whose decision applies after every step a known
  // rank can have planned. None if no rank planned anything.
  std::optional<int64_t> FirstStep(int lag) const;

  uint32_t ranks_known() const { return known_; }
  uint32_t world_size() const { return world_size_; }

 private:
  struct RankState {
    bool said = false;
    int64_t held_through = -1;  // as said
    bool heard = false;
    int64_t step = -1;  // the furthest heard
  };
  uint32_t world_size_;
  Clock::time_point until_;
  std::unordered_map<uint32_t, RankState> ranks_;
  uint32_t known_ = 0;
  // Marks `rank` known (once) after `s` changed.
  void Count(bool was_known, const RankState& s) {
    if (!was_known && (s.said || s.heard)) ++known_;
  }
};

}  // namespace gnmr
