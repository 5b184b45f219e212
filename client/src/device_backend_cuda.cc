// The CUDA DeviceStatsBackend: gnmr::GpuStats plus a pair of timing events
// around every launch (docs/architecture.md, "The client library": CUDA
// events time every statistics launch). cudart only.
//
// Timing pairs are indexed by GpuStats' launch sequence number, in
// kMaxPending + 1 slots: the pair of a new launch is never that of a launch
// still unread, and a launch that fails leaves every pair as it was (it
// gets no sequence number), so pairs and results cannot drift apart. The
// start event is recorded by GpuStats after its cross-stream ordering wait,
// so the time is this launch's alone. Poll reports a launch only once its
// end event has completed (recorded after GpuStats' own completion event),
// so reading the elapsed time never waits. GpuPath serialises every call.
#include <string>

#include <cuda_runtime.h>

#include "client/src/device_backend.h"
#include "kernels/cuda_util.h"
#include "kernels/gpu_stats.h"

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
        return Status(StatusCode::kUnavailable, "cudaEventCreate failed");
      }
    }
    return std::unique_ptr<DeviceStatsBackend>(std::move(b));
  }

  ~CudaStatsBackend() override {
    const int device = gpu_->device();
    gpu_.reset();  // waits for its own work, which the events follow
    cuda::DeviceGuard guard(device);
    for (Pair& p : pairs_) {
      if (p.start != nullptr) cudaEventDestroy(p.start);
      if (p.end != nullptr) cudaEventDestroy(p.end);
    }
  }

  Status SetTable(const std::vector<std::vector<TensorRef>>& units) override {
    return gpu_->SetTable(units);
  }

  Status RefreshPointers(const std::vector<const void*>& pointers) override {
    return gpu_->RefreshPointers(pointers);
  }

  Status Launch(void* stream, int64_t step) override {
    cuda::DeviceGuard guard(gpu_->device());  // the trainer keeps its context and errors
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(st, &cs) != cudaSuccess) cs = cudaStreamCaptureStatusNone;
    if (cs != cudaStreamCaptureStatusNone) {
      return FailedPrecondition(
          "Observe on a capturing stream: call it outside the CUDA graph (the client "
          "cannot follow graph replays)");
    }
    const uint64_t seq = gpu_->next_sequence();
    Pair& p = PairOf(seq);
    GNMR_RETURN_IF_ERROR(
        gpu_->Launch(stream, step, p.start));  // no sequence number taken: no pair changed hands
    p.seq = seq;
    p.timed = cudaEventRecord(p.end, st) == cudaSuccess;
    return Status::Ok();
  }

  void WaitOldest() override {
    uint64_t oldest = 0;
    if (!gpu_->OldestUnread(&oldest)) return;
    const Pair& p = PairOf(oldest);
    if (p.timed && p.seq == oldest) {
      cuda::DeviceGuard guard(gpu_->device());
      cuda::RelaxedCaptureMode relaxed;
      cudaEventSynchronize(p.end);  // after GpuStats' completion event
    } else {
      gpu_->WaitOldest();
    }
  }

  bool Poll(int64_t* step, std::vector<UnitStats>* stats, double* gpu_seconds) override {
    uint64_t oldest = 0;
    if (!gpu_->OldestUnread(&oldest)) return false;
    // The I/O thread polls while the trainer may capture a graph (global
    // mode): relaxed, these queries do not invalidate that capture.
    cuda::DeviceGuard guard(gpu_->device());
    cuda::RelaxedCaptureMode relaxed;
    const Pair& p = PairOf(oldest);
    bool timed = p.timed && p.seq == oldest;
    if (timed) {
      const cudaError_t q = cudaEventQuery(p.end);
      if (q == cudaErrorNotReady) return false;
      timed = q == cudaSuccess;
    }
    int64_t got = -1;
    uint64_t seq = 0;
    if (!gpu_->Poll(&got, stats, &seq)) return false;
    *gpu_seconds = -1.0;
    float ms = 0.0f;
    if (timed && seq == oldest && cudaEventElapsedTime(&ms, p.start, p.end) == cudaSuccess) {
      *gpu_seconds = static_cast<double>(ms) * 1e-3;
    }
    *step = got;
    return true;
  }

 private:
  static constexpr int kPairs = kMaxPending + 1;
  struct Pair {
    cudaEvent_t start = nullptr;
    cudaEvent_t end = nullptr;
    uint64_t seq = ~uint64_t{0};  // the launch these events time
    bool timed = false;
  };

  explicit CudaStatsBackend(std::unique_ptr<GpuStats> gpu) : gpu_(std::move(gpu)) {}
  Pair& PairOf(uint64_t seq) { return pairs_[seq % kPairs]; }

  std::unique_ptr<GpuStats> gpu_;
  Pair pairs_[kPairs];
};

static_assert(DeviceStatsBackend::kMaxPending == GpuStats::kRingSlots,
              "the timing pairs follow GpuStats' ring");

}  // namespace

StatusOr<std::unique_ptr<DeviceStatsBackend>> CreateCudaStatsBackend(int device) {
  return CudaStatsBackend::Create(device);
}

}  // namespace gnmr
