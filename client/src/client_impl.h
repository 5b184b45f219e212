// Client::Impl: the state behind gnmr::Client, shared by the client/src/
// files that implement it: client.cc (the lifecycle and the per-step calls),
// client_counters.cc (the read-only views), client_observe_unit.cc,
// client_forward.cc, client_plan.cc and state_transfer.cc. Internal to the
// client library.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/src/forward_stats.h"
#include "client/src/gpu_path.h"
#include "client/src/outbox.h"
#include "client/src/shared_state.h"
#include "client/src/transport.h"
#include "client/src/unit_registry.h"
#include "core/config_codec.h"
#include "gnmr/client.h"
#include "gnmr/version.h"

namespace gnmr {

// Runs a public method's body: not even std::bad_alloc crosses the API.
// `f` returns a Status or a StatusOr; an exception becomes Internal.
template <typename F>
auto Guard(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return Internal(std::string("gnmr client: ") + e.what());
  } catch (...) {
    return Internal("gnmr client: unknown exception");
  }
}

// A random non-zero 64-bit id, different for every client (process).
uint64_t NewInstanceId();

class Client::Impl {
 public:
  explicit Impl(ClientOptions o) : options(std::move(o)), instance(NewInstanceId()) {}

  const ClientOptions options;
  // RegisterRequest.instance: this client's incarnation (docs/safety.md,
  // "Generations").
  const uint64_t instance;
  UnitRegistry units;
  SharedState shared;
  std::unique_ptr<Outbox> outbox;
  // Created by the first device unit; destroyed before the outbox it parks
  // report slots of, after the transport's thread that drains it.
  std::unique_ptr<GpuPath> gpu;
  // gRPC to gnmrd, or the controller in this process (transport.h). Made
  // by Create; stopped before the GPU path and the outbox go.
  std::unique_ptr<Transport> transport;
  std::vector<UnitHandle> host_units;  // from Start
  bool any_device = false;
  bool started = false;
  bool stopped = false;

  // Training thread only.
  int64_t last_observed = -1;
  std::chrono::steady_clock::time_point last_observe_time;
  std::vector<double> norms;  // per unit, at norms_step
  // MarkInactive marks for the next Observe (per unit) and their count.
  std::vector<uint8_t> inactive;
  size_t inactive_count = 0;
  int64_t norms_step = -1;
  // ObserveForward's statistics for the next Observe, and the host time
  // spent computing them (counted into that report's stats_seconds).
  ForwardAccumulator forward;
  int64_t forward_nanos = 0;
  // ObserveUnit's results for the next Observe (host units; `early_done`
  // says which are stored) and the host time spent on them (counted into
  // that report's stats_seconds). Sized by Start.
  std::vector<UnitStats> early;
  std::vector<uint8_t> early_done;
  int64_t early_nanos = 0;
  bool host_nonfinite = false;  // a host unit had NaN/Inf at norms_step
  // The steps last counted as missed / skipped: a plan asked for twice
  // counts once.
  int64_t missed_counted_step = -1;
  int64_t skip_counted_step = -1;
  int64_t no_decision_counted_step = -1;
  bool no_decisions_recorded = false;  // for the current run of such steps

  std::atomic<uint64_t> reports_enqueued{0};
  std::atomic<uint64_t> missed{0};
  std::atomic<uint64_t> skipped_steps{0};
  std::atomic<uint64_t> steps_without_decision{0};  // written by the training thread only
  std::atomic<int64_t> stats_nanos{0};
  std::atomic<double> host_ratio{0.0};  // newest host-path overhead ratio
  std::atomic<int64_t> host_ratio_step{-1};

  // Training thread, after a successful Observe(step): a decision for it
  // is now coming (client_plan.cc).
  // InvalidArgument naming `call` when `unit` is not a registered unit.
  Status CheckHandle(const char* call, UnitHandle unit) const {
    if (unit < units.size()) return Status::Ok();
    return InvalidArgument(std::string(call) + ": unit " + std::to_string(unit) +
                           " does not exist (" + std::to_string(units.size()) + " units)");
  }
  void RecordObserved(int64_t step);
  // The decision part of PlanFor(step): waits as the plan-validity rule
  // says, then fills `out` from the covering decision or says why there is
  // none (docs/safety.md; client_plan.cc). Counts missed decisions.
  void FillPlanFromDecisions(int64_t step, Plan* out);
  // Same-step guard: whether any unit had a NaN/Inf at `step` (Observe
  // called for it). Device units: waits for that launch's results.
  bool NonfiniteAt(int64_t step);
  void CountMissed(int64_t step);
  // Keeps steps_without_decision (once per step, like CountMissed) and
  // records kNoDecisions when it reaches kNoDecisionsWarnSteps while
  // connected. A load, a store and a compare per plan.
  void CountDecisionRun(const Plan& p);

  v1::RegisterRequest BuildRegister() const {
    v1::RegisterRequest req;
    req.set_job_id(options.job_id);
    req.set_rank(options.rank);
    req.set_world_size(options.world_size);
    req.set_client_version(std::string("gnmr-client/") + GNMR_VERSION_STRING);
    req.set_instance(instance);
    req.set_can_stand_by(true);       // io_loop.h: StandbyReports
    req.set_says_held_through(true);  // held_through: set at each Register (io_loop.cc)
    units.FillSpecs(&req);
    if (options.config) ConfigToProto(*options.config, req.mutable_config());
    return req;
  }
};

}  // namespace gnmr
