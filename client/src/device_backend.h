// DeviceStatsBackend: the client's view of the GPU statistics path, so that
// client.cc never names CUDA. The CUDA build links device_backend_cuda.cc
// (gnmr::GpuStats + timing events); a build without CUDA links
// device_backend_none.cc, whose factory reports Unavailable. CMake picks
// the file: no #ifdef in the client.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "gnmr/status.h"
#include "gnmr/tensor.h"

namespace gnmr {

class DeviceStatsBackend {
 public:
  // Launches whose results may wait for Poll (gnmr::GpuStats::kRingSlots):
  // a newer launch overwrites the oldest unread one.
  static constexpr int kMaxPending = 4;

  virtual ~DeviceStatsBackend() = default;
  // units[u]: the tensors of the u-th device unit. Synchronous; once.
  virtual Status SetTable(const std::vector<std::vector<TensorRef>>& units) = 0;
  // New data pointers, one per tensor in SetTable order.
  virtual Status RefreshPointers(const std::vector<const void*>& pointers) = 0;
  // Enqueues the statistics of every unit on `stream` (cudaStream_t, null:
  // the legacy default stream) between two timing events. No host sync.
  // FailedPrecondition on a capturing stream (graphs: use GpuStats).
  virtual Status Launch(void* stream, int64_t step) = 0;
  // Non-blocking: the oldest completed launch's statistics (SetTable unit
  // order) and the GPU time between its timing events (< 0: unknown).
  virtual bool Poll(int64_t* step, std::vector<UnitStats>* stats, double* gpu_seconds) = 0;
  // Blocks until the oldest unread launch has completed (a host
  // synchronisation; the same-step guard's one). No-op if none is pending.
  virtual void WaitOldest() = 0;
};

// Unavailable without a usable CUDA device, or when built without CUDA.
StatusOr<std::unique_ptr<DeviceStatsBackend>> CreateCudaStatsBackend(int device);

// Tests: replaces CreateCudaStatsBackend for clients created afterwards (an
// empty function restores it).
using DeviceBackendFactory = std::function<StatusOr<std::unique_ptr<DeviceStatsBackend>>(int)>;
void SetDeviceBackendFactoryForTesting(DeviceBackendFactory factory);
StatusOr<std::unique_ptr<DeviceStatsBackend>> CreateDeviceStatsBackend(int device);

}  // namespace gnmr
