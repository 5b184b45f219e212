#include "client/src/decision_cache.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>

#include "core/recovery_entry_codec.h"

namespace gnmr {
namespace {

Status Bad(const v1::Decision& d, const std::string& what) {
  return InvalidArgument("decision seq " + std::to_string(d.sequence()) + " (observed step " +
                         std::to_string(d.observed_step()) + "): " + what);
}

}  // namespace

void DecisionValidator::Reset(const std::vector<uint32_t>& daemon_ids) {
  local_of_.clear();
  for (size_t h = 0; h < daemon_ids.size(); ++h) {
    local_of_.emplace(daemon_ids[h], static_cast<UnitHandle>(h));
  }
}

StatusOr<CachedDecision> DecisionValidator::Validate(const v1::Decision& d) {
  if (d.observed_step() < 0) return Bad(d, "negative observed step");
  if (d.apply_step() < d.observed_step()) return Bad(d, "apply step before observed step");
  if (d.sequence() == 0) return Bad(d, "sequence 0");
  if (d.next_lag() < 0 || d.next_lag() > ControllerConfig::kMaxLag) {
    return Bad(d, "next_lag " + std::to_string(d.next_lag()) + " out of range");
  }
  // A unit this rank did not register is another rank's (a pipeline stage,
  // or an expert, held elsewhere): every rank gets the whole set, checks it
  // and its digest whole, and plans only its own units. admitted and
  // released name units of the set, so there is nothing of them to map.
  CachedDecision out;
  out.generation = d.generation();
  out.next_lag = d.next_lag();
  out.observed_step = d.observed_step();
  out.apply_step = d.apply_step();
  out.sequence = d.sequence();
  out.digest = d.digest();
  out.global_skip = d.global_skip();
  out.entries.reserve(d.recovery_size());
  scratch_.clear();
  for (const v1::RecoveryEntry& e : d.recovery()) {
    const std::string problem = RecoveryEntryProblem(e);
    if (!problem.empty()) return Bad(d, "unit " + std::to_string(e.unit_id()) + ": " + problem);
    RecoveryEntry r = RecoveryEntryFromProto(e);
    scratch_.push_back(r);  // daemon ids, for the digest
    auto it = local_of_.find(e.unit_id());
    if (it == local_of_.end()) continue;  // another rank's unit
    r.unit_id = it->second;
    out.entries.push_back(r);
  }
  if (DigestOf(d.apply_step(), scratch_, d.global_skip()) != d.digest()) {
    return Bad(d, "digest does not match its recovery set");
  }
  auto by_id = [](const RecoveryEntry& a, const RecoveryEntry& b) { return a.unit_id < b.unit_id; };
  auto same_id = [](const RecoveryEntry& a, const RecoveryEntry& b) {
    return a.unit_id == b.unit_id;
  };
  std::sort(scratch_.begin(), scratch_.end(), by_id);  // digested: free to reorder
  if (std::adjacent_find(scratch_.begin(), scratch_.end(), same_id) != scratch_.end()) {
    return Bad(d, "a unit appears twice");
  }
  std::sort(out.entries.begin(), out.entries.end(), by_id);
  return out;
}

bool DecisionCache::StartGeneration(uint64_t g, int32_t first_lag, uint64_t first_sequence) {
  if (g < generation_) return false;
  if (g == generation_) {
    if (decisions_.empty()) first_lag_ = first_lag;
    if (first_sequence != 0) first_sequence_ = first_sequence;
    return false;
  }
  generation_ = g;
  first_lag_ = first_lag;
  first_sequence_ = first_sequence;
  decisions_.clear();
  return true;
}

bool DecisionCache::AdoptGeneration(uint64_t g, int32_t first_lag) {
  if (g == generation_) return false;
  generation_ = g;
  first_lag_ = first_lag;
  first_sequence_ = 0;
  decisions_.clear();
  return true;
}

DecisionCache::Insert DecisionCache::Add(CachedDecision d) {
  if (d.generation < generation_) return Insert::kStale;
  if (d.generation > generation_) {
    // A decision that starts a generation (an import's rebuilt decision)
    // is its first.
    generation_ = d.generation;
    first_lag_ = d.next_lag;
    first_sequence_ = d.sequence;
    decisions_.clear();
  }
  // Usually the newest: appended. Re-sent history and gaps filled late
  // find their place by sequence.
  auto it = decisions_.end();
  while (it != decisions_.begin() && std::prev(it)->sequence >= d.sequence) --it;
  if (it != decisions_.end() && it->sequence == d.sequence) {
    return it->digest == d.digest && it->apply_step == d.apply_step ? Insert::kDuplicate
                                                                    : Insert::kConflict;
  }
  if (it == decisions_.begin() && decisions_.size() >= kCapacity) {
    return Insert::kDuplicate;  // older than everything held: of no use
  }
  decisions_.insert(it, std::move(d));
  if (decisions_.size() > kCapacity) decisions_.pop_front();
  return Insert::kStored;
}

const CachedDecision* DecisionCache::Newest() const {
  return decisions_.empty() ? nullptr : &decisions_.back();
}

int32_t DecisionCache::NextLag() const {
  return decisions_.empty() ? first_lag_ : decisions_.back().next_lag;
}

const CachedDecision* DecisionCache::Covering(int64_t step) const {
  if (decisions_.empty()) return nullptr;
  if (decisions_.back().apply_step <= step) return &decisions_.back();
  // Walk back to the decision whose successor is the first to apply after
  // `step`; both must be held, with contiguous sequence numbers.
  for (size_t i = decisions_.size() - 1; i-- > 0;) {
    const CachedDecision& d = decisions_[i];
    const CachedDecision& next = decisions_[i + 1];
    if (d.apply_step > step) continue;
    if (next.sequence != d.sequence + 1 || next.apply_step <= step) return nullptr;
    return &d;
  }
  return nullptr;
}

bool DecisionCache::MayMiss(int64_t step) const {
  if (decisions_.empty()) return false;  // nothing of this generation seen
  const CachedDecision& oldest = decisions_.front();
  if (oldest.apply_step <= step) return true;  // held, but not the covering one
  return first_sequence_ == 0 ? false : oldest.sequence > first_sequence_;
}

}  // namespace gnmr
