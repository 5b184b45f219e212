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
#include "gnmr/config.h"
#include "gnmr/export.h"
#include "gnmr/status.h"
#include "gnmr/tensor.h"

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

// A unit, numbered 0, 1, ... in AddUnit order.
using UnitHandle = uint32_t;

// One unit in recovery at the plan's step.
struct PlanEntry {
  UnitHandle unit = 0;
  Action action = Action::kPromote;
  // Treatment of this step's gradient when first_step (lag-0 promote).
  EntryTreatment entry = EntryTreatment::kNone;
  // step == since: skip, reset_state and the entry treatment apply only on
  // the first step in force; promote and clip on every step in force.
  bool first_step = false;
  int64_t since = 0;  // first step in force
  int64_t until = 0;  // first step no longer in force
  double ref_norm = 0.0;
  double clip_min_scale = 0.0;
  // This rank's estimate of the unit's gradient norm at the plan's step,
  // from Observe(step): sqrt(local sumsq * shard_count) (exact for a
  // replicated unit; assumes evenly spread energy for a sharded one). NaN
  // if Observe(step) was not called.
  double norm = 0.0;
  // ClipScale(ref_norm, norm, clip_min_scale): the factor for clip.
  double scale = 1.0;
  // A candidate denied by the budget, clipped on this step only (denied:
  // clip, lag 0): action clip, since = step, until = step + 1. Applied like
  // any clip; the flag tells a trainer's logs it held no budget.
  bool denied_clip = false;
  // Why the unit is in recovery: the trigger and figures of the sample that
  // admitted it (a denied clip: that denied it), as the decision carries
  // them (docs/controller.md, "Why a unit is in recovery"). kNone and 0
  // from a daemon that does not send them.
  Trigger trigger = Trigger::kNone;
  double gnmr = 0.0;
  double delta = 0.0;
  double fwd_ratio = 0.0;         // F, vs tau_forward
  double saturation_ratio = 0.0;  // S, vs tau_saturation
  double underflow_ratio = 0.0;   // U, vs underflow_fraction
};

// Why a plan has no decision (docs/safety.md). Every reason but kNone and
// kNoDecisionYet counts as a missed decision (ClientCounters).
enum class MissReason : int {
  kNone = 0,           // the plan has its decision
  kNoDecisionYet = 1,  // nothing can cover this step yet (the first steps of
                       // a generation: no decision applies this early)
  kTimeout = 2,        // due but not here within decision_wait (or the daemon
                       // was found slow at an earlier step and sent nothing since)
  kDisconnected = 3,   // due while no daemon was connected (fail-open)
  kNotReceived = 4,    // made, but this rank does not hold it (it attached
                       // after the daemon's recent history)
};
GNMR_EXPORT const char* MissReasonName(MissReason r);

// The actions in force at one step.
struct GNMR_EXPORT Plan {
  int64_t step = -1;
  // false: no decision covers this step on this rank; the plan is empty
  // (no unit in recovery at `step`, fail-open) and miss_reason says why.
  bool has_decision = false;
  MissReason miss_reason = MissReason::kNoDecisionYet;
  uint64_t generation = 0;
  int64_t observed_step = -1;
  int64_t apply_step = -1;
  uint64_t sequence = 0;
  uint64_t digest = 0;
  // The decision observed this very step (lag 0) and saw a non-finite
  // gradient on some rank: skip the whole optimizer step.
  bool global_skip = false;
  // Same-step guard: Observe(step) found a NaN/Inf in a unit of this rank.
  bool nonfinite_observed = false;
  // Skip the optimizer step of `step`: global_skip || nonfinite_observed.
  bool skip_step = false;
  std::vector<PlanEntry> entries;  // unit order

  // Whether `unit` is in recovery at this step (nullptr if not).
  const PlanEntry* Find(UnitHandle unit) const;
};

// clamp(ref_norm / norm, min_scale, 1); 1 if norm is 0 or ref_norm is not
// a number, min_scale if norm is NaN or infinite.
GNMR_EXPORT double ClipScale(double ref_norm, double norm, double min_scale);

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
