// ControllerConfig <-> its wire form (gnmr.v1.ControllerConfig; the scalar
// keys go through the schema, config_schema.h), and the range checks and
// conversions of the wire enums. What the client needs of the controller's
// types: it sends a config at registration and validates decisions, but
// never runs the controller (controller/ is the algorithm).
#pragma once

#include "gnmr/config.h"
#include "gnmr/status.h"
#include "gnmr/v1/controller.pb.h"

namespace gnmr {

void ConfigToProto(const ControllerConfig& c, v1::ControllerConfig* out);
// Validated; InvalidArgument names the offending key.
StatusOr<ControllerConfig> ConfigFromProto(const v1::ControllerConfig& in);

// Whether a wire enum value names an Action / EntryTreatment / Trigger
// (the proto3 enums are open: any int32 may arrive).
bool ValidAction(int v);
bool ValidEntry(int v);
bool ValidTrigger(int v);

// The internal enums and the wire enums share their numbers (the
// static_asserts below keep that true), so a conversion is a cast; these
// are the only casts between the two. FromProto assumes a valid value:
// check it with ValidAction / ValidEntry / ValidTrigger first.
static_assert(static_cast<int>(Action::kPromote) == v1::ACTION_PROMOTE &&
              static_cast<int>(Action::kClip) == v1::ACTION_CLIP &&
              static_cast<int>(Action::kSkip) == v1::ACTION_SKIP &&
              static_cast<int>(Action::kResetState) == v1::ACTION_RESET_STATE &&
              v1::Action_MIN == 0 && v1::Action_MAX == 3);
static_assert(static_cast<int>(EntryTreatment::kNone) == v1::ENTRY_NONE &&
              static_cast<int>(EntryTreatment::kClip) == v1::ENTRY_CLIP &&
              static_cast<int>(EntryTreatment::kSkip) == v1::ENTRY_SKIP &&
              v1::EntryTreatment_MIN == 0 && v1::EntryTreatment_MAX == 2);
static_assert(static_cast<int>(DeniedTreatment::kNone) == v1::DENIED_NONE &&
              static_cast<int>(DeniedTreatment::kClip) == v1::DENIED_CLIP &&
              v1::DeniedTreatment_MIN == 0 && v1::DeniedTreatment_MAX == 1);
static_assert(static_cast<int>(Attribution::kRank) == v1::ATTRIBUTION_RANK &&
              static_cast<int>(Attribution::kExclusive) == v1::ATTRIBUTION_EXCLUSIVE &&
              static_cast<int>(Attribution::kUpstream) == v1::ATTRIBUTION_UPSTREAM &&
              v1::Attribution_MIN == 0 && v1::Attribution_MAX == 2);
static_assert(static_cast<int>(Trigger::kNone) == v1::TRIGGER_NONE &&
              static_cast<int>(Trigger::kGnmr) == v1::TRIGGER_GNMR &&
              static_cast<int>(Trigger::kDelta) == v1::TRIGGER_DELTA &&
              static_cast<int>(Trigger::kNonFinite) == v1::TRIGGER_NONFINITE &&
              static_cast<int>(Trigger::kForward) == v1::TRIGGER_FORWARD &&
              static_cast<int>(Trigger::kSaturation) == v1::TRIGGER_SATURATION &&
              static_cast<int>(Trigger::kUnderflow) == v1::TRIGGER_UNDERFLOW &&
              static_cast<int>(Trigger::kBlockSaturation) == v1::TRIGGER_BLOCK_SATURATION &&
              static_cast<int>(Trigger::kDeadBlocks) == v1::TRIGGER_DEAD_BLOCKS &&
              static_cast<int>(Trigger::kScaleClamps) == v1::TRIGGER_SCALE_CLAMPS &&
              static_cast<int>(Trigger::kRelativeError) == v1::TRIGGER_RELATIVE_ERROR &&
              static_cast<int>(Trigger::kBackward) == v1::TRIGGER_BACKWARD &&
              static_cast<int>(Trigger::kBackwardSaturation) == v1::TRIGGER_BACKWARD_SATURATION &&
              static_cast<int>(Trigger::kBackwardUnderflow) == v1::TRIGGER_BACKWARD_UNDERFLOW &&
              v1::Trigger_MIN == 0 && v1::Trigger_MAX == kNumTriggers - 1);

constexpr v1::Action ToProto(Action a) { return static_cast<v1::Action>(a); }
constexpr v1::EntryTreatment ToProto(EntryTreatment e) {
  return static_cast<v1::EntryTreatment>(e);
}
constexpr v1::Trigger ToProto(Trigger t) { return static_cast<v1::Trigger>(t); }
constexpr Action FromProto(v1::Action a) { return static_cast<Action>(a); }
constexpr EntryTreatment FromProto(v1::EntryTreatment e) { return static_cast<EntryTreatment>(e); }
constexpr Trigger FromProto(v1::Trigger t) { return static_cast<Trigger>(t); }

}  // namespace gnmr
