// ReportToStepStats: a report slot (outbox.h) in its wire form.
#pragma once

#include <cstdint>
#include <vector>

#include "client/src/outbox.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

// Fills `s` (reused: every column is cleared first) from `r`. `unit_ids`:
// the daemon's id of each unit handle; `handles_by_id`: the handles in
// unit id order (the sparse form's order). `pipeline_stage` goes with the
// forward columns (StepStats.fwd_stage).
void ReportToStepStats(const Report& r, const std::vector<uint32_t>& unit_ids,
                       const std::vector<uint32_t>& handles_by_id, uint32_t pipeline_stage,
                       v1::StepStats* s);

}  // namespace gnmr
