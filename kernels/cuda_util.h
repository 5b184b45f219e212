// Host-side helpers of gnmr_cuda_stats and its CUDA users (internal; CUDA
// runtime only). Why each exists:
// - DeviceGuard: the library runs on the trainer's threads (and the
//   client's I/O thread). Every entry point that calls CUDA holds one: it
//   makes the library's device current and, on exit, gives the thread its
//   own context back (none if it had none: restoring "device 0" would
//   create a context on GPU 0 in every rank) and its last-error state (a
//   trainer's unchecked error is never consumed; errors of our own calls
//   never leak out).
// - RelaxedCaptureMode: event queries and synchronisations from a polling
//   thread would invalidate a graph capture another thread of the trainer
//   runs in global mode (PyTorch's default); in relaxed mode they do not.
// - CheckDeviceReadable: a kernel reading memory the device cannot reach
//   faults, and that error is sticky: it would kill the trainer's CUDA
//   context. Pointers are checked once, when they are handed over.
#pragma once

#include <cstdint>
#include <string>

#include <cuda_runtime.h>

#include "gnmr/status.h"
#include "kernels/cuda_driver_fns.h"

namespace gnmr::cuda {

inline Status CudaError(cudaError_t e, const char* what) {
  return Status(StatusCode::kInternal, std::string(what) + ": " + cudaGetErrorString(e));
}

// OK if `device` names a CUDA device of this process; Unavailable
// otherwise (no driver: cudaGetDeviceCount fails with 35, no device, an
// ordinal out of range). The thread's last-error state is left as found.
inline Status CheckDeviceOrdinal(int device) {
  const cudaError_t pending = cudaPeekAtLastError();
  int count = 0;  // left unwritten on error (e.g. 35: no driver)
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (pending == cudaSuccess) cudaGetLastError();  // ours: not the trainer's to find
  if (e != cudaSuccess || count <= 0) {
    return Status(
        StatusCode::kUnavailable,
        std::string("no CUDA device: ") + (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices"));
  }
  if (device < 0 || device >= count) {
    return Status(StatusCode::kUnavailable, "CUDA device " + std::to_string(device) +
                                                " out of range (" + std::to_string(count) +
                                                " devices)");
  }
  return Status::Ok();
}

// Device allocation freed on destruction; Reserve keeps a large enough one
// (no free, no allocation: SetTable may run while another thread captures).
struct DevBuf {
  void* p = nullptr;
  size_t capacity = 0;
  ~DevBuf() { Free(); }
  void Free() {
    if (p != nullptr) cudaFree(p);
    p = nullptr;
    capacity = 0;
  }
  Status Reserve(size_t bytes) {
    if (bytes <= capacity && (bytes == 0 || p != nullptr)) return Status::Ok();
    Free();
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      p = nullptr;
      return CudaError(e, "cudaMalloc");
    }
    capacity = bytes;
    return Status::Ok();
  }
};

// Pinned host allocation, likewise.
struct PinnedBuf {
  unsigned char* p = nullptr;
  size_t capacity = 0;
  ~PinnedBuf() { Free(); }
  void Free() {
    if (p != nullptr) cudaFreeHost(p);
    p = nullptr;
    capacity = 0;
  }
  Status Reserve(size_t bytes) {
    if (bytes == 0) bytes = 8;
    if (bytes <= capacity) return Status::Ok();
    Free();
    const cudaError_t e = cudaMallocHost(reinterpret_cast<void**>(&p), bytes);
    if (e != cudaSuccess) {
      p = nullptr;
      return CudaError(e, "cudaMallocHost");
    }
    capacity = bytes;
    return Status::Ok();
  }
};

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : pending_(cudaPeekAtLastError()) {
    const DriverFns& f = Driver();
    have_context_ = f.ctx_get_current != nullptr && f.ctx_set_current != nullptr &&
                    f.ctx_get_current(&previous_context_) == CUDA_SUCCESS;
    int now = -1;
    if (cudaGetDevice(&now) != cudaSuccess) now = -1;
    if (!have_context_) previous_device_ = now;
    // With the driver entry points the previous context comes back exactly,
    // so the device is always set: a non-primary context current on the
    // same device (a green context) is not the one our objects live in.
    if (now != device || have_context_) cudaSetDevice(device);
  }
  ~DeviceGuard() {
    if (have_context_) {
      Driver().ctx_set_current(previous_context_);  // null unbinds: no new context
    } else if (previous_device_ >= 0) {
      int now = -1;
      if (cudaGetDevice(&now) == cudaSuccess && now != previous_device_) {
        cudaSetDevice(previous_device_);
      }
    }
    // Clear what our own calls left, unless the thread came with an error
    // of its own (then it is the trainer's to read; ours cannot be told
    // apart and stay too).
    if (pending_ == cudaSuccess) cudaGetLastError();
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  const cudaError_t pending_;
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

// Virtual-memory mappings (cuMemCreate + cuMemMap, e.g. PyTorch's
// expandable segments): cudaPointerGetAttributes is not reliable for them
// and a tensor may span several physical chunks, each mapped (or not) on
// its own. Every chunk of [p, p + bytes) must be mapped with read access
// for `device`. Chunk boundaries are multiples of the minimum allocation
// granularity, so one query per granule-aligned address covers them all.
inline Status CheckMappedRange(const void* p, size_t bytes, int device) {
  const DriverFns& f = Driver();
  if (f.mem_get_access == nullptr) return InvalidArgument("cuMemGetAccess unavailable");
  size_t granularity = 0;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  if (f.mem_get_allocation_granularity == nullptr ||
      f.mem_get_allocation_granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
          CUDA_SUCCESS ||
      granularity == 0) {
    granularity = size_t{2} << 20;  // the usual minimum
  }
  CUmemLocation where{};
  where.type = CU_MEM_LOCATION_TYPE_DEVICE;
  where.id = device;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = begin + (bytes > 0 ? bytes : 1);
  for (uintptr_t a = begin; a < end; a = (a / granularity + 1) * granularity) {
    unsigned long long flags = 0;
    if (f.mem_get_access(&flags, &where, static_cast<CUdeviceptr>(a)) != CUDA_SUCCESS ||
        (flags & CU_MEM_ACCESS_FLAGS_PROT_READ) == 0) {
      return InvalidArgument("virtual-memory range not mapped readable for CUDA device " +
                             std::to_string(device) + " at byte " + std::to_string(a - begin));
    }
  }
  return Status::Ok();
}

// OK if kernels on `device` may read the `bytes` at `p` (aligned to `align`
// bytes): device or managed memory of that device, virtual-memory mappings
// readable by it, pinned host memory mapped for it, or pageable host memory
// where the device can read it (HMM, ATS). Sets *device_ptr to the address
// the kernels must use (differs from p for registered host memory on some
// systems). Pageable host memory is refused elsewhere.
inline Status CheckDeviceReadable(const void* p, size_t bytes, int device, size_t align,
                                  const void** device_ptr) {
  if (p == nullptr) return InvalidArgument("null pointer");
  if (reinterpret_cast<uintptr_t>(p) % align != 0) {
    return InvalidArgument("pointer is not " + std::to_string(align) + "-byte aligned");
  }
  const DriverFns& f = Driver();
  CUmemGenericAllocationHandle handle = 0;
  if (f.mem_retain_allocation_handle != nullptr && f.mem_release != nullptr &&
      f.mem_retain_allocation_handle(&handle, const_cast<void*>(p)) == CUDA_SUCCESS) {
    f.mem_release(handle);  // retained only to learn that p is a VMM mapping
    Status s = CheckMappedRange(p, bytes, device);
    if (s.ok()) *device_ptr = p;
    return s;
  }
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
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
