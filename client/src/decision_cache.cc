#include "client/src/decision_cache.h"

#include <algorithm>
#include <cmath>
#include <string>

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
  has_sequence_ = false;
  last_sequence_ = 0;
}

StatusOr<CachedDecision> DecisionValidator::Validate(const v1::Decision& d) {
  if (d.observed_step() < 0) return Bad(d, "negative observed step");
  if (d.apply_step() < d.observed_step()) return Bad(d, "apply step before observed step");
  if (has_sequence_ && d.sequence() <= last_sequence_) {
    return Bad(d, "sequence not increasing (last " + std::to_string(last_sequence_) + ")");
  }
  auto known = [this](uint32_t id) { return local_of_.count(id) > 0; };
  for (uint32_t id : d.admitted()) {
    if (!known(id)) return Bad(d, "admits unknown unit " + std::to_string(id));
  }
  for (uint32_t id : d.released()) {
    if (!known(id)) return Bad(d, "releases unknown unit " + std::to_string(id));
  }
  CachedDecision out;
  out.observed_step = d.observed_step();
  out.apply_step = d.apply_step();
  out.sequence = d.sequence();
  out.digest = d.digest();
  out.global_skip = d.global_skip();
  out.entries.reserve(d.recovery_size());
  scratch_.clear();
  for (const v1::RecoveryEntry& e : d.recovery()) {
    auto it = local_of_.find(e.unit_id());
    if (it == local_of_.end()) return Bad(d, "unknown unit " + std::to_string(e.unit_id()));
    const std::string unit = "unit " + std::to_string(e.unit_id());
    if (e.since() >= e.until()) return Bad(d, unit + ": since >= until");
    if (e.action() < v1::ACTION_PROMOTE || e.action() > v1::ACTION_RESET_STATE) {
      return Bad(d, unit + ": unknown action " + std::to_string(e.action()));
    }
    if (e.entry() < v1::ENTRY_NONE || e.entry() > v1::ENTRY_SKIP) {
      return Bad(d, unit + ": unknown entry treatment " + std::to_string(e.entry()));
    }
    if (!(e.clip_min_scale() >= 0.0 && e.clip_min_scale() <= 1.0)) {
      return Bad(d, unit + ": clip_min_scale outside [0, 1]");
    }
    if (!(e.ref_norm() >= 0.0) || std::isinf(e.ref_norm())) {
      return Bad(d, unit + ": ref_norm is not a finite non-negative number");
    }
    RecoveryEntry r;
    r.unit_id = e.unit_id();
    r.action = static_cast<Action>(e.action());
    r.entry = static_cast<EntryTreatment>(e.entry());
    r.since = e.since();
    r.until = e.until();
    r.clip_min_scale = e.clip_min_scale();
    r.ref_norm = e.ref_norm();
    scratch_.push_back(r);  // daemon ids, for the digest
    r.unit_id = it->second;
    out.entries.push_back(r);
  }
  std::sort(out.entries.begin(), out.entries.end(),
            [](const RecoveryEntry& a, const RecoveryEntry& b) { return a.unit_id < b.unit_id; });
  for (size_t i = 1; i < out.entries.size(); ++i) {
    if (out.entries[i].unit_id == out.entries[i - 1].unit_id) {
      return Bad(d, "a unit appears twice");
    }
  }
  if (DigestOf(d.apply_step(), scratch_, d.global_skip()) != d.digest()) {
    return Bad(d, "digest does not match its recovery set");
  }
  has_sequence_ = true;
  last_sequence_ = d.sequence();
  return out;
}

void DecisionCache::Insert(CachedDecision d) {
  newest_apply_ = std::max(newest_apply_, d.apply_step);
  decisions_.push_back(std::move(d));
  if (decisions_.size() > kCapacity) decisions_.pop_front();
}

bool DecisionCache::HasApply(int64_t step) const {
  for (auto it = decisions_.rbegin(); it != decisions_.rend(); ++it) {
    if (it->apply_step == step) return true;
  }
  return false;
}

int64_t DecisionCache::NewestApply() const { return newest_apply_; }

int64_t DecisionCache::NewestObserved() const {
  return decisions_.empty() ? -1 : decisions_.back().observed_step;
}

void DecisionCache::Fill(int64_t step, Plan* out) const {
  out->step = step;
  out->has_decision = false;
  out->observed_step = -1;
  out->apply_step = -1;
  out->sequence = 0;
  out->digest = 0;
  out->global_skip = false;
  out->entries.clear();
  for (auto it = decisions_.rbegin(); it != decisions_.rend(); ++it) {
    const CachedDecision& d = *it;
    if (d.apply_step > step) continue;
    out->has_decision = true;
    out->observed_step = d.observed_step;
    out->apply_step = d.apply_step;
    out->sequence = d.sequence;
    out->digest = d.digest;
    out->global_skip = d.global_skip && d.apply_step == step;
    for (const RecoveryEntry& e : d.entries) {
      if (!e.InForceAt(step)) continue;
      PlanEntry p;
      p.unit = e.unit_id;
      p.action = e.action;
      p.entry = e.entry;
      p.first_step = step == e.since;
      p.since = e.since;
      p.until = e.until;
      p.ref_norm = e.ref_norm;
      p.clip_min_scale = e.clip_min_scale;
      out->entries.push_back(p);
    }
    return;
  }
}

}  // namespace gnmr
