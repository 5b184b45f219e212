// TimeSource: where gnmrd reads the time. gnmrd's composition root
// (programs/gnmrd/main.cc) hands one to every part that reads a clock: the
// jobs (JobOptions::clock), the server (DaemonOptions::clock: the deadline
// ticker, Admin's uptime and patience, the shutdown's drain, the refusal
// log), the store (SnapshotStore, SnapshotWriter, RemoveJobDir, EventLog),
// the metrics (MetricsOptions::clock) and gnmrd's side effects. Tests hand them a
// ManualClock (tests/testing/manual_clock.h) and move time instead of
// sleeping for it.
//
// Two readings, because they answer different questions:
// - Now(): monotonic. Deadlines, intervals, ages. A loop that waits with a
//   deadline compares Now() with it, so a test's clock decides when the
//   wait is over.
// - WallNow(): the calendar. Timestamps that people and files see (event
//   times, snapshot times, the names of kept and removed files), and the
//   deadlines of APIs that take a wall time (grpc::Server::Shutdown:
//   WallNow() + the time left).
//
// Thread-safety: both readings may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>

namespace gnmr {

class TimeSource {
 public:
  using SteadyTime = std::chrono::steady_clock::time_point;
  using WallTime = std::chrono::system_clock::time_point;

  virtual ~TimeSource() = default;

  virtual SteadyTime Now() const = 0;
  virtual WallTime WallNow() const = 0;

  // WallNow() as Unix seconds (event times) and Unix milliseconds (file
  // names, snapshot frames).
  double UnixSeconds() const {
    return std::chrono::duration<double>(WallNow().time_since_epoch()).count();
  }
  int64_t UnixMillis() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(WallNow().time_since_epoch())
        .count();
  }

  // The process's clocks, std::chrono's steady_clock and system_clock: the
  // default of every option that takes a TimeSource. Never destroyed, so a
  // thread still running at exit can read it.
  static const TimeSource& Real();
};

namespace time_source_internal {

class RealTimeSource final : public TimeSource {
 public:
  SteadyTime Now() const override { return std::chrono::steady_clock::now(); }
  WallTime WallNow() const override { return std::chrono::system_clock::now(); }
};

}  // namespace time_source_internal

inline const TimeSource& TimeSource::Real() {
  static const TimeSource* const real = new time_source_internal::RealTimeSource();
  return *real;
}

}  // namespace gnmr
