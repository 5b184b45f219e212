// What a gnmr::Client reports about itself (<gnmr/client.h>): its counters
// (Client::Counters, readable from any thread) and the problems a user must
// hear about (Client::TakeProblems).
#pragma once

#include <cstdint>
#include <string>

#include "gnmr/export.h"

namespace gnmr {

// How ClientCounters::overhead_ratio (and the reports') was measured.
enum class OverheadSource : int {
  kHostWall = 1,     // host statistics time / host time between Observe calls
  kCupti = 2,        // GPU: statistics kernels / all kernels of overhead_step
  kUnavailable = 3,  // GPU without CUPTI profiling: not measured
};

struct ClientCounters {
  uint64_t reports_enqueued = 0;
  uint64_t reports_sent = 0;
  // `report: one_per_shard` (docs/scale.md): reports this rank kept back
  // while another replica of its shard reported, and whether it stands by
  // now.
  uint64_t reports_held = 0;
  bool standby = false;
  uint64_t reports_dropped = 0;  // queue full (drop-oldest) or stale on reconnect
  uint64_t acks_sent = 0;
  uint64_t acks_dropped = 0;
  uint64_t decisions_received = 0;  // valid, stored
  uint64_t decisions_rejected = 0;  // failed validation (or conflicting)
  uint64_t decisions_stale = 0;     // of an older generation: ignored
  uint64_t missed_decisions = 0;    // plans without decision when one was due
  uint64_t skipped_steps = 0;       // plans with skip_step (same-step guard
                                    // or global_skip)
  // Planned steps in a row, up to the newest, whose plan had no decision
  // (for any MissReason, kNoDecisionYet included); 0 after a plan with one.
  // Reaching kNoDecisionsWarnSteps while connected records a kNoDecisions
  // problem.
  uint64_t steps_without_decision = 0;
  // ObserveForward calls on the device whose statistics were not taken (a
  // unit far ahead of the GPU; that unit's forward row of that step is left
  // out, never sent in part; docs/statistics.md, "Forward columns").
  uint64_t forward_calls_dropped = 0;
  uint64_t generation = 0;        // the job generation this rank follows
  uint64_t registrations = 0;     // successful Register + attached Session
  uint64_t reconnects = 0;        // registrations after the first
  uint64_t connect_failures = 0;  // failed attempts and broken streams
  // Streams the daemon did not attach within attach_timeout (each also
  // counts as a connect failure).
  uint64_t attach_failures = 0;
  // The daemon attached this rank's Session stream (its first message came
  // back); a stream that is merely open is not connected.
  bool connected = false;
  int64_t last_decided_step = -1;  // observed step of the newest decision
  // Total host time Observe spent on statistics: computing them (host
  // units) plus enqueueing the GPU launch (device units; not GPU time).
  double stats_seconds = 0.0;
  // Total GPU time of the statistics launches (CUDA events around each
  // launch), counted when the I/O thread reads the results.
  double stats_gpu_seconds = 0.0;
  OverheadSource overhead_source = OverheadSource::kHostWall;
  double overhead_ratio = 0.0;  // newest; meaningless when kUnavailable
  int64_t overhead_step = -1;   // the step it measures (-1: none yet)
  std::string last_error;       // newest background error, "" if none
};

// ClientCounters::steps_without_decision that records a kNoDecisions problem
// while connected: far more than a healthy job ever shows (none beyond the
// first `lag` steps of a generation, lag being 0 to 2 in practice), few
// enough to be heard within a minute of training.
inline constexpr uint64_t kNoDecisionsWarnSteps = 20;

// Something the client cannot fix by retrying: a client set up wrong, or a
// daemon that refuses it. Fail-open keeps training going; these are meant to
// be shown to the user (the Python adapter turns them into warnings).
enum class ProblemKind : int {
  kUnauthenticated = 1,  // the daemon refused the token
  kUnreachable = 2,      // nothing answers at the target (ENOENT named)
  kRefused = 3,          // the daemon refused the registration (different
                         // unit set, world size, limits)
  kConfigDiffers = 4,    // the job runs with another config than
                         // ClientOptions::config (the daemon's stands)
  kBadDecision = 5,      // a decision failed validation
  kStream = 6,           // the session broke (daemon restart, network)
  kNotAttached = 7,      // the daemon did not attach the Session stream
                         // within attach_timeout (registering again)
  kNoDecisions = 8,      // connected, yet no plan had a decision for
                         // kNoDecisionsWarnSteps steps in a row (once per run
                         // of such steps)
};
GNMR_EXPORT const char* ProblemKindName(ProblemKind k);

struct Problem {
  ProblemKind kind = ProblemKind::kStream;
  std::string message;  // the newest of this kind
  uint64_t count = 0;   // occurrences since the last TakeProblems
};

}  // namespace gnmr
