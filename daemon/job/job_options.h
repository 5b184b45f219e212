// JobOptions: what gnmrd's configuration sets for every job (job.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/time_source.h"
#include "daemon/aggregator/step_aggregator.h"
#include "daemon/job/fan_out.h"
#include "daemon/job/resource_caps.h"

namespace gnmr {

struct JobOptions {
  StepAggregator::Options aggregation;  // max_open_bytes: the open-step cap
  // Per-job caps (resource_caps.h; max_open_step_bytes and
  // decision_history_bytes are taken from aggregation and below), and the
  // daemon's memory budget (null: none).
  JobCaps caps;
  std::shared_ptr<MemoryBudget> budget;
  // Threads that share a broadcast to many streams (fan_out.h); null: the
  // thread that closed the step sends to every stream.
  std::shared_ptr<FanOut> fan_out;
  uint32_t snapshot_every_steps = 50;
  // How long a rank of the old timeline counts as alive after its last
  // report or ack (at least 5 step deadlines): a new incarnation waits for
  // the old one's ranks to go quiet this long (job_generation.cc, "Generations").
  std::chrono::milliseconds incarnation_silence{10000};
  size_t max_units = 1u << 20;
  // Steps whose acks are compared (and decisions whose digests are checked).
  size_t steps_kept_for_acks = 1024;
  // Recent decisions of the current generation, sent to a stream when it
  // attaches: at most this many, and at most this many bytes (the newest
  // one always).
  size_t decisions_kept = 64;
  size_t decision_history_bytes = 4u << 20;
  // Where the job reads the time (common/time_source.h): Now() for ages,
  // idleness, decision latency and Info's patience, WallNow() for event
  // times and the snapshot's last activity. Never null; it must outlive
  // the job. Tests inject a ManualClock to drive time instead of sleeping.
  // The `now` given to OnStats, Tick and Info must come from it too.
  const TimeSource* clock = &TimeSource::Real();
};

}  // namespace gnmr
