// ManualClock: a TimeSource (common/time_source.h) that moves only when a
// test says so, for the time the daemon reads through JobOptions::clock,
// DaemonOptions::clock and the store's clock (step deadlines, idle expiry,
// ages, Admin's uptime and patience, snapshot and event times). A test then
// checks "not before the deadline" and "after it" by moving time, instead
// of sleeping and asserting wall-clock bounds that a loaded machine breaks.
// A wait bounded by this clock ends only when its condition holds or the
// test moves the clock past its deadline. Safe to read from any thread.
#pragma once

#include <atomic>
#include <chrono>

#include "common/time_source.h"

namespace gnmr::testing {

class ManualClock final : public TimeSource {
 public:
  using TimePoint = SteadyTime;

  // Starts at the real time of construction (both readings), so times
  // derived from it look ordinary in logs and files.
  ManualClock()
      : steady_start_(std::chrono::steady_clock::now()),
        wall_start_(std::chrono::system_clock::now()) {}

  SteadyTime Now() const override { return steady_start_ + Elapsed(); }
  WallTime WallNow() const override {
    return wall_start_ + std::chrono::duration_cast<std::chrono::system_clock::duration>(Elapsed());
  }
  // Moves both readings by `d`, together.
  void Advance(std::chrono::steady_clock::duration d) {
    elapsed_.fetch_add(d.count(), std::memory_order_acq_rel);
  }

 private:
  std::chrono::steady_clock::duration Elapsed() const {
    return std::chrono::steady_clock::duration(elapsed_.load(std::memory_order_acquire));
  }

  const SteadyTime steady_start_;
  const WallTime wall_start_;
  std::atomic<std::chrono::steady_clock::duration::rep> elapsed_{0};
};

}  // namespace gnmr::testing
