// Which of a job's units an Admin.ListUnits call (gnmrctl units) asks for,
// and the page that answers it.
//
// A job may have tens of thousands of units (an MoE job makes every expert
// matrix one), more than an operator reads or one answer should carry. So
// the daemon filters (a glob over names, a state), orders (unit id, or the
// highest last GNMR first) and pages (offset, limit, and a byte budget that
// keeps an answer under max_message_bytes) before it builds a UnitInfo:
// a query costs one pass over the job's names under the job's lock, and
// UnitInfo only for the units it returns.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gnmr/status.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

struct UnitQuery {
  std::string pattern;  // glob over unit names (common/glob.h); empty: every unit
  v1::UnitState state = v1::UNIT_STATE_UNSPECIFIED;  // unspecified: any state
  uint32_t top = 0;     // > 0: only the `top` matching units with the highest last GNMR
                        // (NaN counts as 0), highest first; 0: every matching unit, id order
  uint32_t offset = 0;  // skip this many of the ordered units
  uint32_t limit = 0;   // at most this many units (0: no limit)
  // The page ends before its encoded units pass this many bytes (0: no
  // limit); a page holds at least one unit.
  uint64_t max_bytes = 0;
};

// Longest pattern accepted, as for a config's action rules.
constexpr size_t kMaxUnitPatternBytes = 1024;

// The query of a request, checked: the pattern is printable ASCII without
// space (no unit name has another byte) and at most kMaxUnitPatternBytes,
// the state a known one. INVALID_ARGUMENT naming the field otherwise.
StatusOr<UnitQuery> UnitQueryFromRequest(const v1::ListUnitsRequest& req, uint64_t max_bytes);

struct UnitPage {
  std::vector<v1::UnitInfo> units;
  uint32_t matched = 0;      // units matching pattern and state (before top and paging)
  uint32_t next_offset = 0;  // the offset of the next page; 0: this page is the last
};

}  // namespace gnmr
