// How a gnmr::Client is set up (<gnmr/client.h>): the daemon or "local",
// the job and rank, the waits and queues, and the config of a job gnmrd does
// not know yet. Every default is here and only here: the C API
// (gnmr_options_init) and the Python binding read them from ClientOptions{}.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "gnmr/config.h"

namespace gnmr {

struct ClientOptions {
  // "unix:/path/gnmrd.sock" or "host:port": gnmrd. "local": the controller
  // runs in this process, one per rank, for a single process, a notebook or
  // a CI test of a training script (docs/local_mode.md; needs the
  // gnmr_client_local library). Same plans, events and checkpoints; sharded
  // units are refused (they need gnmrd to combine the shards).
  std::string target;
  std::string job_id;  // 1..128 of [A-Za-z0-9._:-]
  uint32_t rank = 0;   // < world_size
  uint32_t world_size = 1;
  std::string token;  // job token, sent as x-gnmr-token metadata
  // Sent as x-gnmr-admin-token by ExportState/ImportState only: the
  // daemon's read or admin token where it requires one (TCP listeners;
  // over a Unix socket file permissions stand in for it). Empty: none.
  std::string admin_token;
  // How long PlanFor(step) may wait for a decision that covers `step` and
  // has not arrived yet (docs/safety.md, "Plan validity"). At lag >= 1 the
  // decision was sent a step earlier, so a connected rank in a healthy job
  // does not wait at all; at lag 0 the wait is the daemon's round trip.
  // Never waits while disconnected, nor again after a wait timed out until
  // a decision that is new arrives or the stream attaches anew (a daemon
  // outage costs one wait). 0: never wait (ranks may then apply different
  // plans: not recommended).
  std::chrono::milliseconds decision_wait{2000};
  // How long the daemon may take to attach the Session stream, i.e. to send
  // its first message after the hello (gnmrd sends the job's generation at
  // once). Beyond it the client gives the stream up (ProblemKind::
  // kNotAttached, ClientCounters::attach_failures) and registers again. A
  // healthy attach is a round trip (milliseconds, also through gnmr-relay
  // and with thousands of ranks attaching after a daemon restart); 5 s
  // leaves room for a loaded daemon while a rank left unattached recovers
  // within a few steps. Must be > 0.
  std::chrono::milliseconds attach_timeout{5000};
  // Reports waiting for the network; beyond this the oldest is dropped.
  size_t max_queued_reports = 64;
  // Reconnect backoff: initial, doubled per failure, capped.
  std::chrono::milliseconds backoff_initial{50};
  std::chrono::milliseconds backoff_max{1000};
  // Controller config for a job the daemon does not know yet (ignored by
  // the daemon for an existing job).
  std::optional<ControllerConfig> config;
  // GPU units: measure the statistics kernels' share of all GPU kernel time
  // per step with CUPTI activity records (overhead_ratio). Off by default:
  // CUPTI has a cost and admits one user per process; if another tool owns
  // it, or there is no driver, the client backs off quietly (logs once) and
  // reports the ratio as unavailable.
  bool profile_gpu_overhead = false;
  // Target "local" only: the job's events (admissions, releases, denials,
  // global skips, generations) are appended to this file as JSON Lines, the
  // lines of gnmrd's event log. Empty: no file. Opened by Create (an error
  // there is InvalidArgument); a write error later is a Problem (kStream).
  std::string local_events_path;
  // This rank's pipeline stage, from 0 (< 65536), where the model's layers
  // are split over stages: stage s runs a micro-batch's forward after stage
  // s - 1. attribution: upstream then compares forward orders by stage
  // first (docs/controller.md, "Attribution"). 0 without pipeline
  // parallelism.
  uint32_t pipeline_stage = 0;
};

}  // namespace gnmr
