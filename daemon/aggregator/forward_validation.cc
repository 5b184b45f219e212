// StepAggregator::ValidateForward and ValidateBackward: the forward, block,
// source and backward columns of a report (docs/statistics.md, "Forward
// columns", "Block columns", "Source columns" and "Backward columns") are
// checked before anything is kept, so the sums Combine makes stay
// consistent (every count at most its element or block count) and the
// controller never sees a sample it must refuse.
#include <cmath>
#include <string>

#include "daemon/aggregator/step_aggregator.h"

namespace gnmr {

uint32_t StepAggregator::ForwardPosition(const v1::StepStats& s, int i) {
  // An empty fwd_order column (an older client) says "unknown" for every row.
  return s.fwd_order_size() > 0 ? s.fwd_order(i) : 0u;
}

Status StepAggregator::ValidateForward(const v1::StepStats& s) {
  const int n = s.unit_id_size();
  const int len = s.fwd_numel_size();
  if ((len != 0 && len != n) || s.fwd_sumsq_size() != len || s.fwd_amax_size() != len ||
      s.fwd_saturated_size() != len || s.fwd_zeros_size() != len) {
    return InvalidArgument("forward columns must all be empty or have unit_id's length " +
                           std::to_string(n) + ": fwd_sumsq " + std::to_string(s.fwd_sumsq_size()) +
                           ", fwd_amax " + std::to_string(s.fwd_amax_size()) + ", fwd_saturated " +
                           std::to_string(s.fwd_saturated_size()) + ", fwd_zeros " +
                           std::to_string(s.fwd_zeros_size()) + ", fwd_numel " +
                           std::to_string(len));
  }
  if (s.fwd_stage() >= kMaxPipelineStages) {
    return InvalidArgument("fwd_stage must be < " + std::to_string(kMaxPipelineStages) + ", not " +
                           std::to_string(s.fwd_stage()));
  }
  if (s.fwd_order_size() != 0 && s.fwd_order_size() != len) {
    return InvalidArgument("fwd_order must be empty or have the forward columns' length " +
                           std::to_string(len) + ", not " + std::to_string(s.fwd_order_size()));
  }
  const int blocks = s.fwd_blocks_size();
  if ((blocks != 0 && blocks != len) || s.fwd_saturated_blocks_size() != blocks ||
      s.fwd_dead_blocks_size() != blocks || s.fwd_scale_clamps_size() != blocks) {
    return InvalidArgument("block columns must all be empty or have the forward columns' length " +
                           std::to_string(len) + ": fwd_blocks " + std::to_string(blocks) +
                           ", fwd_saturated_blocks " +
                           std::to_string(s.fwd_saturated_blocks_size()) + ", fwd_dead_blocks " +
                           std::to_string(s.fwd_dead_blocks_size()) + ", fwd_scale_clamps " +
                           std::to_string(s.fwd_scale_clamps_size()));
  }
  const int sources = s.fwd_source_numel_size();
  if ((sources != 0 && sources != len) || s.fwd_underflow_size() != sources ||
      s.fwd_error_sumsq_size() != sources || s.fwd_source_sumsq_size() != sources) {
    return InvalidArgument("source columns must all be empty or have the forward columns' length " +
                           std::to_string(len) + ": fwd_source_numel " + std::to_string(sources) +
                           ", fwd_underflow " + std::to_string(s.fwd_underflow_size()) +
                           ", fwd_error_sumsq " + std::to_string(s.fwd_error_sumsq_size()) +
                           ", fwd_source_sumsq " + std::to_string(s.fwd_source_sumsq_size()));
  }
  for (int i = 0; i < len; ++i) {  // messages built only on an error: this runs per value
    const bool negative = std::isfinite(s.fwd_sumsq(i)) && s.fwd_sumsq(i) < 0.0;
    if (negative || s.fwd_saturated(i) > s.fwd_numel(i) || s.fwd_zeros(i) > s.fwd_numel(i)) {
      return InvalidArgument(
          "unit id " + std::to_string(s.unit_id(i)) + ": forward statistics are inconsistent " +
          "(fwd_sumsq " + std::to_string(s.fwd_sumsq(i)) + ", fwd_saturated " +
          std::to_string(s.fwd_saturated(i)) + " and fwd_zeros " + std::to_string(s.fwd_zeros(i)) +
          " of fwd_numel " + std::to_string(s.fwd_numel(i)) + ")");
    }
    // A block holds at least one element, and each count is of blocks.
    if (blocks > 0 &&
        (s.fwd_blocks(i) > s.fwd_numel(i) || s.fwd_saturated_blocks(i) > s.fwd_blocks(i) ||
         s.fwd_dead_blocks(i) > s.fwd_blocks(i) || s.fwd_scale_clamps(i) > s.fwd_blocks(i))) {
      return InvalidArgument("unit id " + std::to_string(s.unit_id(i)) +
                             ": block figures are inconsistent (fwd_saturated_blocks " +
                             std::to_string(s.fwd_saturated_blocks(i)) + ", fwd_dead_blocks " +
                             std::to_string(s.fwd_dead_blocks(i)) + " and fwd_scale_clamps " +
                             std::to_string(s.fwd_scale_clamps(i)) + " of fwd_blocks " +
                             std::to_string(s.fwd_blocks(i)) + ", of fwd_numel " +
                             std::to_string(s.fwd_numel(i)) + ")");
    }
    // Sums of squares over finite pairs: finite, >= 0; counts of elements.
    if (sources > 0 &&
        (s.fwd_source_numel(i) > s.fwd_numel(i) || s.fwd_underflow(i) > s.fwd_source_numel(i) ||
         !FiniteSumOfSquares(s.fwd_error_sumsq(i)) || !FiniteSumOfSquares(s.fwd_source_sumsq(i)))) {
      return InvalidArgument("unit id " + std::to_string(s.unit_id(i)) +
                             ": source figures are inconsistent (fwd_underflow " +
                             std::to_string(s.fwd_underflow(i)) + " of fwd_source_numel " +
                             std::to_string(s.fwd_source_numel(i)) + ", of fwd_numel " +
                             std::to_string(s.fwd_numel(i)) + "; fwd_error_sumsq " +
                             std::to_string(s.fwd_error_sumsq(i)) + " and fwd_source_sumsq " +
                             std::to_string(s.fwd_source_sumsq(i)) + " must be finite and >= 0)");
    }
    // A position among this report's forward units: at most one per row,
    // and none for a unit without forward statistics.
    const uint32_t order = ForwardPosition(s, i);
    if (order > static_cast<uint32_t>(n) || (order > 0 && s.fwd_numel(i) == 0)) {
      return InvalidArgument("unit id " + std::to_string(s.unit_id(i)) + ": fwd_order " +
                             std::to_string(order) + " is not a position among " +
                             std::to_string(n) + " units with forward statistics (fwd_numel " +
                             std::to_string(s.fwd_numel(i)) + ")");
    }
  }
  return Status::Ok();
}

Status StepAggregator::ValidateBackward(const v1::StepStats& s) {
  const int n = s.unit_id_size();
  const int len = s.bwd_numel_size();
  if ((len != 0 && len != n) || s.bwd_sumsq_size() != len || s.bwd_saturated_size() != len ||
      s.bwd_zeros_size() != len) {
    return InvalidArgument("backward columns must all be empty or have unit_id's length " +
                           std::to_string(n) + ": bwd_sumsq " + std::to_string(s.bwd_sumsq_size()) +
                           ", bwd_saturated " + std::to_string(s.bwd_saturated_size()) +
                           ", bwd_zeros " + std::to_string(s.bwd_zeros_size()) + ", bwd_numel " +
                           std::to_string(len));
  }
  if (s.bwd_order_size() != 0 && s.bwd_order_size() != len) {
    return InvalidArgument("bwd_order must be empty or have the backward columns' length " +
                           std::to_string(len) + ", not " + std::to_string(s.bwd_order_size()));
  }
  for (int i = 0; i < len; ++i) {
    const bool negative = std::isfinite(s.bwd_sumsq(i)) && s.bwd_sumsq(i) < 0.0;
    if (negative || s.bwd_saturated(i) > s.bwd_numel(i) || s.bwd_zeros(i) > s.bwd_numel(i)) {
      return InvalidArgument(
          "unit id " + std::to_string(s.unit_id(i)) + ": backward statistics are inconsistent " +
          "(bwd_sumsq " + std::to_string(s.bwd_sumsq(i)) + ", bwd_saturated " +
          std::to_string(s.bwd_saturated(i)) + " and bwd_zeros " + std::to_string(s.bwd_zeros(i)) +
          " of bwd_numel " + std::to_string(s.bwd_numel(i)) + ")");
    }
    const uint32_t order = s.bwd_order_size() > 0 ? s.bwd_order(i) : 0u;
    if (order > static_cast<uint32_t>(n) || (order > 0 && s.bwd_numel(i) == 0)) {
      return InvalidArgument("unit id " + std::to_string(s.unit_id(i)) + ": bwd_order " +
                             std::to_string(order) + " is not a position among " +
                             std::to_string(n) + " units with backward statistics (bwd_numel " +
                             std::to_string(s.bwd_numel(i)) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace gnmr
