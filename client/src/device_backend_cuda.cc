// The CUDA DeviceStatsBackend: gnmr::GpuStats plus a pair of timing events
// around every launch (SPEC section 5: "CUDA events around the stats launch
// always"). cudart only.
//
// GpuStats keeps kRingSlots unread results and drops the oldest on
// overflow; the timing pairs follow the same FIFO rule, so the front pair
// always belongs to the oldest unread launch. Poll reports a launch only
// once its end event has completed (recorded after GpuStats' own completion
// event), so reading the elapsed time never waits.
#include <cuda_runtime.h>

#include <string>

#include "client/src/device_backend.h"
#include "gnmr/gpu_stats.h"
#include "kernels/cuda/cuda_util.h"

namespace gnmr {
namespace {

class CudaStatsBackend : public DeviceStatsBackend {
 public:
  static StatusOr<std::unique_ptr<DeviceStatsBackend>> Create(int device) {
    StatusOr<std::unique_ptr<GpuStats>> g = GpuStats::Create(device);
    if (!g.ok()) return g.status();
    std::unique_ptr<CudaStatsBackend> b(new CudaStatsBackend(std::move(g).value()));
    cuda::DeviceGuard guard(device);  // the events belong to the device's context
    for (Pair& p : b->pairs_) {
      // Timing events (default flags), unlike GpuStats' completion events.
      if (cudaEventCreate(&p.start) != cudaSuccess || cudaEventCreate(&p.end) != cudaSuccess) {
        cudaGetLastError();
        return Status(StatusCode::kUnavailable, "cudaEventCreate failed");
      }
    }
    return std::unique_ptr<DeviceStatsBackend>(std::move(b));
  }

  ~CudaStatsBackend() override {
    cuda::DeviceGuard guard(gpu_->device());
    for (Pair& p : pairs_) {
      if (p.start != nullptr) cudaEventDestroy(p.start);
      if (p.end != nullptr) cudaEventDestroy(p.end);
    }
  }

  Status SetTable(const std::vector<std::vector<TensorRef>>& units) override {
    head_ = count_ = 0;
    return gpu_->SetTable(units);
  }

  Status RefreshPointers(const std::vector<const void*>& pointers) override {
    return gpu_->RefreshPointers(pointers);
  }

  Status Launch(void* stream, int64_t step) override {
    cuda::DeviceGuard guard(gpu_->device());  // the trainer keeps its current context
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(st, &cs) != cudaSuccess) {
      cudaGetLastError();
      cs = cudaStreamCaptureStatusNone;
    }
    if (cs != cudaStreamCaptureStatusNone) {
      return FailedPrecondition(
          "Observe on a capturing stream: call it outside the CUDA graph (the client "
          "cannot follow graph replays)");
    }
    if (count_ == kMaxPending) {  // GpuStats drops the oldest unread too
      head_ = (head_ + 1) % kMaxPending;
      --count_;
    }
    Pair& p = pairs_[(head_ + count_) % kMaxPending];
    const bool timed = cudaEventRecord(p.start, st) == cudaSuccess;
    Status s = gpu_->Launch(stream, step);
    if (!s.ok()) {
      cudaGetLastError();
      return s;
    }
    p.timed = timed && cudaEventRecord(p.end, st) == cudaSuccess;
    if (!p.timed) cudaGetLastError();
    p.step = step;
    ++count_;
    return Status::Ok();
  }

  void WaitOldest() override {
    if (count_ == 0) return;
    cuda::DeviceGuard guard(gpu_->device());
    cuda::RelaxedCaptureMode relaxed;
    Pair& p = pairs_[head_];
    if (p.timed && cudaEventSynchronize(p.end) != cudaSuccess) cudaGetLastError();
  }

  bool Poll(int64_t* step, std::vector<UnitStats>* stats, double* gpu_seconds) override {
    if (count_ == 0) return false;
    // The I/O thread polls while the trainer may capture a graph (global
    // mode): relaxed, these queries do not invalidate that capture.
    cuda::RelaxedCaptureMode relaxed;
    Pair& p = pairs_[head_];
    if (p.timed) {
      const cudaError_t q = cudaEventQuery(p.end);
      if (q == cudaErrorNotReady) return false;
      if (q != cudaSuccess) {
        cudaGetLastError();
        p.timed = false;
      }
    }
    int64_t got = -1;
    if (!gpu_->Poll(&got, stats)) return false;
    *gpu_seconds = -1.0;
    float ms = 0.0f;
    if (p.timed && got == p.step) {
      if (cudaEventElapsedTime(&ms, p.start, p.end) == cudaSuccess) {
        *gpu_seconds = static_cast<double>(ms) * 1e-3;
      } else {
        cudaGetLastError();
      }
    }
    *step = got;
    head_ = (head_ + 1) % kMaxPending;
    --count_;
    return true;
  }

 private:
  struct Pair {
    cudaEvent_t start = nullptr;
    cudaEvent_t end = nullptr;
    int64_t step = -1;
    bool timed = false;
  };

  explicit CudaStatsBackend(std::unique_ptr<GpuStats> gpu) : gpu_(std::move(gpu)) {}

  std::unique_ptr<GpuStats> gpu_;
  Pair pairs_[kMaxPending];
  int head_ = 0;   // oldest unread launch
  int count_ = 0;  // unread launches
};

static_assert(DeviceStatsBackend::kMaxPending == GpuStats::kRingSlots,
              "the timing FIFO must follow GpuStats' ring");

}  // namespace

StatusOr<std::unique_ptr<DeviceStatsBackend>> CreateCudaStatsBackend(int device) {
  return CudaStatsBackend::Create(device);
}

}  // namespace gnmr
