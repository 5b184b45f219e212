#include <cstdint>
#include <vector>

#include "controller/types/decision.h"

namespace gnmr {
namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

void Mix(uint64_t* h, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    *h ^= (value >> (8 * i)) & 0xffu;
    *h *= kFnvPrime;
  }
}

}  // namespace

uint64_t DigestOf(int64_t apply_step, const std::vector<RecoveryEntry>& set, bool global_skip) {
  uint64_t h = kFnvOffset;
  Mix(&h, static_cast<uint64_t>(apply_step), 8);
  Mix(&h, global_skip ? 1 : 0, 1);
  Mix(&h, set.size(), 4);
  for (const RecoveryEntry& e : set) {
    Mix(&h, e.unit_id, 4);
    Mix(&h, static_cast<uint64_t>(e.action), 1);
    Mix(&h, static_cast<uint64_t>(e.entry), 1);
    Mix(&h, static_cast<uint64_t>(e.since), 8);
    Mix(&h, static_cast<uint64_t>(e.until), 8);
    // Not denied_clip: it changes nothing a rank applies (a one-step clip
    // either way), and a client from before the marker recomputes the same
    // digest, so it accepts and applies a set with denied clips too.
  }
  return h;
}

}  // namespace gnmr
