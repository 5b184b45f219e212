// What a rank applies at one step (<gnmr/client.h>, Client::PlanFor): the
// units in recovery, each with its action and why, whether the optimizer
// step is skipped, and why a plan has no decision (docs/safety.md).
#pragma once

#include <cstdint>
#include <vector>

#include "gnmr/config.h"
#include "gnmr/export.h"

namespace gnmr {

// A unit, numbered 0, 1, ... in AddUnit order.
using UnitHandle = uint32_t;

// One unit in recovery at the plan's step.
struct PlanEntry {
  UnitHandle unit = 0;
  Action action = Action::kPromote;
  // Treatment of this step's gradient when first_step (lag-0 promote).
  EntryTreatment entry = EntryTreatment::kNone;
  // step == since: skip, reset_state and the entry treatment apply only on
  // the first step in force; promote and clip on every step in force.
  bool first_step = false;
  int64_t since = 0;  // first step in force
  int64_t until = 0;  // first step no longer in force
  double ref_norm = 0.0;
  double clip_min_scale = 0.0;
  // This rank's estimate of the unit's gradient norm at the plan's step,
  // from Observe(step): sqrt(local sumsq * shard_count) (exact for a
  // replicated unit; assumes evenly spread energy for a sharded one). NaN
  // if Observe(step) was not called.
  double norm = 0.0;
  // ClipScale(ref_norm, norm, clip_min_scale): the factor for clip.
  double scale = 1.0;
  // A candidate denied by the budget, clipped on this step only (denied:
  // clip, lag 0): action clip, since = step, until = step + 1. Applied like
  // any clip; the flag tells a trainer's logs it held no budget.
  bool denied_clip = false;
  // Why the unit is in recovery: the trigger and figures of the sample that
  // admitted it (a denied clip: that denied it), as the decision carries
  // them (docs/controller.md, "Why a unit is in recovery"). kNone and 0
  // from a daemon that does not send them.
  Trigger trigger = Trigger::kNone;
  double gnmr = 0.0;
  double delta = 0.0;
  double fwd_ratio = 0.0;         // F, vs tau_forward
  double saturation_ratio = 0.0;  // S, vs tau_saturation
  double underflow_ratio = 0.0;   // U, vs underflow_fraction
};

// Why a plan has no decision (docs/safety.md). Every reason but kNone and
// kNoDecisionYet counts as a missed decision (ClientCounters).
enum class MissReason : int {
  kNone = 0,           // the plan has its decision
  kNoDecisionYet = 1,  // nothing can cover this step yet (the first steps of
                       // a generation: no decision applies this early)
  kTimeout = 2,        // due but not here within decision_wait (or the daemon
                       // was found slow at an earlier step and sent nothing since)
  kDisconnected = 3,   // due while no daemon was connected (fail-open)
  kNotReceived = 4,    // made, but this rank does not hold it (it attached
                       // after the daemon's recent history)
};
GNMR_EXPORT const char* MissReasonName(MissReason r);

// The actions in force at one step.
struct GNMR_EXPORT Plan {
  int64_t step = -1;
  // false: no decision covers this step on this rank; the plan is empty
  // (no unit in recovery at `step`, fail-open) and miss_reason says why.
  bool has_decision = false;
  MissReason miss_reason = MissReason::kNoDecisionYet;
  uint64_t generation = 0;
  int64_t observed_step = -1;
  int64_t apply_step = -1;
  uint64_t sequence = 0;
  uint64_t digest = 0;
  // The decision observed this very step (lag 0) and saw a non-finite
  // gradient on some rank: skip the whole optimizer step.
  bool global_skip = false;
  // Same-step guard: Observe(step) found a NaN/Inf in a unit of this rank.
  bool nonfinite_observed = false;
  // Skip the optimizer step of `step`: global_skip || nonfinite_observed.
  bool skip_step = false;
  std::vector<PlanEntry> entries;  // unit order

  // Whether `unit` is in recovery at this step (nullptr if not).
  const PlanEntry* Find(UnitHandle unit) const;
};

// clamp(ref_norm / norm, min_scale, 1); 1 if norm is 0 or ref_norm is not
// a number, min_scale if norm is NaN or infinite.
GNMR_EXPORT double ClipScale(double ref_norm, double norm, double min_scale);

}  // namespace gnmr
