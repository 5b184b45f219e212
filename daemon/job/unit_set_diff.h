// What changed between two registrations of one rank: the check behind
// "same job id, different model" (docs/safety.md, "What a client set up
// wrong looks like").
//
// A rank that registers again (a reconnect, or a restarted trainer) must
// name the same units with the same shapes: unit ids, locks and history
// belong to that model. Order does not matter (ids follow names).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "daemon/topology/topology.h"

namespace gnmr {

// "" when `now` names the same units as `before` (names, shard index and
// count, and numel where both know it: 0 is "not stated"). Otherwise the
// differences, at most `max_items` of them and then a count of the rest:
//   unit 'fc1' numel 1024 vs 4096 before; unit 'foo' is new;
//   unit 'bar' is missing; unit 'w' shard 1/2 vs 0/2 before
std::string DescribeUnitSetChange(const std::vector<RankUnitSpec>& before,
                                  const std::vector<RankUnitSpec>& now, size_t max_items = 4);

}  // namespace gnmr
