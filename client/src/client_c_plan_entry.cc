// The C API's per-entry extras, each a function of its own so that
// gnmr_plan_entry keeps its size (a binary built against 0.1 still works).
#include <cstdint>

#include "client_c_internal.h"
#include "gnmr/gnmr_c.h"

using gnmr::c_api::Call;
using gnmr::c_api::Fail;
using gnmr::c_api::Null;

namespace {

static_assert(GNMR_TRIGGER_NONE == static_cast<int>(gnmr::Trigger::kNone) &&
              GNMR_TRIGGER_GNMR == static_cast<int>(gnmr::Trigger::kGnmr) &&
              GNMR_TRIGGER_DELTA == static_cast<int>(gnmr::Trigger::kDelta) &&
              GNMR_TRIGGER_NONFINITE == static_cast<int>(gnmr::Trigger::kNonFinite) &&
              GNMR_TRIGGER_FORWARD == static_cast<int>(gnmr::Trigger::kForward) &&
              GNMR_TRIGGER_SATURATION == static_cast<int>(gnmr::Trigger::kSaturation) &&
              GNMR_TRIGGER_UNDERFLOW == static_cast<int>(gnmr::Trigger::kUnderflow) &&
              GNMR_TRIGGER_BLOCK_SATURATION == static_cast<int>(gnmr::Trigger::kBlockSaturation) &&
              GNMR_TRIGGER_DEAD_BLOCKS == static_cast<int>(gnmr::Trigger::kDeadBlocks) &&
              GNMR_TRIGGER_SCALE_CLAMPS == static_cast<int>(gnmr::Trigger::kScaleClamps) &&
              GNMR_TRIGGER_RELATIVE_ERROR == static_cast<int>(gnmr::Trigger::kRelativeError) &&
              GNMR_TRIGGER_BACKWARD == static_cast<int>(gnmr::Trigger::kBackward) &&
              GNMR_TRIGGER_BACKWARD_SATURATION ==
                  static_cast<int>(gnmr::Trigger::kBackwardSaturation) &&
              GNMR_TRIGGER_BACKWARD_UNDERFLOW ==
                  static_cast<int>(gnmr::Trigger::kBackwardUnderflow) &&
              gnmr::kNumTriggers == 14);

// The entry `index` of `plan`, or null after recording why not.
const gnmr::PlanEntry* EntryAt(const gnmr_plan* plan, uint32_t index, const void* out, int* rc) {
  if (plan == nullptr) {
    *rc = Null("plan");
  } else if (out == nullptr) {
    *rc = Null("out");
  } else if (index >= plan->plan.entries.size()) {
    *rc = Fail(gnmr::StatusCode::kOutOfRange, "entry index out of range");
  } else {
    return &plan->plan.entries[index];
  }
  return nullptr;
}

}  // namespace

extern "C" {

int gnmr_plan_entry_denied_clip(const gnmr_plan* plan, uint32_t index, int32_t* out) {
  return Call([&]() -> int {
    int rc = GNMR_OK;
    const gnmr::PlanEntry* e = EntryAt(plan, index, out, &rc);
    if (e == nullptr) return rc;
    *out = e->denied_clip ? 1 : 0;
    return GNMR_OK;
  });
}

int gnmr_plan_entry_reason(const gnmr_plan* plan, uint32_t index, gnmr_entry_reason* out) {
  return Call([&]() -> int {
    int rc = GNMR_OK;
    const gnmr::PlanEntry* e = EntryAt(plan, index, out, &rc);
    if (e == nullptr) return rc;
    out->trigger = static_cast<int32_t>(e->trigger);
    out->gnmr = e->gnmr;
    out->delta = e->delta;
    out->fwd_ratio = e->fwd_ratio;
    out->saturation_ratio = e->saturation_ratio;
    out->underflow_ratio = e->underflow_ratio;
    return GNMR_OK;
  });
}

}  // extern "C"
