// The GNMR client library, C++ API (docs/architecture.md, "The client library").
// Installed as <gnmr/client.h>; link gnmr::gnmr_client (CMake) or `pkg-config gnmr`.
//
//   gnmr::ClientOptions o;
//   o.target = "unix:/run/gnmr/gnmrd.sock";
//   o.job_id = "llama-7b-run3"; o.rank = rank; o.world_size = world;
//   auto client = gnmr::Client::Create(o).value();
//   auto fc1 = client->AddUnit("layers.0.mlp.fc1", {{grad_ptr, numel}});
//   client->Start();
//   for (int64_t step = 0;; ++step) {
//     backward();
//     client->Observe(step);                 // statistics + enqueue, no network
//     // GPU tensors: client->Observe(step, stream) launches on `stream`
//     gnmr::Plan plan = client->PlanFor(step);
//     // Sharded units: all-reduce plan.nonfinite_observed (MAX) over the
//     // ranks holding shards before deciding to skip (docs/safety.md).
//     for (const gnmr::PlanEntry& e : plan.entries) { ...promote/clip/skip... }
//     client->Ack(plan);
//     if (!plan.skip_step) optimizer_step();
//   }
//
// Threading: Create/AddUnit/Start are called once, then Observe,
// ObserveForward, PlanFor, Ack and SetTensors from one training thread;
// Counters, TakeProblems and WaitConnected from any thread. The training thread never waits on the
// network: a background thread registers, streams reports, receives
// decisions and reconnects with capped exponential backoff. If the daemon
// is absent or restarting, plans come back empty (fail-open) and say why
// (Plan::miss_reason). No function throws.
//
// The safety rules this API keeps (same-step non-finite guard, one plan per
// step on every rank, generations) are docs/safety.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gnmr/block_tensor.h"
#include "gnmr/client_counters.h"
#include "gnmr/client_options.h"
#include "gnmr/config.h"
#include "gnmr/export.h"
#include "gnmr/plan.h"
#include "gnmr/status.h"
#include "gnmr/tensor.h"

namespace gnmr {

// ClientOptions, Plan and ClientCounters have headers of their own.

class GNMR_EXPORT Client {
 public:
  // InvalidArgument for an unusable option (empty target or job id, rank >=
  // world_size, zero queue). Starts nothing.
  static StatusOr<std::unique_ptr<Client>> Create(ClientOptions options);
  ~Client();  // Stop()
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Registers a unit made of `tensors` (any DType, fp8 with a finite
  // scale_inv or a scale_inv_ptr read at every Observe: see TensorRef),
  // holding shard `shard_index` of `shard_count`. Only before Start(). The
  // unit's dtype on the wire is its first tensor's. A device scale_inv_ptr
  // must be memory the device can read (device, managed or mapped pinned
  // memory), else InvalidArgument.
  //
  // Where: a unit's tensors are all host memory (device == kHostDevice;
  // statistics on the CPU in Observe) or all on one CUDA device (statistics
  // by the GPU path on the stream given to Observe). Every device unit of a
  // client must be on the same device. Without a usable GPU (no driver, no
  // device, or a library built without CUDA) a device unit is refused with
  // Unavailable and a message saying why; host units keep working.
  StatusOr<UnitHandle> AddUnit(const std::string& name, const std::vector<TensorRef>& tensors,
                               uint32_t shard_index = 0, uint32_t shard_count = 1);

  // Points a unit at new memory (frameworks reallocate gradients). The
  // total numel must stay the registered one; a device unit stays on its
  // device with the same tensors (count, dtype, numel, saturation_magnitude,
  // fp8 scale_inv and scale_inv_ptr; the value behind the pointer may
  // change freely): only
  // the pointers change, uploaded by the next Observe on its stream. Any
  // time, training thread.
  Status SetTensors(UnitHandle unit, const std::vector<TensorRef>& tensors);
  Status SetTensors(UnitHandle unit, const TensorRef* tensors, size_t count);

  // Starts the background thread. FailedPrecondition without units or when
  // already started.
  Status Start();

  // Computes this step's statistics of every unit and queues the report.
  // `step` must increase from call to call. Host units are computed on the
  // calling thread. Device units are launched on `stream` (a cudaStream_t;
  // Observe(step) uses the legacy default stream) after the work already
  // queued there, without host synchronisation: the report is sent by the
  // I/O thread once the launch completes (with host units, it waits for
  // both). Not on a stream being captured into a CUDA graph
  // (FailedPrecondition). An error leaves this step unreported, nothing else.
  Status Observe(int64_t step);
  Status Observe(int64_t step, void* stream);

  // Marks `unit` as having nothing to report in the next Observe: a MoE
  // expert that received no tokens, a frozen layer, any unit whose gradient
  // was not computed this step. That Observe skips the unit's statistics
  // and leaves it out of the report; the daemon (and the local target)
  // treat it as inactive at that step: no history update, no warmup
  // progress, never "incomplete" (docs/statistics.md). Its norm at that
  // step (PlanEntry::norm, UnitNorms) is 0 and it cannot trip the same-step
  // guard. A device unit is still read by the launch (its tensors must stay
  // valid); its results are discarded. Training thread, between two
  // Observe calls; each Observe clears every mark. InvalidArgument for an
  // unknown unit.
  Status MarkInactive(UnitHandle unit);

  // Overlap with backward: computes the statistics of host unit `unit` for
  // the step in progress now, from its tensors as they are (call it when the
  // unit's gradient is final, e.g. from a framework's "gradient ready" hook
  // while backward still runs for other units). The next Observe uses the
  // stored result instead of computing the unit again: the same kernels on
  // the same memory, so the report, norms and plans are bit-identical to
  // Observe alone. A later ObserveUnit of the same unit before that Observe
  // replaces the result (gradient accumulation: the last call counts);
  // SetTensors of the unit discards it (Observe then computes it from the
  // new tensors), and MarkInactive still wins. The memory must not change
  // between this call and Observe (the result would not see the change).
  // Device units are launched by Observe as a whole: Unimplemented here.
  // Training thread (the one that calls Observe; frameworks run CPU
  // backward hooks on it), after Start (FailedPrecondition before);
  // InvalidArgument for an unknown unit.
  Status ObserveUnit(UnitHandle unit);

  // Forward-side statistics of `unit` for the forward channel
  // (docs/controller.md, "Forward channel"): `tensors` are what the unit's
  // low-precision path saw in this step's forward pass, best its quantized
  // input as the backend stores it (fp8 codes with scale_inv), else its
  // output activation; set TensorRef::saturation_magnitude to count
  // saturated elements (kSaturationAtFormatMax for fp8 codes). Computed at
  // once on the calling thread (the tensors need not outlive the call) and
  // sent with the next Observe's report, so a step's forward and backward
  // statistics travel together. Several calls for one unit before that
  // Observe add up as one tensor set (a module run twice, micro-batches);
  // a unit marked inactive sends none. Not calling it at all changes
  // nothing. Training thread, after Start (FailedPrecondition before);
  // InvalidArgument for an unknown unit or a tensor ComputeStats refuses.
  //
  // CUDA tensors (all of one call on the device of this client's device
  // units; a client without device units refuses them): the statistics
  // are enqueued on `stream` (nullptr: the legacy default stream) at the
  // call, with no host synchronisation, so the tensors need only stay
  // valid in stream order (as for any kernel on that stream). The next
  // Observe's report waits for them as for its own launch. A unit whose
  // tensor shapes change costs a table upload per new shape; a unit
  // called far more often than the GPU drains loses that step's forward
  // row, never part of it (forward_calls_dropped; docs/statistics.md,
  // "Forward columns").
  Status ObserveForward(UnitHandle unit, const std::vector<TensorRef>& tensors);
  Status ObserveForward(UnitHandle unit, const TensorRef* tensors, size_t count);
  Status ObserveForward(UnitHandle unit, const TensorRef* tensors, size_t count, void* stream);

  // ObserveForward for block-scaled tensors (MXFP8, MXFP4, NVFP4, FP8 with
  // 1x128 / 128x128 scales; gnmr/block_tensor.h), read in place as the
  // libraries store them: their dequantized sum of squares and amax, codes
  // at the element format's largest magnitude (saturated), zero codes and
  // element count join the unit's forward row as ObserveForward's do, and
  // their block figures (blocks, saturated and dead blocks, scale clamps)
  // travel in the row's block columns (docs/statistics.md, "Block-scaled
  // formats"). Host memory only: a device tensor is Unimplemented (the
  // block kernels are not yet on the client's GPU path). A tensor the CPU
  // path cannot read is InvalidArgument naming it, and nothing is added.
  // Same thread and Start rules as ObserveForward.
  Status ObserveForwardBlocks(UnitHandle unit, const BlockTensorRef* tensors, size_t count);

  // Backward-side statistics of `unit` for the backward channel
  // (docs/controller.md, "Backward channel"): `tensors` are the gradient as
  // the unit's backward quantizer stored it for its dgrad / wgrad GEMMs
  // (fp8 E5M2 codes with scale_inv; set saturation_magnitude as for
  // ObserveForward). A fault there leaves the forward pass healthy and
  // raises every upstream unit's gradient with the root's: this is where it
  // shows at the root. Otherwise as ObserveForward: computed at the call,
  // sent with the next Observe's report, calls of a step add up, the order
  // of first calls travels (backward runs units in reverse forward order).
  // Host memory only for now: a device tensor is Unimplemented.
  Status ObserveBackward(UnitHandle unit, const TensorRef* tensors, size_t count);
  // The same for block-scaled tensors: their dequantized sum of squares,
  // saturated and zero codes and element count join the unit's backward
  // row (the backward channel carries no block or source figures yet).
  Status ObserveBackwardBlocks(UnitHandle unit, const BlockTensorRef* tensors, size_t count);

  // The actions in force at `step` (see ClientOptions::decision_wait).
  // PlanEntry::norm of a device unit is known once its GPU results for
  // `step` have been read (always, when the plan's decision observed
  // `step`, as with lag 0); until then it is NaN and scale is 1.
  Plan PlanFor(int64_t step);
  void PlanFor(int64_t step, Plan* out);  // reuses out's storage

  // Every unit's gradient norm at `step` (PlanEntry::norm's definition),
  // unit order, for the trainer's own logging. NaN where not known: Observe
  // (step) was not the newest Observe, or a device unit's results for `step`
  // are not read yet (after PlanFor(step) they are when its decision
  // observed `step`). Training thread; never waits.
  std::vector<double> UnitNorms(int64_t step);

  // Tells the daemon what was applied at plan.step (also a plan without
  // decision), so it can compare the ranks' plans step by step.
  Status Ack(const Plan& plan);

  // Waits until the daemon has attached this rank (registered, and its
  // Session stream answered), its first connection attempt has failed, or
  // `timeout`. OK when connected; else the reason (Unauthenticated,
  // FailedPrecondition for a refused registration, Unavailable naming the
  // target's problem, DeadlineExceeded for a stream the daemon did not
  // attach within attach_timeout, or DeadlineExceeded while still trying).
  Status WaitConnected(std::chrono::milliseconds timeout);

  // The problems seen since the last call, one entry per kind (ProblemKind
  // order). Cheap when there are none.
  std::vector<Problem> TakeProblems();

  // Checkpoints (docs/checkpoint.md). These two block the calling thread
  // on the network for up to `timeout`: call them when a training
  // checkpoint is written or loaded, never per step. They use a channel of
  // their own, so the report stream is not disturbed, and work before
  // Start() as well.
  //
  // The job's controller state, serialized (a gnmr.v1.ControllerState), to
  // be stored in the training checkpoint. It covers the steps the daemon
  // has decided: Flush() and wait until Counters().last_decided_step has
  // reached the last observed step first to include that step.
  StatusOr<std::string> ExportState(std::chrono::milliseconds timeout);

  // Replaces the job's controller state with one from ExportState (the
  // daemon checks it as it checks a registration). Needs admin rights
  // (ClientOptions::admin_token, or a Unix socket to a daemon without an
  // admin token). Returns the job generation the import started: once
  // Counters().generation reaches it, no decision of the state replaced
  // can be applied any more (docs/safety.md, "Generations"). In a
  // data-parallel job one rank imports and the others wait for the same
  // generation.
  StatusOr<uint64_t> ImportState(const std::string& state, std::chrono::milliseconds timeout);

  // Waits until every queued report and ack is written, or the timeout, or
  // the client is disconnected. True if the queue is empty.
  bool Flush(std::chrono::milliseconds timeout);

  // Stops the background thread promptly (cancels the RPCs in flight);
  // queued reports are discarded. Observe/PlanFor keep working, fail-open.
  void Stop();

  ClientCounters Counters() const;
  size_t num_units() const;
  const std::string& unit_name(UnitHandle unit) const;
  const ClientOptions& options() const;

  class Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gnmr
