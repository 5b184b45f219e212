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
// passed as void*; nullptr = the legacy default stream). One GpuStats is
// used by one training thread at a time; Poll may run on another thread.
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
  // any alignment; fp8 scale_inv must be finite. Synchronous (allocations,
  // copies); call once at registration. Invalidates pending results.
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
  // that Poll returns the replay's results.
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
