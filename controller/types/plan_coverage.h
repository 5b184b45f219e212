// How far a rank may plan with the newest decision it holds.
//
// A decision's successor observes a later step, so it applies after
// observed_step + next_lag at the earliest, and never before the decision's
// own apply step (docs/safety.md, "Plan validity"). Until it comes, a rank
// that observes every step plans up to here with the decision it holds.
// What a client says at registration (RegisterRequest.held_through), so a
// daemon restored from an older snapshot decides past it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace gnmr {

inline int64_t LastPlannableStep(int64_t observed_step, int64_t apply_step, int32_t next_lag) {
  return std::max(apply_step, observed_step + std::max<int64_t>(next_lag, 0));
}

}  // namespace gnmr
