#include "client/src/decision_cache.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>

#include "controller/types/plan_coverage.h"
#include "controller/types/recovery_entry_codec.h"

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

// ------------------------------------------------------ GenerationDecisions

GenerationDecisions::Insert GenerationDecisions::Add(CachedDecision d) {
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

const CachedDecision* GenerationDecisions::Newest() const {
  return decisions_.empty() ? nullptr : &decisions_.back();
}

int32_t GenerationDecisions::NextLag() const {
  return decisions_.empty() ? first_lag_ : decisions_.back().next_lag;
}

const CachedDecision* GenerationDecisions::Covering(int64_t step) const {
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

bool GenerationDecisions::MayMiss(int64_t step) const {
  // Nothing of this generation seen: nothing missed, unless it continues an
  // older one's steps (a rebuilt first decision, not here yet).
  if (decisions_.empty()) return rebuilt_;
  const CachedDecision& oldest = decisions_.front();
  if (oldest.apply_step <= step) return true;  // held, but not the covering one
  if (first_sequence_ == 0) return false;
  // The generation's first decision held: before it, nothing of this
  // generation; but a rebuilt one continues an older generation's steps.
  return oldest.sequence > first_sequence_ || rebuilt_;
}

// ------------------------------------------------------------ DecisionCache

DecisionCache::Start DecisionCache::StartGeneration(uint64_t g, int32_t first_lag,
                                                    uint64_t first_sequence,
                                                    const std::optional<LiveSwitch>& live,
                                                    bool rebuilt) {
  GenerationDecisions& cur = gens_.back();
  if (g == cur.generation_) {
    if (cur.decisions_.empty()) cur.first_lag_ = first_lag;
    if (first_sequence != 0) cur.first_sequence_ = first_sequence;
    cur.rebuilt_ = cur.rebuilt_ || rebuilt;
    if (cur.announced_) return Start::kKept;
    // The start of a generation a Register response named: it says what
    // the retired ones sent before it are worth.
    cur.announced_ = true;
    if (live) {
      cur.from_step_ = live->from_step;
      cur.decided_through_ = live->decided_through;
      return Start::kKept;
    }
    gens_.erase(gens_.begin(), gens_.end() - 1);
    return Start::kVoided;
  }
  if (g < cur.generation_) {
    // A retired generation, sent before the current one to a stream that
    // attached after a live switch: kept (in order) until the current
    // one's start says whether it plans anything. Under a generation
    // started at once, an older one plans nothing: ignored.
    if (cur.announced_ && !cur.from_step_) return Start::kKept;
    auto it = gens_.begin();
    while (it != gens_.end() && it->generation_ < g) ++it;
    if (it != gens_.end() && it->generation_ == g) return Start::kKept;
    if (it == gens_.begin() && gens_.size() > kRetiredKept) return Start::kKept;  // too old
    GenerationDecisions retired(g, first_lag, first_sequence);
    retired.rebuilt_ = rebuilt;
    if (live) {
      retired.from_step_ = live->from_step;
      retired.decided_through_ = live->decided_through;
    }
    gens_.insert(it, std::move(retired));
    while (gens_.size() > kRetiredKept + 1) gens_.pop_front();
    return Start::kKept;
  }
  GenerationDecisions next(g, first_lag, first_sequence);
  next.rebuilt_ = rebuilt;
  if (!live) {
    gens_.clear();
    gens_.push_back(std::move(next));
    return Start::kVoided;
  }
  next.from_step_ = live->from_step;
  next.decided_through_ = live->decided_through;
  // A live generation that decided nothing plans no step once its
  // successor starts where it did: replaced, not retired.
  if (cur.decisions_.empty() && cur.from_step_ && live->from_step <= *cur.from_step_) {
    gens_.pop_back();
  }
  gens_.push_back(std::move(next));
  while (gens_.size() > kRetiredKept + 1) gens_.pop_front();
  return Start::kKept;
}

bool DecisionCache::AdoptGeneration(uint64_t g, int32_t first_lag) {
  if (g == generation()) return false;
  gens_.clear();
  gens_.emplace_back(g, first_lag);
  gens_.back().announced_ = false;
  return true;
}

DecisionCache::Insert DecisionCache::Add(CachedDecision d) {
  if (d.generation > generation()) {
    // A decision that starts a generation (an import's rebuilt decision)
    // is its first.
    gens_.clear();
    gens_.emplace_back(d.generation, d.next_lag, d.sequence);
  }
  for (auto it = gens_.rbegin(); it != gens_.rend(); ++it) {
    if (it->generation_ != d.generation) continue;
    it->announced_ = true;  // a decision of it: the generation exists
    return it->Add(std::move(d));
  }
  return Insert::kStale;
}

DecisionCache::Planner DecisionCache::PlannerOf(int64_t step,
                                                const GenerationDecisions** retired) const {
  // The newest generation whose range holds `step`: one from a live switch
  // plans its from_step and later, one started at once every step.
  for (size_t i = gens_.size(); i-- > 0;) {
    const GenerationDecisions& g = gens_[i];
    if (g.from_step_ && *g.from_step_ > step) continue;
    if (i + 1 == gens_.size()) return Planner::kCurrent;
    if (retired) *retired = &g;
    return Planner::kRetired;
  }
  return Planner::kGone;  // planned by a generation no longer held
}

std::optional<int64_t> DecisionCache::DecidedThrough() const {
  const GenerationDecisions& cur = current();
  std::optional<int64_t> through;
  if (cur.from_step_) through = cur.decided_through_;
  if (const CachedDecision* newest = cur.Newest()) {
    through = through ? std::max(*through, newest->observed_step) : newest->observed_step;
  }
  return through;
}

int64_t DecisionCache::HeldThrough() const {
  int64_t through = -1;
  for (const GenerationDecisions& g : gens_) {
    if (const CachedDecision* d = g.Newest()) {
      through = std::max(through, LastPlannableStep(d->observed_step, d->apply_step, d->next_lag));
    }
  }
  return through;
}

}  // namespace gnmr
