// Host-side helpers of gnmr_cuda_stats and its CUDA users (internal; CUDA
// runtime only). Why each exists:
// - DeviceGuard: the library runs on the trainer's threads; it makes its
//   device current for a call and gives the thread its own context back.
// - RelaxedCaptureMode: event queries and synchronisations from a polling
//   thread would invalidate a graph capture another thread of the trainer
//   runs in global mode (PyTorch's default); in relaxed mode they do not.
// - CheckDeviceReadable: a kernel reading memory the device cannot reach
//   faults, and that error is sticky: it would kill the trainer's CUDA
//   context. Pointers are checked once, when they are handed over.
#pragma once

#include <cuda.h>  // driver types only (see ContextFns)
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/status.h"

namespace gnmr::cuda {

inline Status CudaError(cudaError_t e, const char* what) {
  return Status(StatusCode::kInternal, std::string(what) + ": " + cudaGetErrorString(e));
}

// Device allocation freed on destruction.
struct DevBuf {
  void* p = nullptr;
  ~DevBuf() {
    if (p != nullptr) cudaFree(p);
  }
  Status Alloc(size_t bytes) {
    if (p != nullptr) cudaFree(p);
    p = nullptr;
    if (bytes == 0) return Status::Ok();
    cudaError_t e = cudaMalloc(&p, bytes);
    return e == cudaSuccess ? Status::Ok() : CudaError(e, "cudaMalloc");
  }
};

// cuCtxGetCurrent / cuCtxSetCurrent through cudart's entry-point lookup:
// the library links cudart only, never libcuda. Null if unavailable.
struct ContextFns {
  CUresult (*get)(CUcontext*) = nullptr;
  CUresult (*set)(CUcontext) = nullptr;
};
inline const ContextFns& DriverContextFns() {
  static const ContextFns fns = [] {
    ContextFns f;
    void* get = nullptr;
    void* set = nullptr;
    cudaDriverEntryPointQueryResult q1{}, q2{};
#if CUDART_VERSION >= 12050
    auto lookup = [](const char* name, void** fn, cudaDriverEntryPointQueryResult* q) {
      return cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, q);
    };
#else
    auto lookup = [](const char* name, void** fn, cudaDriverEntryPointQueryResult* q) {
      return cudaGetDriverEntryPoint(name, fn, cudaEnableDefault, q);
    };
#endif
    if (lookup("cuCtxGetCurrent", &get, &q1) == cudaSuccess &&
        lookup("cuCtxSetCurrent", &set, &q2) == cudaSuccess &&
        q1 == cudaDriverEntryPointSuccess && q2 == cudaDriverEntryPointSuccess) {
      f.get = reinterpret_cast<CUresult (*)(CUcontext*)>(get);
      f.set = reinterpret_cast<CUresult (*)(CUcontext)>(set);
    } else {
      cudaGetLastError();
    }
    return f;
  }();
  return fns;
}

// Saves the thread's current context and restores exactly that one: a
// thread without a context gets none back (restoring "device 0" would
// create a context on GPU 0 in every rank), a green or non-primary
// context is kept. Without the entry points, the device number.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    const ContextFns& f = DriverContextFns();
    have_context_ = f.get != nullptr && f.get(&previous_context_) == CUDA_SUCCESS;
    int now = -1;
    if (cudaGetDevice(&now) != cudaSuccess) {
      cudaGetLastError();
      now = -1;
    }
    if (!have_context_) previous_device_ = now;
    if (now != device || (have_context_ && previous_context_ == nullptr)) cudaSetDevice(device);
  }
  ~DeviceGuard() {
    if (have_context_) {
      DriverContextFns().set(previous_context_);  // null unbinds: no new context
    } else if (previous_device_ >= 0) {
      int now = -1;
      if (cudaGetDevice(&now) == cudaSuccess && now != previous_device_) {
        cudaSetDevice(previous_device_);
      }
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  bool have_context_ = false;
  CUcontext previous_context_ = nullptr;
  int previous_device_ = -1;
};

class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;  // the caller's, after entry
};

// OK if kernels on `device` may read `p` (aligned to `align` bytes): device
// or managed memory of that device (stream-ordered and virtual-memory
// allocations report as device memory), pinned host memory mapped for it,
// or pageable host memory where the device can read it (HMM, ATS).
// Sets *device_ptr to the address the kernels must use (differs from p for
// registered host memory on some systems). Pageable host memory is refused.
inline Status CheckDeviceReadable(const void* p, int device, size_t align,
                                  const void** device_ptr) {
  if (p == nullptr) return InvalidArgument("null pointer");
  if (reinterpret_cast<uintptr_t>(p) % align != 0) {
    return InvalidArgument("pointer is not " + std::to_string(align) + "-byte aligned");
  }
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it for the caller
    return InvalidArgument(std::string("pointer attributes: ") + cudaGetErrorString(e));
  }
  switch (a.type) {
    case cudaMemoryTypeHost:
      if (a.devicePointer == nullptr) {
        return InvalidArgument("pinned host memory not mapped for the device");
      }
      *device_ptr = a.devicePointer;
      return Status::Ok();
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged:
      if (a.device != device) {
        return InvalidArgument("memory of CUDA device " + std::to_string(a.device) + ", not " +
                               std::to_string(device));
      }
      *device_ptr = a.devicePointer != nullptr ? a.devicePointer : p;
      return Status::Ok();
    default: {
      // Pageable host memory: readable only where the device reaches it
      // (HMM or ATS: cudaDevAttrPageableMemoryAccess), e.g. Grace Hopper.
      int pageable = 0;
      if (cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, device) !=
          cudaSuccess) {
        cudaGetLastError();
        pageable = 0;
      }
      if (pageable == 1) {
        *device_ptr = p;
        return Status::Ok();
      }
      return InvalidArgument("not device-accessible memory (pageable host memory?)");
    }
  }
}

}  // namespace gnmr::cuda
