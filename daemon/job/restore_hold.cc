// See restore_hold.h.
#include "daemon/job/restore_hold.h"

#include <algorithm>

namespace gnmr {

void RestoreHold::Heard(uint32_t rank, int64_t step) {
  if (rank >= world_size_) return;  // the job checked it; kept bounded anyway
  auto [it, inserted] = heard_.emplace(rank, step);
  if (!inserted) it->second = std::max(it->second, step);
}

std::optional<int64_t> RestoreHold::FirstStep(int lag) const {
  std::optional<int64_t> furthest;
  for (const auto& [rank, step] : heard_) {
    if (step >= 0) furthest = std::max(furthest.value_or(step), step);
  }
  if (!furthest) return std::nullopt;
  return *furthest + std::max(lag, 0) + 1 + kMargin;
}

}  // namespace gnmr
