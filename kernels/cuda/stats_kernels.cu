// Statistics kernels (canonical order: kernels/stats_order.h; the apply
// kernel is in apply_kernel.cu).
// Kept small: no logging, no library headers besides CUDA's.
//
// The item kernel is built once per dtype and launched over that dtype's
// items (the item table is grouped by dtype). One warp computes one work
// item (kernels/cuda/item_math.h has the layout and the arithmetic):
// - whole items whose tensor starts on a vector boundary (16 bytes; 8 for
//   fp8) take the vector path: 16 (fp32: 32) coalesced vector loads per
//   thread, 128 bytes of them in flight before the first is used;
// - partial items and unaligned tensors (flat FSDP / Megatron buffers)
//   take the scalar path: one element per load, still coalesced (32
//   consecutive elements per warp load), byte loads only for tensors that
//   are not even element-aligned;
// - an item whose largest magnitude pattern is a NaN/Inf pattern is
//   scanned again by the careful scalar path (kept out of line: rare).
// The grid is persistent (resident blocks of the device, grid-stride over
// items); the result never depends on it. Items of tensors that count
// saturation (after Tables::sat_begin in each dtype's range) run the kSat
// instantiation, the others the code without the count. The segment and
// unit kernels (steps 5-6) are in reduce_kernels.cu.
#include <cuda_runtime.h>

#include "kernels/cuda/item_math.h"
#include "kernels/cuda/stats_kernels.h"
#include "kernels/cuda/tree_reduce.h"

namespace gnmr::cuda {
namespace {

using item::Fmt;
constexpr uint32_t kFull = 0xffffffffu;
constexpr uint32_t kItemBlock = 256, kWarpsPerBlock = kItemBlock / 32;

// ---------------------------------------------------------------- items

template <DType D>
__device__ __forceinline__ item::Vec<D> LoadVec(const unsigned char* p) {
  item::Vec<D> x;
  if constexpr (item::kVecBytes<D> == 16) {
    const uint4 u = __ldcs(reinterpret_cast<const uint4*>(p));
    x.w[0] = u.x;
    x.w[1] = u.y;
    x.w[2] = u.z;
    x.w[3] = u.w;
  } else {
    const uint2 u = __ldcs(reinterpret_cast<const uint2*>(p));
    x.w[0] = u.x;
    x.w[1] = u.y;
  }
  return x;
}

template <DType D>
__device__ __forceinline__ uint32_t LoadElement(const unsigned char* p, uint32_t e, bool aligned) {
  constexpr uint32_t kSize = Fmt<D>::kSize;
  const unsigned char* q = p + static_cast<uint64_t>(e) * kSize;
  if (aligned) {
    if constexpr (kSize == 4) return __ldcs(reinterpret_cast<const unsigned int*>(q));
    if constexpr (kSize == 2) return __ldcs(reinterpret_cast<const unsigned short*>(q));
    return __ldcs(q);
  }
  uint32_t v = 0;
#pragma unroll
  for (uint32_t b = 0; b < kSize; ++b) v |= static_cast<uint32_t>(__ldcs(q + b)) << (8 * b);
  return v;
}

// kSat: also counts the patterns >= `sat` (the tensor's saturation pattern).
template <DType D, bool kSat>
__device__ __forceinline__ item::Result VecItem(const unsigned char* p, uint32_t lane,
                                                uint32_t sat) {
  constexpr uint32_t P = Fmt<D>::kP;
  double v[item::kSlots] = {};
  item::Fast f;
  item::ThreadVecItem<D, kSat>(
      [&](uint32_t L) {
        return LoadVec<D>(p + static_cast<uint64_t>(item::VecOffset<D>(lane, L)) * Fmt<D>::kSize);
      },
      v, &f, kSat ? item::SatAddend<D>(sat) : 0u);
  item::Result r;
  r.partial = WarpLaneTree<P>(v);
  r.amax = __reduce_max_sync(kFull, item::FastAmax<D>(f));
  r.zeros = item::kItemElems - __reduce_add_sync(kFull, item::FastNonzero<D>(f));
  if (kSat) r.saturated = __reduce_add_sync(kFull, item::FastSaturated<D>(f));
  return r;
}

template <DType D, bool kCareful, bool kSat>
__device__ __forceinline__ item::Result ScalarItem(const unsigned char* p, uint32_t n,
                                                   uint32_t lane, bool aligned, uint32_t sat) {
  double v[item::kSlots] = {};
  item::Counts c;
  item::ThreadScalarItem<D, kCareful, kSat>(
      [&](uint32_t e) { return LoadElement<D>(p, e, aligned); }, lane, n, v, &c, sat);
  item::Result r;
  r.partial = WarpLaneTree<1>(v);
  r.amax = __reduce_max_sync(kFull, c.amax);
  r.zeros = __reduce_add_sync(kFull, c.zeros);
  if (kCareful) {
    r.nonfinite = __reduce_add_sync(kFull, c.nonfinite);
    r.nans = __reduce_add_sync(kFull, c.nans);
  }
  if (kSat) r.saturated = __reduce_add_sync(kFull, c.saturated);
  return r;
}

// The careful scan of an item with NaN/Inf patterns: out of line, so the
// common path keeps its registers.
template <DType D, bool kSat>
__device__ __noinline__ item::Result CarefulItem(const unsigned char* p, uint32_t n, uint32_t lane,
                                                 bool aligned, uint32_t sat) {
  return ScalarItem<D, true, kSat>(p, n, lane, aligned, sat);
}

// Resident blocks per SM the register allocation is held to: 4 (64
// registers) where ptxas fits without spilling, 3 for the 16-bit dtypes
// (which spill at 64). scripts/gpu_ptxas_report.py prints the figures
// (docs/perf.md).
template <DType D>
constexpr int kMinItemBlocks = Fmt<D>::kSize == 2 ? 3 : 4;

// Steps 1-4: one warp per work item of dtype D, items [first, end); kSat:
// with the saturation count (each item's tensor has a saturation pattern).
template <DType D, bool kSat>
__global__ void __launch_bounds__(kItemBlock, kMinItemBlocks<D>)
    ItemKernel(Tables t, uint64_t first, uint64_t end) {
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t warp = (static_cast<uint64_t>(blockIdx.x) * kItemBlock + threadIdx.x) / 32;
  const uint64_t n_warps = static_cast<uint64_t>(gridDim.x) * kWarpsPerBlock;
  for (uint64_t k = first + warp; k < end; k += n_warps) {
    const DevItem it = t.items[k];
    const unsigned char* base = t.ptrs[it.tensor];
    const unsigned char* p = base + it.offset * Fmt<D>::kSize;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(base);
    const bool elem_aligned = addr % Fmt<D>::kSize == 0;
    const uint32_t sat = kSat ? t.tensors[it.tensor].saturation : 0u;
    item::Result r;
    if (item::UsesVectorPath<D>(it.n, addr)) {
      r = VecItem<D, kSat>(p, lane, sat);
    } else {
      r = ScalarItem<D, false, kSat>(p, it.n, lane, elem_aligned, sat);
    }
    if (item::NeedsCarefulScan<D>(r)) r = CarefulItem<D, kSat>(p, it.n, lane, elem_aligned, sat);
    if (lane == 0) {
      t.item_out[k] = ItemOut{r.partial, r.amax, r.zeros, r.nonfinite, r.nans, r.saturated, 0};
    }
  }
}

// ------------------------------------------------------------ launchers

uint32_t Blocks(uint64_t wanted, uint32_t cap) {
  return static_cast<uint32_t>(wanted < cap ? wanted : cap);
}

// Items [first, end) of dtype D, with or without the saturation count.
template <DType D, bool kSat>
cudaError_t LaunchItemRange(const Tables& t, const LaunchConfig& c, uint64_t first, uint64_t end,
                            cudaStream_t st) {
  if (end <= first) return cudaSuccess;
  const uint32_t blocks = Blocks((end - first + kWarpsPerBlock - 1) / kWarpsPerBlock,
                                 c.max_item_blocks[static_cast<int>(D)]);
  Tables copy = t;
  void* args[] = {&copy, &first, &end};
  return cudaLaunchKernel(reinterpret_cast<const void*>(&ItemKernel<D, kSat>), dim3(blocks),
                          dim3(kItemBlock), args, 0, st);
}

template <DType D>
cudaError_t LaunchItems(const Tables& t, const LaunchConfig& c, cudaStream_t st) {
  const int d = static_cast<int>(D);
  const cudaError_t e = LaunchItemRange<D, false>(t, c, t.item_range[d][0], t.sat_begin[d], st);
  if (e != cudaSuccess) return e;
  return LaunchItemRange<D, true>(t, c, t.sat_begin[d], t.item_range[d][1], st);
}

// Resident blocks of dtype D's item kernels (the fewer of the two
// instantiations; the grid size never changes a result).
template <DType D>
cudaError_t ItemOccupancy(int sms, LaunchConfig* c) {
  int plain = 0, sat = 0;
  cudaError_t e =
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&plain, &ItemKernel<D, false>, kItemBlock, 0);
  if (e == cudaSuccess) {
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&sat, &ItemKernel<D, true>, kItemBlock, 0);
  }
  if (e != cudaSuccess) return e;
  const int per_sm = plain < sat ? plain : sat;
  c->max_item_blocks[static_cast<int>(D)] = static_cast<uint32_t>(sms * (per_sm > 0 ? per_sm : 1));
  return cudaSuccess;
}

}  // namespace

int InitLaunchConfig(int device, LaunchConfig* c) {
  int sms = 0;
  cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return static_cast<int>(e);
  if (sms < 1) sms = 1;
  c->max_blocks = static_cast<uint32_t>(sms) * 8;
  using OccupancyFn = cudaError_t (*)(int, LaunchConfig*);
  for (OccupancyFn f :
       {&ItemOccupancy<DType::kFp32>, &ItemOccupancy<DType::kBf16>, &ItemOccupancy<DType::kFp16>,
        &ItemOccupancy<DType::kFp8E4M3>, &ItemOccupancy<DType::kFp8E5M2>}) {
    const cudaError_t r = f(sms, c);
    if (r != cudaSuccess) return static_cast<int>(r);
  }
  return 0;
}

int LaunchStats(const Tables& t, const LaunchConfig& c, uint64_t* replay_counter, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  using LaunchFn = cudaError_t (*)(const Tables&, const LaunchConfig&, cudaStream_t);
  for (LaunchFn f :
       {&LaunchItems<DType::kFp32>, &LaunchItems<DType::kBf16>, &LaunchItems<DType::kFp16>,
        &LaunchItems<DType::kFp8E4M3>, &LaunchItems<DType::kFp8E5M2>}) {
    const cudaError_t e = f(t, c, st);  // stops at the first failure
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  return LaunchReductions(t, c, replay_counter, stream);
}
}  // namespace gnmr::cuda
