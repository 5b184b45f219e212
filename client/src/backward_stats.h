// BackwardAccumulator: the backward-side statistics a rank gathers between
// two Observe calls (Client::ObserveBackward), handed to the next report.
//
// The backward channel (docs/controller.md, "Backward channel") sees the
// gradient as the unit's backward quantizer stored it for its dgrad / wgrad
// GEMMs. Calls add up as ForwardAccumulator's do (sumsq and counts summed),
// so a unit called several times in a step (micro-batches) reports one row;
// the order is of first calls, which backward makes in reverse forward
// order. Training thread only; no allocation after Resize except the first
// time a report slot carries backward columns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "client/src/outbox.h"
#include "gnmr/tensor.h"

namespace gnmr {

class BackwardAccumulator {
 public:
  // Client::Start: one row per unit; drops anything pending.
  void Resize(size_t units);
  // Adds one call's statistics to `unit`'s pending row. `unit` < the size.
  void Add(uint32_t unit, const UnitStats& s);
  // Writes the pending rows into r's backward columns (every other unit's
  // bwd_numel 0; r->bwd_units = units with statistics) and clears them.
  // With nothing pending, leaves r without backward columns.
  void MoveInto(Report* r);

 private:
  std::vector<double> sumsq_;
  std::vector<uint64_t> saturated_;
  std::vector<uint64_t> zeros_;
  std::vector<uint64_t> numel_;
  std::vector<uint32_t> touched_;  // units with a pending row, first-call order
};

}  // namespace gnmr
