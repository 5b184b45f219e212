// See restore_hold.h.
#include "daemon/job/restore_hold.h"

#include <algorithm>

namespace gnmr {

void RestoreHold::Registered(uint32_t rank, std::optional<int64_t> held_through) {
  if (rank >= world_size_ || !held_through) return;  // the job checked the rank
  RankState& s = ranks_[rank];
  const bool was_known = s.said || s.heard;
  s.held_through = s.said ? std::max(s.held_through, *held_through) : *held_through;
  s.said = true;
  Count(was_known, s);
}

void RestoreHold::Heard(uint32_t rank, int64_t step) {
  if (rank >= world_size_) return;
  RankState& s = ranks_[rank];
  const bool was_known = s.said || s.heard;
  s.step = s.heard ? std::max(s.step, step) : step;
  s.heard = true;
  Count(was_known, s);
}

std::optional<int64_t> RestoreHold::FirstStep(int lag) const {
  lag = std::max(lag, 0);
  // The newest step any known rank can have planned with a lost decision.
  std::optional<int64_t> planned;
  for (const auto& [rank, s] : ranks_) {
    int64_t p = -1;
    if (s.said) {
      p = s.held_through;  // exact; a later report adds nothing
    } else if (s.heard && s.step >= 0) {
      p = s.step + lag + kMargin;
    }
    if (p >= 0) planned = std::max(planned.value_or(p), p);
  }
  if (!planned) return std::nullopt;
  return *planned - lag + 1;  // its decision applies at *planned + 1
}

}  // namespace gnmr
