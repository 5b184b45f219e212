// ForwardAccumulator: the forward-side statistics a rank gathers between two
// Observe calls (Client::ObserveForward), handed to the next report.
//
// A unit's forward tensors may be observed several times in one step (a
// module called twice, micro-batches of gradient accumulation): the calls
// add up as if their tensors were one (sumsq and counts summed, amax the
// maximum), so the saturated and zero fractions stay fractions of every
// element seen. Training thread only; no allocation after Resize except the
// first time a report slot carries forward columns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "client/src/outbox.h"
#include "gnmr/block_tensor.h"
#include "gnmr/tensor.h"

namespace gnmr {

// A block-scaled tensor set's element figures, as a plain tensor's: the
// dequantized sumsq and amax, saturated and zero codes, the element count.
UnitStats ElementStats(const BlockStats& b);

class ForwardAccumulator {
 public:
  // Client::Start: one row per unit; drops anything pending.
  void Resize(size_t units);
  size_t size() const { return numel_.size(); }
  // Adds `s` (the statistics of one call's forward tensors) to `unit`'s
  // pending row. `unit` < size().
  void Add(uint32_t unit, const UnitStats& s);
  // The same for block-scaled tensors: dequantized sumsq and amax,
  // saturated and zero codes, the block figures, and the source figures of
  // the `source_numel` elements whose tensors came with a source.
  void AddBlocks(uint32_t unit, const BlockStats& b, uint64_t source_numel);
  // Whether any unit has pending statistics.
  bool empty() const { return touched_.empty(); }
  // Writes the pending rows into r's forward columns (every other unit's
  // fwd_numel 0; r->fwd_units = units with statistics) and clears them.
  // With nothing pending, leaves r without forward columns.
  void MoveInto(Report* r);
  // Adds the pending rows to r's forward columns (after the rows r already
  // carries, as later calls of the same units) and clears them.
  void MergeInto(Report* r);

 private:
  void Clear();  // zeroes the pending rows

  std::vector<double> sumsq_;
  std::vector<double> amax_;
  std::vector<uint64_t> saturated_;
  std::vector<uint64_t> zeros_;
  std::vector<uint64_t> numel_;
  std::vector<uint64_t> blocks_;
  std::vector<uint64_t> saturated_blocks_;
  std::vector<uint64_t> dead_blocks_;
  std::vector<uint64_t> scale_clamps_;
  std::vector<uint64_t> source_numel_;
  std::vector<uint64_t> underflow_;
  std::vector<double> error_sumsq_;
  std::vector<double> source_sumsq_;
  std::vector<uint32_t> touched_;  // units with a pending row, first-call order
};

}  // namespace gnmr
