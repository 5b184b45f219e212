// Client::Impl: the state behind gnmr::Client. Internal to the client
// library. It keeps the lock (SharedState::mu, shared with the transport's
// thread) and the orchestration: what Start builds (outbox, GPU path,
// transport) and whether it has started or stopped. The parts with one job
// each, all the training thread's:
// - NextReportInputs (next_report_inputs.h): what the calls between two
//   Observes gather for the next report;
// - ObservedStep (observed_step.h): the newest step Observe took;
// - TrainerCounters (trainer_counters.h): the counters the training thread
//   keeps, read by any thread.
// The files that implement Client with it: client.cc (the lifecycle: Create,
// AddUnit, SetTensors, Start, Flush, Stop), client_observe.cc (Observe,
// MarkInactive), client_observe_unit.cc, client_forward.cc, client_plan.cc
// (PlanFor, Ack, UnitNorms and the plan-validity rule), client_counters.cc
// (the read-only views) and state_transfer.cc.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/src/gpu_path.h"
#include "client/src/next_report_inputs.h"
#include "client/src/observed_step.h"
#include "client/src/outbox.h"
#include "client/src/shared_state.h"
#include "client/src/trainer_counters.h"
#include "client/src/transport.h"
#include "client/src/unit_registry.h"
#include "controller/types/config_codec.h"
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

  // Training thread only (TrainerCounters: any thread reads them).
  NextReportInputs next_report;
  ObservedStep observed;
  TrainerCounters counters;

  // InvalidArgument naming `call` when `unit` is not a registered unit.
  Status CheckHandle(const char* call, UnitHandle unit) const {
    if (unit < units.size()) return Status::Ok();
    return InvalidArgument(std::string(call) + ": unit " + std::to_string(unit) +
                           " does not exist (" + std::to_string(units.size()) + " units)");
  }
  // Training thread, after a successful Observe(step): a decision for it
  // is now coming (client_plan.cc).
  void RecordObserved(int64_t step);
  // The decision part of PlanFor(step): waits as the plan-validity rule
  // says, then fills `out` from the covering decision or says why there is
  // none (docs/safety.md; client_plan.cc). Counts missed decisions.
  void FillPlanFromDecisions(int64_t step, Plan* out);
  // Same-step guard: whether any unit had a NaN/Inf at `step` (Observe
  // called for it). Device units: waits for that launch's results.
  bool NonfiniteAt(int64_t step);
  // Counts the plan's step in or out of the run of steps without a
  // decision (TrainerCounters) and records kNoDecisions when the run
  // reaches kNoDecisionsWarnSteps while connected. A load, a store and a
  // compare per plan.
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
