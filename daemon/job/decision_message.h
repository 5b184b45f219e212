// The wire forms a job sends on its ranks' Session streams. Each is built
// once and the same immutable object is queued to every rank, so all ranks
// receive identical bytes.
#pragma once

#include <cstdint>
#include <memory>

#include "core/decision.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

// A Decision of generation `generation` (with its next_lag).
std::shared_ptr<const v1::ServerMessage> DecisionMessage(const Decision& d, uint64_t generation);

// GenerationStart: every decision of an older generation is void;
// `next_lag` is the lag of the generation's next decision, `first_sequence`
// the sequence number of its first decision (made or to come).
std::shared_ptr<const v1::ServerMessage> GenerationStartMessage(uint64_t generation,
                                                                int32_t next_lag,
                                                                uint64_t first_sequence);

}  // namespace gnmr
