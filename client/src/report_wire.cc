// Report (the training thread's preallocated slot) to StepStats (the wire
// form, docs/statistics.md): dense when no unit is marked inactive, as
// every client before sparse reports sent; sparse otherwise, the active
// units in unit id order. Forward columns ride along in either form when
// the report carries them.
#include "client/src/report_wire.h"

#include <algorithm>

#include "gnmr/client_counters.h"

namespace gnmr {
namespace {

// Report::overhead_source goes on the wire as it is, and ClientCounters
// reads it as the public enum: all three number the sources alike.
static_assert(kOverheadHostWall == v1::OVERHEAD_SOURCE_HOST_WALL &&
              kOverheadCupti == v1::OVERHEAD_SOURCE_CUPTI &&
              kOverheadUnavailable == v1::OVERHEAD_SOURCE_UNAVAILABLE &&
              v1::OverheadSource_MAX == 3);
static_assert(static_cast<int>(OverheadSource::kHostWall) == kOverheadHostWall &&
              static_cast<int>(OverheadSource::kCupti) == kOverheadCupti &&
              static_cast<int>(OverheadSource::kUnavailable) == kOverheadUnavailable);

// The sparse form: the active units' columns in unit id order.
void AddActiveColumns(const Report& r, const std::vector<uint32_t>& unit_ids,
                      const std::vector<uint32_t>& handles_by_id, v1::StepStats* s) {
  const size_t active = handles_by_id.size() - std::min(r.inactive_count, handles_by_id.size());
  s->mutable_unit_id()->Reserve(static_cast<int>(active));
  s->mutable_sumsq()->Reserve(static_cast<int>(active));
  s->mutable_amax()->Reserve(static_cast<int>(active));
  s->mutable_nonfinite()->Reserve(static_cast<int>(active));
  s->mutable_zeros()->Reserve(static_cast<int>(active));
  for (const uint32_t h : handles_by_id) {
    if (r.inactive[h]) continue;
    s->add_unit_id(unit_ids[h]);
    s->add_sumsq(r.sumsq[h]);
    s->add_amax(r.amax[h]);
    s->add_nonfinite(r.nonfinite[h]);
    s->add_zeros(r.zeros[h]);
    if (r.fwd_units > 0) {
      s->add_fwd_sumsq(r.fwd_sumsq[h]);
      s->add_fwd_amax(r.fwd_amax[h]);
      s->add_fwd_saturated(r.fwd_saturated[h]);
      s->add_fwd_zeros(r.fwd_zeros[h]);
      s->add_fwd_numel(r.fwd_numel[h]);
      s->add_fwd_order(r.fwd_order[h]);
    }
    if (r.fwd_block_units > 0) {
      s->add_fwd_blocks(r.fwd_blocks[h]);
      s->add_fwd_saturated_blocks(r.fwd_saturated_blocks[h]);
      s->add_fwd_dead_blocks(r.fwd_dead_blocks[h]);
      s->add_fwd_scale_clamps(r.fwd_scale_clamps[h]);
    }
    if (r.fwd_source_units > 0) {
      s->add_fwd_source_numel(r.fwd_source_numel[h]);
      s->add_fwd_underflow(r.fwd_underflow[h]);
      s->add_fwd_error_sumsq(r.fwd_error_sumsq[h]);
      s->add_fwd_source_sumsq(r.fwd_source_sumsq[h]);
    }
    if (r.bwd_units > 0) {
      s->add_bwd_sumsq(r.bwd_sumsq[h]);
      s->add_bwd_saturated(r.bwd_saturated[h]);
      s->add_bwd_zeros(r.bwd_zeros[h]);
      s->add_bwd_numel(r.bwd_numel[h]);
      s->add_bwd_order(r.bwd_order[h]);
    }
  }
}

}  // namespace

void ReportToStepStats(const Report& r, const std::vector<uint32_t>& unit_ids,
                       const std::vector<uint32_t>& handles_by_id, uint32_t pipeline_stage,
                       v1::StepStats* s) {
  s->set_step(r.step);
  s->clear_unit_id();
  s->clear_sumsq();
  s->clear_amax();
  s->clear_nonfinite();
  s->clear_zeros();
  s->clear_fwd_sumsq();
  s->clear_fwd_amax();
  s->clear_fwd_saturated();
  s->clear_fwd_zeros();
  s->clear_fwd_numel();
  s->clear_fwd_order();
  s->clear_fwd_blocks();
  s->clear_fwd_saturated_blocks();
  s->clear_fwd_dead_blocks();
  s->clear_fwd_scale_clamps();
  s->clear_fwd_source_numel();
  s->clear_fwd_underflow();
  s->clear_fwd_error_sumsq();
  s->clear_fwd_source_sumsq();
  s->clear_bwd_sumsq();
  s->clear_bwd_saturated();
  s->clear_bwd_zeros();
  s->clear_bwd_numel();
  s->clear_bwd_order();
  s->set_fwd_stage(r.fwd_units > 0 || r.bwd_units > 0 ? pipeline_stage : 0);
  s->set_sparse(r.inactive_count > 0);
  if (r.inactive_count == 0) {  // dense, as every client before sparse reports
    s->mutable_unit_id()->Add(unit_ids.begin(), unit_ids.end());
    s->mutable_sumsq()->Add(r.sumsq.begin(), r.sumsq.end());
    s->mutable_amax()->Add(r.amax.begin(), r.amax.end());
    s->mutable_nonfinite()->Add(r.nonfinite.begin(), r.nonfinite.end());
    s->mutable_zeros()->Add(r.zeros.begin(), r.zeros.end());
    if (r.fwd_units > 0) {  // all five columns and fwd_order, or none (docs/statistics.md)
      s->mutable_fwd_sumsq()->Add(r.fwd_sumsq.begin(), r.fwd_sumsq.end());
      s->mutable_fwd_amax()->Add(r.fwd_amax.begin(), r.fwd_amax.end());
      s->mutable_fwd_saturated()->Add(r.fwd_saturated.begin(), r.fwd_saturated.end());
      s->mutable_fwd_zeros()->Add(r.fwd_zeros.begin(), r.fwd_zeros.end());
      s->mutable_fwd_numel()->Add(r.fwd_numel.begin(), r.fwd_numel.end());
      s->mutable_fwd_order()->Add(r.fwd_order.begin(), r.fwd_order.end());
    }
    if (r.fwd_block_units > 0) {  // all four block columns, or none
      s->mutable_fwd_blocks()->Add(r.fwd_blocks.begin(), r.fwd_blocks.end());
      s->mutable_fwd_saturated_blocks()->Add(r.fwd_saturated_blocks.begin(),
                                             r.fwd_saturated_blocks.end());
      s->mutable_fwd_dead_blocks()->Add(r.fwd_dead_blocks.begin(), r.fwd_dead_blocks.end());
      s->mutable_fwd_scale_clamps()->Add(r.fwd_scale_clamps.begin(), r.fwd_scale_clamps.end());
    }
    if (r.fwd_source_units > 0) {  // all four source columns, or none
      s->mutable_fwd_source_numel()->Add(r.fwd_source_numel.begin(), r.fwd_source_numel.end());
      s->mutable_fwd_underflow()->Add(r.fwd_underflow.begin(), r.fwd_underflow.end());
      s->mutable_fwd_error_sumsq()->Add(r.fwd_error_sumsq.begin(), r.fwd_error_sumsq.end());
      s->mutable_fwd_source_sumsq()->Add(r.fwd_source_sumsq.begin(), r.fwd_source_sumsq.end());
    }
    if (r.bwd_units > 0) {  // all four backward columns and bwd_order, or none
      s->mutable_bwd_sumsq()->Add(r.bwd_sumsq.begin(), r.bwd_sumsq.end());
      s->mutable_bwd_saturated()->Add(r.bwd_saturated.begin(), r.bwd_saturated.end());
      s->mutable_bwd_zeros()->Add(r.bwd_zeros.begin(), r.bwd_zeros.end());
      s->mutable_bwd_numel()->Add(r.bwd_numel.begin(), r.bwd_numel.end());
      s->mutable_bwd_order()->Add(r.bwd_order.begin(), r.bwd_order.end());
    }
  } else {
    AddActiveColumns(r, unit_ids, handles_by_id, s);
  }
  v1::ClientOverhead* o = s->mutable_overhead();
  o->set_stats_seconds(r.stats_seconds);
  o->set_overhead_ratio(r.overhead_ratio);
  o->set_stats_gpu_seconds(r.stats_gpu_seconds);
  o->set_overhead_source(static_cast<v1::OverheadSource>(r.overhead_source));
  o->set_overhead_step(r.overhead_step);
  o->set_dropped_reports(r.dropped_reports);
  o->set_missed_decisions(r.missed_decisions);
}

}  // namespace gnmr
