#include "client/src/forward_stats.h"

#include <algorithm>

namespace gnmr {
namespace {

// Gives r `n` zeroed forward columns (no allocation when it had them).
void ZeroColumns(Report* r, size_t n) {
  r->fwd_sumsq.assign(n, 0.0);
  r->fwd_amax.assign(n, 0.0);
  r->fwd_saturated.assign(n, 0);
  r->fwd_zeros.assign(n, 0);
  r->fwd_numel.assign(n, 0);
  r->fwd_order.assign(n, 0);
  r->fwd_units = 0;
  r->fwd_blocks.assign(n, 0);
  r->fwd_saturated_blocks.assign(n, 0);
  r->fwd_dead_blocks.assign(n, 0);
  r->fwd_scale_clamps.assign(n, 0);
  r->fwd_block_units = 0;
  r->fwd_source_numel.assign(n, 0);
  r->fwd_underflow.assign(n, 0);
  r->fwd_error_sumsq.assign(n, 0.0);
  r->fwd_source_sumsq.assign(n, 0.0);
  r->fwd_source_units = 0;
}

}  // namespace

void ForwardAccumulator::Resize(size_t units) {
  sumsq_.assign(units, 0.0);
  amax_.assign(units, 0.0);
  saturated_.assign(units, 0);
  zeros_.assign(units, 0);
  numel_.assign(units, 0);
  blocks_.assign(units, 0);
  saturated_blocks_.assign(units, 0);
  dead_blocks_.assign(units, 0);
  scale_clamps_.assign(units, 0);
  source_numel_.assign(units, 0);
  underflow_.assign(units, 0);
  error_sumsq_.assign(units, 0.0);
  source_sumsq_.assign(units, 0.0);
  touched_.clear();
  touched_.reserve(units);
}

void ForwardAccumulator::Add(uint32_t unit, const UnitStats& s) {
  // A call with no elements leaves no row: fwd_numel 0 means "none".
  if (s.numel == 0) return;
  if (numel_[unit] == 0) touched_.push_back(unit);
  sumsq_[unit] += s.sumsq;  // NaN/Inf propagate: the controller skips the unit's forward rules
  amax_[unit] = std::max(amax_[unit], s.amax);
  saturated_[unit] += s.saturated;
  zeros_[unit] += s.zeros;
  numel_[unit] += s.numel;
}

UnitStats ElementStats(const BlockStats& b) {
  UnitStats s;
  s.sumsq = b.sumsq;
  s.amax = b.amax;
  s.saturated = b.saturated;
  s.zeros = b.zero_codes;
  s.numel = b.numel;
  return s;
}

void ForwardAccumulator::AddBlocks(uint32_t unit, const BlockStats& b, uint64_t source_numel) {
  Add(unit, ElementStats(b));
  if (b.numel == 0) return;
  blocks_[unit] += b.blocks;
  saturated_blocks_[unit] += b.saturated_blocks;
  dead_blocks_[unit] += b.dead_blocks;
  scale_clamps_[unit] += b.scale_clamps;
  if (!b.has_source || source_numel == 0) return;
  source_numel_[unit] += source_numel;
  underflow_[unit] += b.underflow;
  error_sumsq_[unit] += b.error_sumsq;
  source_sumsq_[unit] += b.source_sumsq;
}

void ForwardAccumulator::MoveInto(Report* r) {
  // A recycled slot: clear what it carried.
  if (r->fwd_units > 0) ZeroColumns(r, r->fwd_numel.size());
  // Added to zeros: 0 + x is x, bit for bit (a sumsq is never -0).
  MergeInto(r);
}

void ForwardAccumulator::MergeInto(Report* r) {
  if (touched_.empty()) return;
  const size_t n = numel_.size();
  if (r->fwd_numel.size() != n) ZeroColumns(r, n);  // the slot's first forward columns
  for (const uint32_t u : touched_) {               // first-call order
    if (r->fwd_numel[u] == 0) r->fwd_order[u] = static_cast<uint32_t>(++r->fwd_units);
    r->fwd_sumsq[u] += sumsq_[u];
    r->fwd_amax[u] = std::max(r->fwd_amax[u], amax_[u]);
    r->fwd_saturated[u] += saturated_[u];
    r->fwd_zeros[u] += zeros_[u];
    r->fwd_numel[u] += numel_[u];
    if (blocks_[u] > 0) {
      if (r->fwd_blocks[u] == 0) ++r->fwd_block_units;
      r->fwd_blocks[u] += blocks_[u];
      r->fwd_saturated_blocks[u] += saturated_blocks_[u];
      r->fwd_dead_blocks[u] += dead_blocks_[u];
      r->fwd_scale_clamps[u] += scale_clamps_[u];
    }
    if (source_numel_[u] > 0) {
      if (r->fwd_source_numel[u] == 0) ++r->fwd_source_units;
      r->fwd_source_numel[u] += source_numel_[u];
      r->fwd_underflow[u] += underflow_[u];
      r->fwd_error_sumsq[u] += error_sumsq_[u];
      r->fwd_source_sumsq[u] += source_sumsq_[u];
    }
  }
  Clear();
}

void ForwardAccumulator::Clear() {
  for (const uint32_t u : touched_) {
    sumsq_[u] = 0.0;
    amax_[u] = 0.0;
    saturated_[u] = 0;
    zeros_[u] = 0;
    numel_[u] = 0;
    blocks_[u] = 0;
    saturated_blocks_[u] = 0;
    dead_blocks_[u] = 0;
    scale_clamps_[u] = 0;
    source_numel_[u] = 0;
    underflow_[u] = 0;
    error_sumsq_[u] = 0.0;
    source_sumsq_[u] = 0.0;
  }
  touched_.clear();
}

}  // namespace gnmr
