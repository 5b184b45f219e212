// One event of a job's event log as a JSON Lines record, and back: the
// daemon's event log (daemon/store/event_log.h) and the events file of the
// client's local mode (client/local/) write the same lines.
//
// A line carries the job id and every field of gnmr.v1.Event, in proto
// order, with action and trigger as their config names ("promote",
// "nonfinite"):
//
//   {"job_id":"j1","observed_step":120,"apply_step":121,"kind":"admission",
//    "unit":"layers.3.mlp.fc1","action":"promote","trigger":"gnmr",
//    "gnmr":3.1,"delta":0.4,"norm":12.5,"mu":4.0,"until":141,"detail":"",
//    "time_unix":1767225600.25,"fwd_ratio":1.2,"saturation_ratio":1,
//    "underflow_ratio":0.01}
//
// A line written before the forward channel's figures existed lacks their
// keys; they read as 0, as in any event without forward statistics.
// Non-finite numbers are written as null (JSON has no NaN) and read back
// as NaN. Strings are made valid UTF-8 (bad bytes become U+FFFD) and capped
// (job id and unit 256 bytes, kind 64, detail 1024), so no line exceeds
// kMaxEventLineBytes and every line is valid JSON.
#pragma once

#include <string>
#include <string_view>

#include "gnmr/status.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

inline constexpr size_t kMaxEventLineBytes = 16 * 1024;

// Appends the line, '\n' included.
void AppendEventJsonLine(std::string_view job_id, const v1::Event& event, std::string* out);

// Parses a line written by AppendEventJsonLine (with or without its '\n').
// Unknown keys are ignored, missing ones keep their defaults; InvalidArgument
// if it is not a JSON object of the expected types.
StatusOr<v1::Event> ParseEventJsonLine(std::string_view line);

// `s` as valid UTF-8 of at most `max_bytes` bytes: invalid bytes become
// U+FFFD and the cut falls on a character boundary.
std::string SanitizeUtf8(std::string_view s, size_t max_bytes);

}  // namespace gnmr
