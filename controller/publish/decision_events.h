// The events a decision makes (admission, release, denial, global_skip), as
// the daemon's event log and the client's local mode write them: one
// builder, so both list the same events with the same fields.
#pragma once

#include <string>
#include <vector>

#include "controller/controller.h"
#include "controller/types/decision.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

// Appends the events of `d`, made by `controller` (unit names, and the
// evaluation a denial refers to), stamped `time_unix`. Nothing for a
// decision without changes.
void AppendDecisionEvents(const Decision& d, const Controller& controller, double time_unix,
                          std::vector<v1::Event>* out);

// An event of the job itself (a generation, an import, a failure).
v1::Event JobEvent(v1::EventKind kind, int64_t observed_step, double time_unix, std::string detail);

}  // namespace gnmr
