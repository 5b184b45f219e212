// A gate for GPU tests: Block(stream) enqueues a kernel that spins until
// Open() is called from the host (mapped pinned memory), so a test can hold
// a stream's later work back deterministically, without timing. The kernel
// gives up by itself after `max_seconds` so a failing test cannot hang the
// device.
#pragma once

#include <cuda_runtime.h>

namespace gnmr::testing {

class GpuGate {
 public:
  GpuGate();
  ~GpuGate();
  GpuGate(const GpuGate&) = delete;
  GpuGate& operator=(const GpuGate&) = delete;

  bool ok() const { return host_ != nullptr; }
  cudaError_t Block(cudaStream_t stream, double max_seconds = 120.0);
  void Open();

 private:
  volatile int* host_ = nullptr;
  int* device_ = nullptr;
};

}  // namespace gnmr::testing
