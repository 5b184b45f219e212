// ObservedStep: the newest step Observe took, as the training thread's later
// calls need it: its number (steps must increase), when it began (the step
// time of the host-wall overhead ratio), and the host units' norms and
// whether one of them had NaN/Inf (PlanFor's clip scales and same-step
// guard, UnitNorms). Device units' figures are GpuPath's.
//
// Training thread only: no lock.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "gnmr/plan.h"

namespace gnmr {

class ObservedStep {
 public:
  using Clock = std::chrono::steady_clock;

  // Client::Start: a norm per unit, NaN until its first Observe.
  void Resize(size_t units) { host_norms_.assign(units, std::numeric_limits<double>::quiet_NaN()); }

  // The newest step taken; -1 before the first.
  int64_t step() const { return step_; }
  // Seconds from the start of the newest step's Observe to `t0`; 0 before
  // the first.
  double SecondsSinceStart(Clock::time_point t0) const {
    return step_ >= 0 ? std::chrono::duration<double>(t0 - started_).count() : 0.0;
  }

  // Observe fills in the host units' norms as it computes them, then takes
  // the step (Observe(step) began at `t0`).
  void SetHostNorm(UnitHandle unit, double norm) { host_norms_[unit] = norm; }
  void Take(int64_t step, Clock::time_point t0, bool host_nonfinite) {
    step_ = step;
    started_ = t0;
    host_nonfinite_ = host_nonfinite;
  }

  // Whether a host unit had NaN/Inf at step().
  bool host_nonfinite() const { return host_nonfinite_; }
  // Host unit `unit`'s norm at `step` into *norm; false (and *norm as it
  // was) when `step` is not step() or `unit` has no norm here.
  bool HostNormAt(int64_t step, UnitHandle unit, double* norm) const {
    if (step != step_ || unit >= host_norms_.size()) return false;
    *norm = host_norms_[unit];
    return true;
  }

 private:
  int64_t step_ = -1;
  Clock::time_point started_;
  std::vector<double> host_norms_;  // per unit, at step_
  bool host_nonfinite_ = false;
};

}  // namespace gnmr
