// The event log's JSON Lines form lives in controller_io/event_json.h, shared
// with the client's local mode; the store names it as it always has.
#pragma once

#include "controller_io/event_json.h"

namespace gnmr {
namespace store {

using ::gnmr::AppendEventJsonLine;
using ::gnmr::kMaxEventLineBytes;
using ::gnmr::ParseEventJsonLine;
using ::gnmr::SanitizeUtf8;

}  // namespace store
}  // namespace gnmr
