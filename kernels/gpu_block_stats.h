// Statistics of block-scaled tensors (MXFP8, MXFP4, NVFP4, FP8 1x128 /
// 128x128) on a CUDA device, bit-identical to gnmr::cpu::ComputeBlockStats
// (docs/statistics.md, "Block-scaled formats"). Public header: it names no
// CUDA type, so code built without CUDA can include it; the library
// (gnmr_cuda_stats) exists only when the build found a CUDA toolkit.
//
// Use:
//   auto g = GpuBlockStats::Create(device);     // Unavailable: no GPU/driver
//   g->Enqueue(tensors, count, stream);         // no host sync
//   ... later: g->Poll(&stats) (non-blocking) or g->Wait(&stats)
//
// One request at a time: Enqueue uploads the descriptors, runs the kernels
// on `stream` (a cudaStream_t as void*; nullptr = the legacy default
// stream) and copies one BlockStats into pinned memory behind an event;
// Poll / Wait hand it out. A second Enqueue before the first result was
// taken is refused (FailedPrecondition), which keeps the staging and
// scratch buffers free of races without any host wait. Why not a ring as
// GpuStats has: block-scaled tensors are observed per call (a layer's
// forward tensors), not per step, and the caller decides when to collect.
//
// Scratch memory grows to the largest request (device allocations in
// Enqueue when it grows; nothing is allocated once it fits). Not
// capturable in a CUDA graph (FailedPrecondition on a capturing stream):
// the descriptors are staged in host memory per request.
//
// Threads and the trainer's CUDA state are handled as in GpuStats
// (kernels/gpu_stats.h): each call makes the device current for its duration,
// then restores the thread's context and last-error state. One
// GpuBlockStats is used by one thread at a time.
//
// Memory: data, scales and source must be readable by the device (device,
// managed, VMM-mapped or mapped pinned memory of this device; checked
// before anything is enqueued, InvalidArgument otherwise).
#pragma once

#include <cstddef>
#include <memory>

#include "gnmr/block_tensor.h"
#include "gnmr/status.h"

namespace gnmr {

class GpuBlockStats {
 public:
  // Unavailable when the device cannot be used (no driver, no device,
  // ordinal out of range, no kernel image for it).
  static StatusOr<std::unique_ptr<GpuBlockStats>> Create(int device);

  ~GpuBlockStats();  // waits for its own work, then frees
  GpuBlockStats(const GpuBlockStats&) = delete;
  GpuBlockStats& operator=(const GpuBlockStats&) = delete;

  // Enqueues the statistics of `count` tensors (one unit, in order) on
  // `stream`. Each tensor must pass gnmr::cpu::CheckBlockTensor's rules,
  // have `device` equal to this device and device-readable memory
  // (InvalidArgument naming the tensor otherwise); at most 65,535 tensors.
  // FailedPrecondition while an earlier result has not been taken.
  Status Enqueue(const BlockTensorRef* tensors, size_t count, void* stream);

  // Non-blocking: true and the result when the pending request completed.
  bool Poll(BlockStats* out);
  // Blocks until the pending request completed (host synchronisation on
  // its event only). FailedPrecondition when nothing is pending.
  Status Wait(BlockStats* out);

  int device() const;

 private:
  struct Impl;
  explicit GpuBlockStats(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gnmr
