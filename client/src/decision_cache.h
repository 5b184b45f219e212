// Decisions on the client side: validation of what the daemon sends, and
// the cache PlanFor reads. No network, no threads: unit-testable alone.
//
// Design notes
// - DecisionValidator belongs to one session (the unit id mapping comes
//   from that session's RegisterResponse; sequence numbers must increase
//   within it). A daemon restored from an older snapshot may restart its
//   sequence lower, so the check restarts with each session.
// - Decisions carry the full recovery set, so the cache only needs recent
//   ones: PlanFor(step) uses the newest decision (in arrival order) whose
//   apply_step <= step. Entries are translated to local unit handles and
//   sorted by them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "daemon/controller/decision.h"
#include "gnmr/client.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

struct CachedDecision {
  int64_t observed_step = 0;
  int64_t apply_step = 0;
  uint64_t sequence = 0;
  uint64_t digest = 0;
  bool global_skip = false;
  // unit_id holds the local UnitHandle (not the daemon's id); unit order.
  std::vector<RecoveryEntry> entries;
};

class DecisionValidator {
 public:
  // Starts a session: daemon_ids[h] is the daemon's id of local unit h.
  void Reset(const std::vector<uint32_t>& daemon_ids);

  // InvalidArgument naming the first problem: unknown unit, since >= until,
  // apply < observed, negative step, bad enum, unit twice, digest mismatch
  // (recomputed with DigestOf), sequence not increasing.
  StatusOr<CachedDecision> Validate(const v1::Decision& d);

 private:
  std::unordered_map<uint32_t, UnitHandle> local_of_;
  bool has_sequence_ = false;
  uint64_t last_sequence_ = 0;
  std::vector<RecoveryEntry> scratch_;
};

class DecisionCache {
 public:
  static constexpr size_t kCapacity = 64;

  void Insert(CachedDecision d);
  // Whether a decision applying exactly at `step` is stored.
  bool HasApply(int64_t step) const;
  // Largest apply_step stored, -1 if none.
  int64_t NewestApply() const;
  // Observed step of the newest decision, -1 if none.
  int64_t NewestObserved() const;
  // The plan at `step` from the newest decision with apply_step <= step;
  // norm and scale are left for the caller. Reuses out->entries' storage.
  void Fill(int64_t step, Plan* out) const;
  size_t size() const { return decisions_.size(); }

 private:
  std::deque<CachedDecision> decisions_;  // arrival order
  int64_t newest_apply_ = -1;
};

}  // namespace gnmr
