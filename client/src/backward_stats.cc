#include "client/src/backward_stats.h"

namespace gnmr {
namespace {

// Gives r `n` zeroed backward columns (no allocation when it had them).
void ZeroColumns(Report* r, size_t n) {
  r->bwd_sumsq.assign(n, 0.0);
  r->bwd_saturated.assign(n, 0);
  r->bwd_zeros.assign(n, 0);
  r->bwd_numel.assign(n, 0);
  r->bwd_order.assign(n, 0);
  r->bwd_units = 0;
}

}  // namespace

void BackwardAccumulator::Resize(size_t units) {
  sumsq_.assign(units, 0.0);
  saturated_.assign(units, 0);
  zeros_.assign(units, 0);
  numel_.assign(units, 0);
  touched_.clear();
  touched_.reserve(units);
}

void BackwardAccumulator::Add(uint32_t unit, const UnitStats& s) {
  // A call with no elements leaves no row: bwd_numel 0 means "none".
  if (s.numel == 0) return;
  if (numel_[unit] == 0) touched_.push_back(unit);
  sumsq_[unit] += s.sumsq;  // NaN/Inf propagate: the controller skips the unit's backward rules
  saturated_[unit] += s.saturated;
  zeros_[unit] += s.zeros;
  numel_[unit] += s.numel;
}

void BackwardAccumulator::MoveInto(Report* r) {
  const size_t n = numel_.size();
  // A recycled slot clears what it carried; a slot's first backward
  // columns are sized here.
  if (r->bwd_units > 0 || (!touched_.empty() && r->bwd_numel.size() != n)) ZeroColumns(r, n);
  if (touched_.empty()) return;
  for (const uint32_t u : touched_) {  // first-call order
    r->bwd_order[u] = static_cast<uint32_t>(++r->bwd_units);
    r->bwd_sumsq[u] = sumsq_[u];
    r->bwd_saturated[u] = saturated_[u];
    r->bwd_zeros[u] = zeros_[u];
    r->bwd_numel[u] = numel_[u];
    sumsq_[u] = 0.0;
    saturated_[u] = zeros_[u] = numel_[u] = 0;
  }
  touched_.clear();
}

}  // namespace gnmr
