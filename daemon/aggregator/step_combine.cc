// Closing a step: the reports of its ranks become one UnitSample per unit
// (docs/statistics.md, "Combination in gnmrd"). A unit's shards are summed
// and its data-parallel replicas averaged (sums of squares) or summed
// (counts); a unit some shard of which no report covered is incomplete
// and is not sent to the controller; a covered unit no report listed was
// inactive. One pass over the reports and one over the listed units: a
// step of 16k ranks costs what its reports hold, not ranks x units.
#include <algorithm>
#include <cstdint>

#include "daemon/aggregator/step_aggregator.h"

namespace gnmr {
namespace {

// Forward counts come from untrusted reports: summed over replicas and
// shards they saturate instead of wrapping, which keeps saturated <= numel
// and zeros <= numel (each report was checked), as the controller requires.
uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

// Forward order over replicas and shards: the earliest key any of them
// reported (0, unknown, only where none did).
uint64_t EarliestOrder(uint64_t a, uint64_t b) {
  if (a == 0) return b;
  return b == 0 ? a : std::min(a, b);
}

}  // namespace

void StepAggregator::Combine(int64_t step, OpenStep& open, ClosedStep* out) {
  out->step = step;
  out->first_report = open.first_report;
  out->last_report = open.last_report;
  out->ranks_reported = static_cast<uint32_t>(open.reports.size());
  out->ranks_expected = static_cast<uint32_t>(Expected().size());
  out->samples.clear();
  out->incomplete_units = 0;
  out->omitted_units = 0;

  const bool all_sparse = AccumulateReports(open);
  const bool fast = MarkCoverage(open, all_sparse);
  SortListed();
  uint32_t listed_not_held = 0;  // fast path: listed units of units_not_held()
  for (const uint32_t id : listed_) {
    bool complete = true;
    bool held = true;
    const UnitSample sample = CombineUnit(id, fast, &complete, &held);
    if (!held) ++listed_not_held;
    if (complete) {
      out->samples.push_back(sample);
    } else {
      ++out->incomplete_units;
    }
  }
  // The units no report listed: inactive if covered, else incomplete.
  const uint32_t unlisted_incomplete = CountUnlistedIncomplete(fast, listed_not_held);
  out->incomplete_units += unlisted_incomplete;
  out->omitted_units =
      static_cast<uint32_t>(topology_->num_units() - listed_.size() - unlisted_incomplete);
}

bool StepAggregator::AccumulateReports(const OpenStep& open) {
  if (acc_.size() < topology_->num_slots()) acc_.resize(topology_->num_slots(), SlotAcc{});
  if (unit_epoch_.size() < topology_->num_units()) {
    unit_epoch_.resize(topology_->num_units(), 0);
  }
  ++epoch_;
  listed_.clear();
  bool all_sparse = true;
  for (const auto& [rank, r] : open.reports) {  // rank order: deterministic
    all_sparse = all_sparse && r.sparse;
    const size_t n = r.slots.size();
    for (size_t i = 0; i < n; ++i) {
      const uint32_t unit = topology_->unit_of_slot(r.slots[i]);
      if (unit_epoch_[unit] != epoch_) {
        unit_epoch_[unit] = epoch_;
        listed_.push_back(unit);
      }
      SlotAcc& a = acc_[r.slots[i]];
      a.sumsq += r.sumsq[i];
      if (!r.amax.empty() && r.amax[i] > a.amax) a.amax = r.amax[i];
      if (!r.nonfinite.empty()) a.nonfinite += r.nonfinite[i];
      if (!r.zeros.empty()) a.zeros += r.zeros[i];
      ++a.replicas;
      if (!r.forward.empty() && r.forward[i].numel > 0) {
        AddReplicaForward(r.forward[i], &a.fwd);
        ++a.fwd_replicas;
      }
      if (!r.backward.empty() && r.backward[i].numel > 0) {
        AddReplicaBackward(r.backward[i], &a.bwd);
        ++a.bwd_replicas;
      }
    }
  }
  return all_sparse;
}

void StepAggregator::AddReplicaBackward(const BackwardStats& b, BackwardStats* into) {
  into->sumsq += b.sumsq;
  into->saturated = SaturatingAdd(into->saturated, b.saturated);
  into->zeros = SaturatingAdd(into->zeros, b.zeros);
  into->numel = SaturatingAdd(into->numel, b.numel);
  into->order = EarliestOrder(into->order, b.order);
}

void StepAggregator::AddReplicaForward(const ForwardStats& f, ForwardStats* into) {
  into->sumsq += f.sumsq;
  if (f.amax > into->amax) into->amax = f.amax;
  into->saturated = SaturatingAdd(into->saturated, f.saturated);
  into->zeros = SaturatingAdd(into->zeros, f.zeros);
  into->numel = SaturatingAdd(into->numel, f.numel);
  into->order = EarliestOrder(into->order, f.order);
  into->blocks = SaturatingAdd(into->blocks, f.blocks);
  into->saturated_blocks = SaturatingAdd(into->saturated_blocks, f.saturated_blocks);
  into->dead_blocks = SaturatingAdd(into->dead_blocks, f.dead_blocks);
  into->scale_clamps = SaturatingAdd(into->scale_clamps, f.scale_clamps);
  into->source_numel = SaturatingAdd(into->source_numel, f.source_numel);
  into->underflow = SaturatingAdd(into->underflow, f.underflow);
  into->error_sumsq += f.error_sumsq;
  into->source_sumsq += f.source_sumsq;
}

// Fast path: every expected rank sent a sparse report, so a slot is covered
// exactly when some rank holds it (an elected reporter holds the slots of
// every rank of its group). Otherwise mark the slots the sparse reports
// cover (O(units of those ranks)).
bool StepAggregator::MarkCoverage(const OpenStep& open, bool all_sparse) {
  const std::vector<uint32_t>& expected = Expected();
  size_t expected_reported = open.reports.size();
  if (reporters_ != nullptr) {
    expected_reported = 0;
    for (const auto& [rank, r] : open.reports) {
      expected_reported += std::binary_search(expected.begin(), expected.end(), rank) ? 1 : 0;
    }
  }
  const bool fast = all_sparse && expected_reported == expected.size();
  if (!fast) {
    if (cover_epoch_.size() < topology_->num_slots()) {
      cover_epoch_.resize(topology_->num_slots(), 0);
    }
    for (const auto& [rank, r] : open.reports) {
      if (!r.sparse) continue;
      topology_->ForEachSlotOfRank(rank, [this](uint32_t slot) { cover_epoch_[slot] = epoch_; });
    }
  }
  return fast;
}

bool StepAggregator::Covered(uint32_t slot, bool fast) const {
  return fast ? topology_->holders(slot) > 0 : cover_epoch_[slot] == epoch_;
}

void StepAggregator::SortListed() {
  const size_t num_units = topology_->num_units();
  if (listed_.size() * 8 > num_units) {  // dense: a scan beats a sort
    listed_.clear();
    for (uint32_t id = 0; id < num_units; ++id) {
      if (unit_epoch_[id] == epoch_) listed_.push_back(id);
    }
  } else {
    std::sort(listed_.begin(), listed_.end());
  }
}

UnitSample StepAggregator::CombineUnit(uint32_t id, bool fast, bool* complete, bool* held) {
  const UnitLayout& u = topology_->unit(id);
  UnitSample sample;
  sample.unit_id = id;
  bool forward = true;   // every reported shard sent forward statistics
  bool backward = true;  // ... and backward statistics
  for (uint32_t k = 0; k < u.shard_count; ++k) {
    const uint32_t slot = u.first_slot + k;
    if (topology_->holders(slot) == 0) *held = false;
    SlotAcc& a = acc_[slot];
    if (a.replicas == 0) {
      if (!Covered(slot, fast)) *complete = false;
      sample.numel += u.shard_numel[k];  // a covered shard with nothing to report
      continue;
    }
    sample.sumsq += a.sumsq / a.replicas;
    if (a.amax > sample.amax) sample.amax = a.amax;
    sample.nonfinite += a.nonfinite;
    sample.zeros += a.zeros;
    sample.numel += u.shard_numel[k];
    // Forward: replicas ran different batches, so their sums are averaged
    // and their counts and sizes summed (the fractions stay fractions of
    // every element seen); shards are summed.
    if (a.fwd_replicas == 0) {
      forward = false;
    } else {
      AddShardForward(a, &sample);
    }
    if (a.bwd_replicas == 0) {
      backward = false;
    } else {
      AddShardBackward(a, &sample);
    }
    a = SlotAcc{};  // keep acc_ all zero
  }
  if (!forward || sample.fwd_numel == 0) {  // a shard without: none for the unit
    sample.fwd_sumsq = sample.fwd_amax = 0.0;
    sample.fwd_saturated = sample.fwd_zeros = sample.fwd_numel = 0;
    sample.fwd_order = 0;
    sample.fwd_blocks = sample.fwd_saturated_blocks = 0;
    sample.fwd_dead_blocks = sample.fwd_scale_clamps = 0;
    sample.fwd_source_numel = sample.fwd_underflow = 0;
    sample.fwd_error_sumsq = sample.fwd_source_sumsq = 0.0;
  }
  if (!backward || sample.bwd_numel == 0) {  // the same for the backward figures
    sample.bwd_sumsq = 0.0;
    sample.bwd_saturated = sample.bwd_zeros = sample.bwd_numel = sample.bwd_order = 0;
  }
  return sample;
}

void StepAggregator::AddShardBackward(const SlotAcc& a, UnitSample* sample) {
  sample->bwd_sumsq += a.bwd.sumsq / a.bwd_replicas;
  sample->bwd_saturated = SaturatingAdd(sample->bwd_saturated, a.bwd.saturated);
  sample->bwd_zeros = SaturatingAdd(sample->bwd_zeros, a.bwd.zeros);
  sample->bwd_numel = SaturatingAdd(sample->bwd_numel, a.bwd.numel);
  sample->bwd_order = EarliestOrder(sample->bwd_order, a.bwd.order);
}

void StepAggregator::AddShardForward(const SlotAcc& a, UnitSample* sample) {
  sample->fwd_sumsq += a.fwd.sumsq / a.fwd_replicas;
  if (a.fwd.amax > sample->fwd_amax) sample->fwd_amax = a.fwd.amax;
  sample->fwd_saturated = SaturatingAdd(sample->fwd_saturated, a.fwd.saturated);
  sample->fwd_zeros = SaturatingAdd(sample->fwd_zeros, a.fwd.zeros);
  sample->fwd_numel = SaturatingAdd(sample->fwd_numel, a.fwd.numel);
  sample->fwd_order = EarliestOrder(sample->fwd_order, a.fwd.order);
  sample->fwd_blocks = SaturatingAdd(sample->fwd_blocks, a.fwd.blocks);
  sample->fwd_saturated_blocks =
      SaturatingAdd(sample->fwd_saturated_blocks, a.fwd.saturated_blocks);
  sample->fwd_dead_blocks = SaturatingAdd(sample->fwd_dead_blocks, a.fwd.dead_blocks);
  sample->fwd_scale_clamps = SaturatingAdd(sample->fwd_scale_clamps, a.fwd.scale_clamps);
  // The source sums are summed over replicas too: only their ratio (the
  // relative error) is read, and it stays the ratio over every element seen.
  sample->fwd_source_numel = SaturatingAdd(sample->fwd_source_numel, a.fwd.source_numel);
  sample->fwd_underflow = SaturatingAdd(sample->fwd_underflow, a.fwd.underflow);
  sample->fwd_error_sumsq += a.fwd.error_sumsq;
  sample->fwd_source_sumsq += a.fwd.source_sumsq;
}

uint32_t StepAggregator::CountUnlistedIncomplete(bool fast, uint32_t listed_not_held) const {
  if (fast) return static_cast<uint32_t>(topology_->units_not_held() - listed_not_held);
  uint32_t incomplete = 0;
  for (uint32_t id = 0; id < topology_->num_units(); ++id) {
    if (unit_epoch_[id] == epoch_) continue;
    const UnitLayout& u = topology_->unit(id);
    for (uint32_t k = 0; k < u.shard_count; ++k) {
      if (!Covered(u.first_slot + k, fast)) {
        ++incomplete;
        break;
      }
    }
  }
  return incomplete;
}

}  // namespace gnmr
