#include <cstdint>

#include "tests/kernels/gpu_gate.h"

namespace gnmr::testing {
namespace {

__device__ uint64_t GlobalNanos() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void SpinUntilOpen(const volatile int* flag, uint64_t max_nanos) {
  const uint64_t start = GlobalNanos();
  while (*flag == 0 && GlobalNanos() - start < max_nanos) __nanosleep(1000);
}

}  // namespace

GpuGate::GpuGate() {
  void* p = nullptr;
  if (cudaHostAlloc(&p, sizeof(int), cudaHostAllocMapped) != cudaSuccess) return;
  host_ = static_cast<volatile int*>(p);
  *host_ = 0;
  if (cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_), p, 0) != cudaSuccess) {
    cudaFreeHost(p);
    host_ = nullptr;
  }
}

GpuGate::~GpuGate() {
  if (host_ != nullptr) {
    Open();
    cudaDeviceSynchronize();
    cudaFreeHost(const_cast<int*>(host_));
  }
}

cudaError_t GpuGate::Block(cudaStream_t stream, double max_seconds) {
  if (host_ == nullptr) return cudaErrorInvalidValue;
  *host_ = 0;
  SpinUntilOpen<<<1, 1, 0, stream>>>(device_, static_cast<uint64_t>(max_seconds * 1e9));
  return cudaGetLastError();
}

void GpuGate::Open() {
  if (host_ != nullptr) *host_ = 1;
}

}  // namespace gnmr::testing
