// Decisions on the client side: validation of what the daemon sends, and
// the cache PlanFor reads. No network, no threads: unit-testable alone.
//
// Design notes (the rules are docs/safety.md, "Plan validity")
// - DecisionValidator belongs to one session: the unit id mapping comes
//   from that session's RegisterResponse. It checks a decision's content
//   (units, steps, enums, digest); ordering is the cache's business.
// - GenerationDecisions holds one generation's decisions; DecisionCache the
//   current generation and the retired ones a live switch keeps (below).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <unordered_map>
#include <vector>

#include "controller/types/decision.h"
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

// The decisions of one generation, ordered by their sequence number
// (contiguous within a generation). A decision covers the steps from its
// apply step up to its successor's; Covering() answers only when the rank
// holds enough to know it.
class GNMR_EXPORT GenerationDecisions {
 public:
  static constexpr size_t kCapacity = 128;
  enum class Insert { kStored, kDuplicate, kStale, kConflict };

  explicit GenerationDecisions(uint64_t generation = 0, int32_t first_lag = 1,
                               uint64_t first_sequence = 0)
      : generation_(generation), first_lag_(first_lag), first_sequence_(first_sequence) {}

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
  // Whether a decision applying at or before `step` may exist that the rank
  // does not hold: of this generation (it holds none, and does not hold the
  // generation's first decision either), or, before a rebuilt first
  // decision, of an older one.
  bool MayMiss(int64_t step) const;
  size_t size() const { return decisions_.size(); }
  // Its first decision is the previous generation's last, rebuilt
  // (GenerationStart.rebuilt): it follows the start on the stream.
  bool rebuilt() const { return rebuilt_; }

 private:
  friend class DecisionCache;
  Insert Add(CachedDecision d);

  uint64_t generation_;
  int32_t first_lag_;
  uint64_t first_sequence_;               // 0: not known
  std::deque<CachedDecision> decisions_;  // sequence order
  // GenerationStart.rebuilt: steps before the first decision's apply step
  // were planned by an older generation.
  bool rebuilt_ = false;
  // Set by a live switch (GenerationStart.live, docs/safety.md, rule 3):
  // the first step this generation plans (the previous one plans those
  // before), and the step after which it decides.
  std::optional<int64_t> from_step_;
  int64_t decided_through_ = std::numeric_limits<int64_t>::min();
  // Its GenerationStart (or a decision) arrived: not only named by a
  // Register response, whose generation's start and retired predecessors
  // come first on the stream.
  bool announced_ = true;
};

// What a rank knows of the job's decisions: the current generation and, after
// live switches, the retired ones that still plan the steps before it.
//
// - A newer generation started at once voids everything held; an older one
//   is stale and ignored, unless it is a retired generation a stream sends
//   before the current one (a rank that attaches after a live switch).
// - A live switch keeps the previous generation, retired: it plans the steps
//   before the new generation's from_step, with the decisions it holds (no
//   more of them come). At most kRetiredKept are kept.
// - Re-sent decisions (the daemon's history when a rank attaches again) are
//   duplicates, not errors; the same sequence with another digest is a
//   conflict (a bug or a second daemon), reported.
// GNMR_EXPORT: client/local/ calls it across the shared libraries (transport.h).
class GNMR_EXPORT DecisionCache {
 public:
  static constexpr size_t kCapacity = GenerationDecisions::kCapacity;
  static constexpr size_t kRetiredKept = 2;
  using Insert = GenerationDecisions::Insert;

  // GenerationStart.live: see GenerationDecisions.
  struct LiveSwitch {
    int64_t from_step = 0;
    int64_t decided_through = -1;
  };
  // What a start did to the steps the rank observed: kept (kKept: the same
  // generation, a retired one, or a live switch) or void (kVoided: a newer
  // generation started at once; the steps observed before it are not
  // decided in it).
  enum class Start { kKept, kVoided };

  // Learns of generation `g` (GenerationStart; Register responses use
  // AdoptGeneration). `first_lag` is the lag of the generation's first
  // decision and `first_sequence` its sequence number (0: not known).
  // `rebuilt`: GenerationStart.rebuilt.
  Start StartGeneration(uint64_t g, int32_t first_lag, uint64_t first_sequence = 0,
                        const std::optional<LiveSwitch>& live = std::nullopt, bool rebuilt = false);
  // The daemon's word at registration: the job is in generation `g`, also
  // when that is lower than the one held (a daemon that lost its state
  // starts its jobs anew). A generation other than the one held replaces
  // everything, unannounced until its GenerationStart arrives. Returns true
  // if it differs from the one held.
  bool AdoptGeneration(uint64_t g, int32_t first_lag);
  // Stores `d` (validated): in its generation if held; one of a newer
  // generation starts it (at once).
  Insert Add(CachedDecision d);

  // The current generation.
  const GenerationDecisions& current() const { return gens_.back(); }
  uint64_t generation() const { return current().generation(); }
  const CachedDecision* Newest() const { return current().Newest(); }
  int32_t NextLag() const { return current().NextLag(); }
  const CachedDecision* Covering(int64_t step) const { return current().Covering(step); }
  bool MayMiss(int64_t step) const { return current().MayMiss(step); }
  size_t size() const { return current().size(); }
  // The last step a decision held can plan (-1: none held): each
  // generation's newest covers up to where its successor would apply.
  int64_t HeldThrough() const;
  // Whether the current generation's start arrived (see AdoptGeneration):
  // until it does, the rank cannot tell what plans a step.
  bool announced() const { return current().announced_; }
  // Which generation plans `step`: the current one; a retired one (a step
  // before the current generation's from_step; *retired set); or one the
  // rank no longer holds (a step before every generation it holds: it gets
  // no plan).
  enum class Planner { kCurrent, kRetired, kGone };
  Planner PlannerOf(int64_t step, const GenerationDecisions** retired = nullptr) const;
  // The step after which the current generation's next decision observes a
  // step: its newest decision's observed step, or a live switch's
  // decided_through if later; nullopt when neither is known.
  std::optional<int64_t> DecidedThrough() const;

 private:
  // Oldest first; back() is the current generation, never empty.
  std::deque<GenerationDecisions> gens_{1};
};

}  // namespace gnmr
