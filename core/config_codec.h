// ControllerConfig <-> its wire form (gnmr.v1.ControllerConfig), and the
// range checks of the wire enums. What the client needs of the controller's
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

}  // namespace gnmr
