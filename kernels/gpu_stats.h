// Per-unit gradient statistics on a CUDA device (docs/statistics.md, "What a
// rank computes per unit"), bit-identical to the CPU path
// (kernels/stats_order.h). Public header: it names no CUDA type, so code built
// without CUDA can include it; the library gnmr_cuda_stats exists only when the
// build found a CUDA toolkit (GNMR_HAVE_CUDA).
//
// Use:
//   auto gpu = GpuStats::Create(device);        // Unavailable: no GPU/driver
//   gpu->SetTable(units);                       // once, at registration
//   each step: gpu->RefreshPointers(ptrs);      // when grads moved
//              gpu->Launch(stream);             // no host sync, graph-capturable
//   I/O thread: gpu->Poll(&step, &stats);       // non-blocking
//
// Launch and ApplyScale enqueue on the caller's stream (a cudaStream_t
// passed as void*; nullptr = the legacy default stream of the GpuStats'
// device). One GpuStats is used by one training thread at a time; Poll may
// run on another thread (it queries events in relaxed capture mode, so it
// never invalidates a global-mode graph capture of the trainer).
//
// Threads and the trainer's CUDA state: every call makes the GpuStats'
// device current for its duration and then gives the calling thread back
// its own context (none if it had none: no thread ever gets a context on
// another GPU), and leaves the thread's last-error state as it found it
// (a pending error of the trainer is not consumed, our own are cleared).
//
// Ordering: the operations of one GpuStats share device tables and result
// slots, so each Launch / ApplyScale first waits (on the GPU, an event
// wait) for the previous one, whatever stream that ran on; graph replays
// take part through external event nodes. Nothing here waits on the host
// except SetTable, WaitOldest and the destructor.
//
// Memory: every pointer handed over (tensor data, scale_inv_ptr) must be
// readable by the device: device or managed memory of that device,
// virtual-memory mappings (cuMemCreate / cuMemMap, e.g. PyTorch's
// expandable segments: every mapped chunk a tensor spans is checked), or
// mapped pinned host memory. Anything else is refused with InvalidArgument
// up front (a kernel fault would be a sticky error in the trainer's CUDA
// context). Needs sm_80 or newer (warp reductions).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "gnmr/status.h"
#include "gnmr/tensor.h"

namespace gnmr {

class GpuStats {
 public:
  // Result slots in pinned host memory: at most this many launches can be
  // waiting for Poll; a newer launch overwrites the oldest unread one.
  static constexpr int kRingSlots = 4;
  // Host staging slots for pointer tables and apply scales, used in turn:
  // an upload needs the one used kStagingSlots uploads ago to be done. If
  // the device is that far behind, Launch / ApplyScale return Unavailable
  // (that step is skipped) rather than wait.
  static constexpr int kStagingSlots = 16;

  // Unavailable when the device cannot be used (no driver, no device,
  // ordinal out of range); callers then use the CPU path (gnmr::cpu).
  static StatusOr<std::unique_ptr<GpuStats>> Create(int device);

  ~GpuStats();  // waits for this GpuStats' own work, then frees
  GpuStats(const GpuStats&) = delete;
  GpuStats& operator=(const GpuStats&) = delete;

  // Builds the device tables: units[u] lists unit u's tensors in order.
  // Tensors must be readable by this device (or numel 0), any dtype, any
  // alignment; fp8 scale_inv must be finite (or a scale_inv_ptr given);
  // saturation_magnitude neither negative nor NaN (read here, once).
  // Synchronous: waits for this GpuStats' own work (never the whole
  // device, so it is legal while another thread captures a graph),
  // allocates only when the tables grow, uploads on a private stream. Call
  // once, at registration. Invalidates pending results, and graphs
  // captured from earlier Launches (capture again). On error no table is
  // left: Launch, ApplyScale and RefreshPointers return FailedPrecondition
  // until a SetTable succeeds.
  Status SetTable(const std::vector<std::vector<TensorRef>>& units);

  // New data pointers, one per tensor in SetTable order (units flattened).
  // Shapes and dtypes must not change. Host-side only and non-blocking:
  // the next Launch / ApplyScale uploads them through a staging slot of its
  // own. After a graph capture it also updates the table the replays read;
  // if a replay is still in flight then, it changes nothing and returns
  // Unavailable (refresh once the replay completed).
  Status RefreshPointers(const std::vector<const void*>& pointers);

  // Enqueues the statistics of every unit on `stream`: the ordering wait,
  // the pointer table upload (when pointers changed), the item kernels
  // (one per dtype present), the segment and unit reduction kernels, a copy
  // into the next pinned ring slot and an event. No allocation, no host
  // synchronisation. `step` is returned by Poll with the slot (-1: the
  // launch's sequence number). `start_event` (a cudaEvent_t, optional) is
  // recorded on `stream` after the ordering wait, before the first
  // operation: the GPU time of this launch alone runs from it.
  //
  // CUDA graphs: called while `stream` is capturing, it uses a dedicated
  // slot (filled by every replay, recorded as external event nodes) and
  // queues nothing. Call OnGraphReplay(step) before each cudaGraphLaunch of
  // a graph holding a Launch: Poll then returns that replay's results with
  // `step` (replays stamp their results, so an earlier replay is never
  // labelled with a later step). One slot: a newer replay supersedes an
  // unread one, and a replay landing while Poll copies the slot may mix the
  // two; one capture should hold one Launch. The destructor and SetTable
  // free what captured graphs point at.
  Status Launch(void* stream, int64_t step = -1, void* start_event = nullptr);
  void OnGraphReplay(int64_t step);

  // Non-blocking: if the oldest pending launch (then a pending graph
  // replay) has completed, moves its results into `stats` (one per unit,
  // SetTable order), sets `slot_step` (and `sequence`, the launch's
  // sequence number; ~0 for a replay) and returns true.
  bool Poll(int64_t* slot_step, std::vector<UnitStats>* stats, uint64_t* sequence = nullptr);

  // The sequence number the next successful regular launch gets (a launch
  // that fails gets none), and the oldest unread one (false: none).
  uint64_t next_sequence() const;
  bool OldestUnread(uint64_t* sequence) const;
  // Blocks until the oldest unread launch (else the pending replay) has
  // completed: a host synchronisation, for the same-step guard.
  void WaitOldest();

  // Scales every tensor of unit u in place by per_unit_scale[u] (clip):
  // 1 leaves the unit untouched, 0 writes +0 to every element (skip).
  // Other values: x * s in fp32 (fp8: the stored value, scale_inv kept),
  // rounded to nearest even to the tensor's dtype (fp8: saturating to the
  // largest finite value; NaN stays NaN). Asynchronous on `stream`, ordered
  // after this GpuStats' previous work; not capturable (FailedPrecondition
  // on a capturing stream).
  Status ApplyScale(const std::vector<float>& per_unit_scale, void* stream);

  int device() const;
  size_t num_units() const;
  size_t num_tensors() const;
  uint64_t num_items() const;

 private:
  struct Impl;
  explicit GpuStats(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gnmr
