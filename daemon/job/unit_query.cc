#include "daemon/job/unit_query.h"

namespace gnmr {

StatusOr<UnitQuery> UnitQueryFromRequest(const v1::ListUnitsRequest& req, uint64_t max_bytes) {
  UnitQuery q;
  if (req.pattern().size() > kMaxUnitPatternBytes) {
    return InvalidArgument("pattern is longer than " + std::to_string(kMaxUnitPatternBytes) +
                           " bytes");
  }
  for (const char ch : req.pattern()) {
    if (ch < 0x21 || ch > 0x7e) {
      return InvalidArgument(
          "pattern has a byte outside printable ASCII 0x21..0x7e (no unit name has one)");
    }
  }
  if (!v1::UnitState_IsValid(req.state())) {
    return InvalidArgument("state " + std::to_string(req.state()) + " is not a unit state");
  }
  q.pattern = req.pattern();
  q.state = req.state();
  q.top = req.top();
  q.offset = req.offset();
  q.limit = req.limit();
  q.max_bytes = max_bytes;
  return q;
}

}  // namespace gnmr
