// NextReportInputs: what the training thread's calls between two Observes
// gather for the next report: the units MarkInactive marked, the forward
// statistics of ObserveForward and ObserveBackward, the host units' results of ObserveUnit, and
// the host time spent computing those two (counted into that report's
// stats_seconds). Observe takes it all into its report slot.
//
// Training thread only: no lock. No allocation after Client::Start sizes it,
// except ForwardAccumulator's (forward_stats.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "client/src/backward_stats.h"
#include "client/src/forward_stats.h"
#include "client/src/outbox.h"
#include "gnmr/block_tensor.h"
#include "gnmr/plan.h"
#include "gnmr/tensor.h"

namespace gnmr {

class NextReportInputs {
 public:
  // Client::Start: a row per unit, nothing pending but the units already
  // marked inactive (MarkInactive may come before Start).
  void Resize(size_t units) {
    forward_.Resize(units);
    backward_.Resize(units);
    early_.assign(units, UnitStats{});
    early_done_.assign(units, 0);
    inactive_.resize(units, 0);
  }

  // Client::MarkInactive: `unit` (< `units`, the registered count) reports
  // zeros, not computed, at the next Observe.
  void MarkInactive(UnitHandle unit, size_t units) {
    if (inactive_.size() < units) inactive_.resize(units, 0);
    if (inactive_[unit] == 0) {
      inactive_[unit] = 1;
      ++inactive_count_;
    }
  }

  // ObserveForward: one call's forward statistics for `unit`.
  void AddForward(UnitHandle unit, const UnitStats& s) { forward_.Add(unit, s); }
  void AddForwardBlocks(UnitHandle unit, const BlockStats& b, uint64_t source_numel) {
    forward_.AddBlocks(unit, b, source_numel);
  }

  // ObserveBackward: one call's backward statistics for `unit`.
  void AddBackward(UnitHandle unit, const UnitStats& s) { backward_.Add(unit, s); }

  // ObserveUnit: host unit `unit`'s statistics, which Observe then takes
  // instead of computing them.
  void SetEarly(UnitHandle unit, const UnitStats& s) {
    early_[unit] = s;
    early_done_[unit] = 1;
  }
  // Forgets `unit`'s early result: its computation failed, or SetTensors
  // gave the unit other memory.
  void ForgetEarly(UnitHandle unit) {
    if (unit < early_done_.size()) early_done_[unit] = 0;
  }

  // Host time spent by ObserveForward and ObserveUnit.
  void AddHostNanos(int64_t nanos) { host_nanos_ += nanos; }

  // Observe: moves the inactive marks and the forward rows into `r` and
  // returns the host time gathered, all of it cleared here. The early
  // results stay for TakeEarly.
  int64_t MoveInto(Report* r) {
    // A recycled report clears only marks it still carries, so a step with
    // no unit marked costs nothing here; after that it is all zeros, and the
    // swap hands those zeros to the next step's marks.
    if (r->inactive_count > 0) std::fill(r->inactive.begin(), r->inactive.end(), 0);
    r->inactive_count = 0;
    if (inactive_count_ > 0) {
      r->inactive.swap(inactive_);  // both sized num_units: no allocation
      r->inactive_count = inactive_count_;
      inactive_count_ = 0;
    }
    forward_.MoveInto(r);   // this step's ObserveForward calls
    backward_.MoveInto(r);  // and ObserveBackward calls
    const int64_t nanos = host_nanos_;
    host_nanos_ = 0;
    return nanos;
  }

  // Observe, for each host unit: ObserveUnit's result for `unit`, or null
  // if it has none. Either way it has none after this.
  const UnitStats* TakeEarly(UnitHandle unit) {
    const bool done = early_done_[unit] != 0;
    early_done_[unit] = 0;
    return done ? &early_[unit] : nullptr;
  }

 private:
  std::vector<uint8_t> inactive_;  // per unit: marked
  size_t inactive_count_ = 0;
  ForwardAccumulator forward_;
  BackwardAccumulator backward_;
  std::vector<UnitStats> early_;
  std::vector<uint8_t> early_done_;  // per unit: early_ holds its result
  int64_t host_nanos_ = 0;
};

}  // namespace gnmr
