// GpuStats' state (internal; gpu_stats.cc: tables and staging,
// gpu_stats_launch.cc: launches and results).
//
// Host memory the GPU reads asynchronously is never rewritten while a
// queued copy may still read it, and never waited for:
// - pointer tables and apply scales go through kStagingSlots pinned slots
//   used in turn, each with an event recorded after its upload; a slot
//   whose previous upload has not run yet is not reused (the operation
//   returns Unavailable instead of waiting);
// - captured launches upload from a fixed table (graph_stage: replays read
//   it at replay time), rewritten only when no replay is in flight.
// Device tables, item/segment/unit outputs and result slots are shared by
// all operations, which order_event chains on the GPU (each waits for the
// previous one, whatever its stream; graph replays through external event
// nodes).
#pragma once

#include <atomic>
#include <vector>

#include <cuda_runtime.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "kernels/cuda/launch_ring.h"
#include "kernels/cuda/stats_kernels.h"
#include "kernels/cuda_util.h"
#include "kernels/gpu_stats.h"

namespace gnmr {

static_assert(GpuStats::kRingSlots == cuda::ResultRing::kSlots, "one ring");

struct GpuStats::Impl {
  static constexpr int kGraphSlot = cuda::ResultRing::kGraphSlot;
  static constexpr int kStaging = GpuStats::kStagingSlots;

  int device = 0;
  cuda::LaunchConfig config;
  cudaStream_t setup_stream = nullptr;  // SetTable's uploads (non-blocking)

  // Tables (written by SetTable only, while `ready` is false).
  size_t n_units = 0, n_tensors = 0;
  uint64_t n_items = 0, n_segs = 0;
  cuda::DevBuf tensors, ptrs, items, segs, units, item_out, seg_out, unit_out, scales,
      replay_counter;
  cuda::Tables tables{};
  std::vector<uint64_t> bytes;  // per tensor, SetTable order
  std::atomic<bool> ready{false};

  // Results: kRingSlots + 1 slots of slot_bytes (n_units UnitStats, then
  // the 8-byte replay stamp).
  size_t slot_bytes = 0;
  cuda::PinnedBuf ring_host;
  cudaEvent_t events[cuda::ResultRing::kSlots + 1] = {};

  // Staging (training thread only): slot k holds n_tensors pointers then
  // n_units scales.
  size_t stage_bytes = 0;
  cuda::PinnedBuf stage_host, graph_stage;
  cudaEvent_t stage_events[kStaging] = {};
  uint64_t stage_uses = 0;
  std::vector<const void*> current;  // device addresses in force
  bool table_dirty = false;          // the device table may differ from `current`
  bool graph_captured = false;

  cudaEvent_t order_event = nullptr;  // recorded after every operation

  Mutex mu;  // ring bookkeeping (Launch vs Poll)
  cuda::ResultRing ring GNMR_GUARDED_BY(mu);

  ~Impl();
  // Waits (host) for every operation enqueued so far, replays included.
  void WaitForOwnWork();
  void FreeAll();
  const UnitStats* SlotStats(int slot) const {
    return reinterpret_cast<const UnitStats*>(ring_host.p + slot * slot_bytes);
  }
  uint64_t SlotStamp(int slot) const;
  // A staging slot whose previous upload has run (Unavailable if none).
  Status AcquireStage(unsigned char** slot, int* index);
  // Enqueues the staged uploads of `slot` (pointers when dirty, scales
  // when given) on `st` and records its event.
  cudaError_t UploadStage(unsigned char* slot, int index, const float* scales, cudaStream_t st);
};

// Records `ev` on `st`; inside a stream capture as an external event node,
// so graph replays record it too.
cudaError_t RecordEvent(cudaEvent_t ev, cudaStream_t st, bool captured);
// Whether `st` is capturing (false also when that cannot be told).
bool IsCapturing(cudaStream_t st);

}  // namespace gnmr
