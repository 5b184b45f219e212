// Decisions on the client side: validation of what the daemon sends, and
// the cache PlanFor reads. No network, no threads: unit-testable alone.
//
// Design notes (the rules are docs/safety.md, "Plan validity")
// - DecisionValidator belongs to one session: the unit id mapping comes
//   from that session's RegisterResponse. It checks a decision's content
//   (units, steps, enums, digest); ordering is the cache's business.
// - DecisionCache holds the decisions of one generation, ordered by their
//   sequence number (contiguous within a generation). A newer generation
//   voids everything held; an older one is stale and ignored. A decision
//   covers the steps from its apply step up to its successor's; Covering()
//   answers only when the rank holds enough to know it.
// - Re-sent decisions (the daemon's history when a rank attaches again) are
//   duplicates, not errors; the same sequence with another digest is a
//   conflict (a bug or a second daemon), reported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "core/decision.h"
#include "gnmr/client.h"
#include "gnmr/status.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

struct CachedDecision {
  uint64_t generation = 0;
  int64_t observed_step = 0;
  int64_t apply_step = 0;
  uint64_t sequence = 0;
  uint64_t digest = 0;
  int32_t next_lag = 1;
  bool global_skip = false;
  // unit_id holds the local UnitHandle (not the daemon's id); unit order.
  std::vector<RecoveryEntry> entries;
};

// GNMR_EXPORT: client/local/ calls it across the shared libraries (transport.h).
class GNMR_EXPORT DecisionValidator {
 public:
  // Starts a session: daemon_ids[h] is the daemon's id of local unit h.
  void Reset(const std::vector<uint32_t>& daemon_ids);

  // InvalidArgument naming the first problem: since >= until, apply <
  // observed, negative step, lag out of range, bad enum, unit twice, digest
  // mismatch (recomputed with DigestOf over the whole set). Entries of
  // units this rank did not register are checked, then left out of the
  // returned entries: they are other ranks' units.
  StatusOr<CachedDecision> Validate(const v1::Decision& d);

 private:
  std::unordered_map<uint32_t, UnitHandle> local_of_;
  std::vector<RecoveryEntry> scratch_;  // the whole set, daemon ids
};

// GNMR_EXPORT: client/local/ calls it across the shared libraries (transport.h).
class GNMR_EXPORT DecisionCache {
 public:
  static constexpr size_t kCapacity = 128;

  enum class Insert { kStored, kDuplicate, kStale, kConflict };

  // Learns of generation `g` (Register response, GenerationStart): if newer
  // than the current one, drops every decision held and returns true.
  // `first_lag` is the lag of the generation's first decision and
  // `first_sequence` its sequence number (0: not known).
  bool StartGeneration(uint64_t g, int32_t first_lag, uint64_t first_sequence = 0);
  // The daemon's word at registration: the job is in generation `g`, also
  // when that is lower than the one held (a daemon that lost its state
  // starts its jobs anew). Returns true if it differs from the one held.
  bool AdoptGeneration(uint64_t g, int32_t first_lag);
  // Stores `d` (validated). Starts d.generation first if it is newer.
  Insert Add(CachedDecision d);

  uint64_t generation() const { return generation_; }
  // The newest decision held (highest sequence), null if none.
  const CachedDecision* Newest() const;
  // The lag of the next decision: the newest's next_lag, else the
  // generation's first lag.
  int32_t NextLag() const;
  // The decision covering `step` among those held, given that no decision
  // after Newest() applies at or before `step` (the caller knows that):
  // Newest() if it applies at or before `step`, else the held D with
  // D.apply <= step < successor.apply (successor held). Null if none.
  const CachedDecision* Covering(int64_t step) const;
  // Whether a decision of this generation applying at or before `step` may
  // exist that the rank does not hold (it holds none, and does not hold the
  // generation's first decision either).
  bool MayMiss(int64_t step) const;
  size_t size() const { return decisions_.size(); }

 private:
  std::deque<CachedDecision> decisions_;  // sequence order
  uint64_t generation_ = 0;
  int32_t first_lag_ = 1;
  uint64_t first_sequence_ = 0;  // 0: not known
};

}  // namespace gnmr
