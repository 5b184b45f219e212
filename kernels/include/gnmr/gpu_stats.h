// Per-unit gradient statistics on a CUDA device (SPEC section 5),
// bit-identical to the CPU path (kernels/stats_order.h). Public header: it
// names no CUDA type, so code built without CUDA can include it; the
// library gnmr_cuda_stats exists only when the build found a CUDA
// toolkit (GNMR_HAVE_CUDA).
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
// never invalidates a global-mode graph capture of the trainer). Every call
// makes the GpuStats' device current for its duration and then gives the
// calling thread its own current device back.
//
// Memory: every pointer handed over (tensor data, scale_inv_ptr) must be
// readable by the device: device or managed memory of that device, or
// mapped pinned host memory. Anything else is refused with InvalidArgument
// up front (a kernel fault would be a sticky error in the trainer's CUDA
// context). Needs sm_80 or newer (warp reductions).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "gnmr/tensor.h"

namespace gnmr {

class GpuStats {
 public:
  // Result slots in pinned host memory: at most this many launches can be
  // waiting for Poll; a newer launch overwrites the oldest unread one.
  static constexpr int kRingSlots = 4;

  // Unavailable when the device cannot be used (no driver, no device,
  // ordinal out of range); callers then use the CPU path (gnmr::cpu).
  static StatusOr<std::unique_ptr<GpuStats>> Create(int device);

  ~GpuStats();
  GpuStats(const GpuStats&) = delete;
  GpuStats& operator=(const GpuStats&) = delete;

  // Builds the device tables: units[u] lists unit u's tensors in order.
  // Tensors must be device memory of this device (or numel 0), any dtype,
  // any alignment; fp8 scale_inv must be finite (or a scale_inv_ptr given).
  // Synchronous (allocations, copies); call once at registration.
  // Invalidates pending results, and graphs captured from earlier Launches
  // (they point at the old tables: capture again). On error no table is
  // left: Launch, ApplyScale and RefreshPointers return FailedPrecondition
  // until a SetTable succeeds.
  Status SetTable(const std::vector<std::vector<TensorRef>>& units);

  // New data pointers, one per tensor in SetTable order (units flattened).
  // Shapes and dtypes must not change. Host-side only: the pointers go to
  // a pinned staging table that every Launch / ApplyScale uploads first on
  // its stream (so graph replays pick them up too). Waits for the previous
  // launch's upload to finish before overwriting the staging table.
  Status RefreshPointers(const std::vector<const void*>& pointers);

  // Enqueues the statistics of every unit on `stream`: the pointer table
  // upload, the item kernel, the segment and unit reduction kernels, a copy
  // into the next pinned ring slot and an event. No allocation, no host
  // synchronisation. `step` is returned by Poll with the slot (-1: the
  // launch's sequence number).
  //
  // CUDA graphs: called while `stream` is capturing, it uses a dedicated
  // slot (recorded as an external event, so every replay refills it) and
  // queues nothing; after each cudaGraphLaunch call OnGraphReplay(step) so
  // that Poll returns the replay's results. One slot: a replay's results
  // must be polled before the next replay lands (a newer replay supersedes
  // an unread one, and a Poll racing a replay's copy may see a mix of the
  // two), and one capture should hold one Launch. The destructor and
  // SetTable free what captured graphs point at.
  Status Launch(void* stream, int64_t step = -1);
  void OnGraphReplay(int64_t step);

  // Non-blocking: if the oldest pending launch (then a pending graph
  // replay) has completed, moves its results into `stats` (one per unit,
  // SetTable order), sets `slot_step` and returns true.
  bool Poll(int64_t* slot_step, std::vector<UnitStats>* stats);

  // Scales every tensor of unit u in place by per_unit_scale[u] (clip):
  // 1 leaves the unit untouched, 0 writes +0 to every element (skip).
  // Other values: x * s in fp32 (fp8: the stored value, scale_inv kept),
  // rounded to nearest even to the tensor's dtype (fp8: saturating to the
  // largest finite value; NaN stays NaN). Asynchronous on `stream`.
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
