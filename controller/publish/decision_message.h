// The wire forms a job sends on its ranks' Session streams. Each is built
// once and the same immutable object is queued to every rank, so all ranks
// receive identical bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "controller/controller.h"
#include "controller/types/decision.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

// A Decision of generation `generation` (with its next_lag).
std::shared_ptr<const v1::ServerMessage> DecisionMessage(const Decision& d, uint64_t generation);

// A live generation switch (GenerationStart.live, docs/safety.md, rule 3):
// the previous generation still plans the steps before `from_step`; the new
// one decides only steps after `decided_through`.
struct LiveSwitch {
  int64_t from_step = 0;
  int64_t decided_through = -1;
};

// GenerationStart: `next_lag` is the lag of the generation's next decision,
// `first_sequence` the sequence number of its first decision (made or to
// come). Without `live`, every decision of an older generation is void.
// `rebuilt`: the generation's first decision is the previous one's last,
// rebuilt (GenerationStart.rebuilt).
std::shared_ptr<const v1::ServerMessage> GenerationStartMessage(
    uint64_t generation, int32_t next_lag, uint64_t first_sequence,
    const std::optional<LiveSwitch>& live = std::nullopt, bool rebuilt = false);

// The decision of `c`'s last observed step as the ranks received it
// (observed and apply step, the set in force, global_skip, next_lag,
// sequence, hence the original digest), rebuilt from its state: the first
// decision of a generation that starts from an imported or restored state.
// False if `c` has made none.
bool RebuildLastDecision(const Controller& c, Decision* out);

}  // namespace gnmr
