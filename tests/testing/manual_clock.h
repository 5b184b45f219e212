// ManualClock: a steady clock that moves only when a test says so, for the
// time the daemon reads through JobOptions::clock (step deadlines, idle
// expiry, ages). A test then checks "not before the deadline" and "after
// it" by moving time, instead of sleeping and asserting wall-clock bounds
// that a loaded machine breaks. Safe to read from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>

namespace gnmr::testing {

class ManualClock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // Starts at the real time of construction, so times derived from it
  // look ordinary in logs.
  ManualClock() : ns_(std::chrono::steady_clock::now().time_since_epoch().count()) {}

  TimePoint Now() const {
    return TimePoint(std::chrono::steady_clock::duration(ns_.load(std::memory_order_acquire)));
  }
  void Advance(std::chrono::steady_clock::duration d) {
    ns_.fetch_add(d.count(), std::memory_order_acq_rel);
  }
  // For JobOptions::clock; the clock must outlive whatever holds it.
  std::function<TimePoint()> AsFunction() const {
    return [this] { return Now(); };
  }

 private:
  std::atomic<std::chrono::steady_clock::duration::rep> ns_;
};

}  // namespace gnmr::testing
