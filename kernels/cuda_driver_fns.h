// CUDA driver functions reached through cudart's entry-point lookup
// (cudaGetDriverEntryPointByVersion): gnmr links the runtime only, never
// libcuda, so a binary starts on a machine without a driver. Each pointer
// is null where the lookup failed; callers then fall back or refuse.
// Internal to gnmr_cuda_stats and its tests.
#pragma once

#include <cuda.h>  // driver types only
#include <cuda_runtime.h>

namespace gnmr::cuda {

struct DriverFns {
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*primary_ctx_get_state)(CUdevice, unsigned int*, int*) = nullptr;
  // Virtual-memory management (cuMemCreate / cuMemMap mappings).
  CUresult (*mem_retain_allocation_handle)(CUmemGenericAllocationHandle*, void*) = nullptr;
  CUresult (*mem_release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*mem_get_access)(unsigned long long*, const CUmemLocation*, CUdeviceptr) = nullptr;
  CUresult (*mem_get_allocation_granularity)(size_t*, const CUmemAllocationProp*,
                                             CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*mem_create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                         unsigned long long) = nullptr;
  CUresult (*mem_address_reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr,
                                  unsigned long long) = nullptr;
  CUresult (*mem_address_free)(CUdeviceptr, size_t) = nullptr;
  CUresult (*mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                      unsigned long long) = nullptr;
  CUresult (*mem_unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*mem_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
};

namespace internal {
template <class Fn>
void LookUp(const char* name, Fn* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
#if CUDART_VERSION >= 12050
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q);
#else
  const cudaError_t e = cudaGetDriverEntryPoint(name, &p, cudaEnableDefault, &q);
#endif
  *fn = e == cudaSuccess && q == cudaDriverEntryPointSuccess ? reinterpret_cast<Fn>(p) : nullptr;
}
}  // namespace internal

// Looked up once per process. (A failed lookup leaves the thread's
// last-error state as it found it only if it was clean: callers look up
// inside a DeviceGuard or before any trainer work, at Create.)
inline const DriverFns& Driver() {
  static const DriverFns fns = [] {
    const cudaError_t pending = cudaPeekAtLastError();
    DriverFns f;
    internal::LookUp("cuCtxGetCurrent", &f.ctx_get_current);
    internal::LookUp("cuCtxSetCurrent", &f.ctx_set_current);
    internal::LookUp("cuDevicePrimaryCtxGetState", &f.primary_ctx_get_state);
    internal::LookUp("cuMemRetainAllocationHandle", &f.mem_retain_allocation_handle);
    internal::LookUp("cuMemRelease", &f.mem_release);
    internal::LookUp("cuMemGetAccess", &f.mem_get_access);
    internal::LookUp("cuMemGetAllocationGranularity", &f.mem_get_allocation_granularity);
    internal::LookUp("cuMemCreate", &f.mem_create);
    internal::LookUp("cuMemAddressReserve", &f.mem_address_reserve);
    internal::LookUp("cuMemAddressFree", &f.mem_address_free);
    internal::LookUp("cuMemMap", &f.mem_map);
    internal::LookUp("cuMemUnmap", &f.mem_unmap);
    internal::LookUp("cuMemSetAccess", &f.mem_set_access);
    if (pending == cudaSuccess) cudaGetLastError();
    return f;
  }();
  return fns;
}

}  // namespace gnmr::cuda
