// What-if replay: one pass over a recorded trace through several controller
// configs at once, for tuning offline (`gnmrctl replay --variant`,
// docs/replay.md, "What-if tables").
//
// Every step the reader yields is observed by one controller per variant,
// each exactly as `gnmrctl replay` (and gnmrd) would run it; the trace is
// read once however many variants there are. The result is each variant's
// ControllerStats: admissions by trigger, denials, releases, global skips,
// recovery fraction and peak units in recovery.
//
// A variant is written `key=value[,key=value...]` (the --set syntax, several
// at once): commas inside [], {} or quotes do not split, so
// `actions=[{pattern: "*.fc1", action: clip}],max_o=2` is two overrides.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "controller/controller.h"
#include "controller/replay/replay.h"
#include "controller/replay/trace_reader.h"
#include "gnmr/status.h"

namespace gnmr {

struct WhatIfVariant {
  std::string label;  // how the table names it, e.g. "tau=3,max_o=2"
  ControllerConfig config;
};

struct WhatIfResult {
  std::string label;
  ControllerStats stats;
};

struct WhatIfSummary {
  std::string trace;
  uint64_t steps = 0;
  uint64_t units = 0;
  int64_t first_step = -1;
  int64_t last_step = -1;
  std::vector<WhatIfResult> results;  // in the order of the variants
};

// The overrides of one variant: `spec` split at its top-level commas.
// InvalidArgument for an empty spec or part, or unbalanced brackets/quotes.
StatusOr<std::vector<std::string>> SplitVariant(std::string_view spec);

// Replays `reader` (already opened) through one fresh controller per
// variant. Trace errors come back as "FILE:LINE: ...".
StatusOr<WhatIfSummary> RunWhatIf(TraceReader* reader, const std::vector<WhatIfVariant>& variants,
                                  const std::function<void(const ReplayProgress&)>& on_step = {});

}  // namespace gnmr
