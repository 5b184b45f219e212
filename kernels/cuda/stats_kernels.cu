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
// items); the result never depends on it.
#include <cuda_runtime.h>

#include "kernels/cuda/item_math.h"
#include "kernels/cuda/stats_kernels.h"

namespace gnmr::cuda {
namespace {

using item::Fmt;
constexpr uint32_t kFull = 0xffffffffu;
constexpr uint32_t kLanes = 256;
constexpr uint32_t kItemBlock = 256, kWarpsPerBlock = kItemBlock / 32;
constexpr uint64_t kNanBits = 0x7ff8000000000000ull;

// ---------------------------------------------------------------- items

template <uint32_t P>
__device__ __forceinline__ double WarpLaneTree(double (&v)[item::kSlots]) {
#pragma unroll
  for (uint32_t level = 0; level < 8; ++level) {
    const uint32_t s = 128u >> level;
    if (item::CrossThread<P>(s)) {
      double partner[item::kSlots] = {};
#pragma unroll
      for (uint32_t i = 0; i < P; ++i) {
        partner[i] = __shfl_down_sync(kFull, v[i], item::ShuffleDelta<P>(s));
      }
      item::CrossStep<P>(v, partner);
    } else {
      item::InThreadStep<P>(s, v);
    }
  }
  return v[0];  // lane 0 of the warp holds the item's partial
}

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

template <DType D>
__device__ __forceinline__ item::Result VecItem(const unsigned char* p, uint32_t lane) {
  constexpr uint32_t P = Fmt<D>::kP;
  double v[item::kSlots] = {};
  item::Fast f;
  item::ThreadVecItem<D>(
      [&](uint32_t L) {
        return LoadVec<D>(p + static_cast<uint64_t>(item::VecOffset<D>(lane, L)) * Fmt<D>::kSize);
      },
      v, &f);
  item::Result r;
  r.partial = WarpLaneTree<P>(v);
  r.amax = __reduce_max_sync(kFull, item::FastAmax<D>(f));
  r.zeros = item::kItemElems - __reduce_add_sync(kFull, item::FastNonzero<D>(f));
  return r;
}

template <DType D, bool kCareful>
__device__ __forceinline__ item::Result ScalarItem(const unsigned char* p, uint32_t n,
                                                   uint32_t lane, bool aligned) {
  double v[item::kSlots] = {};
  item::Counts c;
  item::ThreadScalarItem<D, kCareful>([&](uint32_t e) { return LoadElement<D>(p, e, aligned); },
                                      lane, n, v, &c);
  item::Result r;
  r.partial = WarpLaneTree<1>(v);
  r.amax = __reduce_max_sync(kFull, c.amax);
  r.zeros = __reduce_add_sync(kFull, c.zeros);
  if (kCareful) {
    r.nonfinite = __reduce_add_sync(kFull, c.nonfinite);
    r.nans = __reduce_add_sync(kFull, c.nans);
  }
  return r;
}

// The careful scan of an item with NaN/Inf patterns: out of line, so the
// common path keeps its registers.
template <DType D>
__device__ __noinline__ item::Result CarefulItem(const unsigned char* p, uint32_t n, uint32_t lane,
                                                 bool aligned) {
  return ScalarItem<D, true>(p, n, lane, aligned);
}

// Resident blocks per SM the register allocation is held to: 4 (64
// registers) where ptxas fits without spilling, 3 for the 16-bit dtypes
// (which spill at 64). scripts/gpu_ptxas_report.py prints the figures
// (docs/perf.md).
template <DType D>
constexpr int kMinItemBlocks = Fmt<D>::kSize == 2 ? 3 : 4;

// Steps 1-4: one warp per work item of dtype D, items [first, end).
template <DType D>
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
    item::Result r;
    if (item::UsesVectorPath<D>(it.n, addr)) {
      r = VecItem<D>(p, lane);
    } else {
      r = ScalarItem<D, false>(p, it.n, lane, elem_aligned);
    }
    if (item::NeedsCarefulScan<D>(r)) r = CarefulItem<D>(p, it.n, lane, elem_aligned);
    if (lane == 0) t.item_out[k] = ItemOut{r.partial, r.amax, r.zeros, r.nonfinite, r.nans};
  }
}

// ----------------------------------------------------- segments and units

// stats_order.h ItemTree, on the device.
struct Tree {
  double value[65];
  int level[65];
  int depth = 0;
  __device__ void Push(double v) {
    int l = 0;
    while (depth > 0 && level[depth - 1] == l) {
      v = __dadd_rn(value[depth - 1], v);
      --depth;
      ++l;
    }
    value[depth] = v;
    level[depth] = l;
    ++depth;
  }
  __device__ double Finish() const {
    if (depth == 0) return 0.0;
    double acc = value[depth - 1];
    for (int i = depth - 2; i >= 0; --i) acc = __dadd_rn(value[i], acc);
    return acc;
  }
};

// Step 5 inside a segment (stats_order.h): the 256 aligned 16-item subtrees
// in sh[0..256) combined as adjacent pairs, level by level: ((B0 + B1) +
// (B2 + B3)) + ..., the item tree's own shape. Threads without items hold
// +0.0, the padding, which never changes a sum. All threads call it.
__device__ double PairTree(double* sh, double v) {
  const uint32_t j = threadIdx.x;
  sh[j] = v;
  __syncthreads();
  for (uint32_t s = 1; s < kLanes; s <<= 1) {
    if (j % (2 * s) == 0) sh[j] = __dadd_rn(sh[j], sh[j + s]);
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}

// Integer block reductions (order-independent): results valid in thread 0.
__device__ void ReduceCounts(uint32_t* amax, uint32_t* c0, uint32_t* c1, uint32_t* c2) {
  __shared__ uint32_t w[4][kLanes / 32];
  const uint32_t m = __reduce_max_sync(kFull, *amax);
  const uint32_t a = __reduce_add_sync(kFull, *c0);
  const uint32_t b = __reduce_add_sync(kFull, *c1);
  const uint32_t c = __reduce_add_sync(kFull, *c2);
  const uint32_t warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
    w[0][warp] = m;
    w[1][warp] = a;
    w[2][warp] = b;
    w[3][warp] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (uint32_t i = 1; i < kLanes / 32; ++i) {
      w[0][0] = max(w[0][0], w[0][i]);
      w[1][0] += w[1][i];
      w[2][0] += w[2][i];
      w[3][0] += w[3][i];
    }
    *amax = w[0][0];
    *c0 = w[1][0];
    *c1 = w[2][0];
    *c2 = w[3][0];
  }
  __syncthreads();
}

// Step 5 per segment: thread j folds 16 consecutive items (an aligned
// subtree), then the 256 subtrees are combined by the pairwise tree.
__global__ void __launch_bounds__(256) SegKernel(Tables t) {
  __shared__ double sh[kLanes];
  const uint32_t j = threadIdx.x;
  constexpr uint32_t kPer = kSegItems / kLanes;
  for (uint64_t s = blockIdx.x; s < t.n_segs; s += gridDim.x) {
    const DevSeg seg = t.segs[s];
    Tree tree;
    uint32_t amax = 0, zeros = 0, nonfin = 0, nans = 0;
    for (uint32_t i = j * kPer; i < (j + 1) * kPer && i < seg.n_items; ++i) {
      const ItemOut o = t.item_out[seg.first_item + i];
      tree.Push(o.partial);
      amax = max(amax, o.amax);
      zeros += o.zeros;
      nonfin += o.nonfinite;
      nans += o.nans;
    }
    const double sum = PairTree(sh, tree.Finish());
    ReduceCounts(&amax, &zeros, &nonfin, &nans);
    if (j == 0) t.seg_out[s] = SegOut{sum, amax, 0, zeros, nonfin, nans};
  }
}

__device__ double DecodeMagnitude(uint32_t dtype, uint32_t a) {
  switch (dtype) {
    case 2:
      return item::Decode<DType::kBf16>(a);
    case 3:
      return item::Decode<DType::kFp16>(a);
    case 4:
      return item::Decode<DType::kFp8E4M3>(a);
    case 5:
      return item::Decode<DType::kFp8E5M2>(a);
    default:
      return item::Decode<DType::kFp32>(a);
  }
}

// Steps 5 (over segments), 5a and 6: one thread per unit. A captured
// launch (replay_counter set) also stamps its results with its replay
// number, so Poll can tell which replay filled the graph slot.
__global__ void UnitKernel(Tables t, uint64_t* replay_counter) {
  const uint32_t u = blockIdx.x * blockDim.x + threadIdx.x;
  if (replay_counter != nullptr && u == 0) {
    const uint64_t stamp = *replay_counter + 1;
    *replay_counter = stamp;
    *reinterpret_cast<uint64_t*>(t.unit_out + t.n_units) = stamp;
  }
  if (u >= t.n_units) return;
  const DevUnit un = t.units[u];
  UnitStats out{};
  uint64_t nans = 0;
  bool undefined = false;  // an fp8 scale read through scale_inv_ptr was NaN/Inf
  for (uint32_t k = 0; k < un.n_tensors; ++k) {
    const DevTensor ten = t.tensors[un.first_tensor + k];
    if (ten.numel == 0) continue;
    Tree tree;
    uint32_t amax_bits = 0;
    for (uint64_t s = ten.first_seg; s < ten.first_seg + ten.n_segs; ++s) {
      const SegOut o = t.seg_out[s];
      tree.Push(o.sum);
      amax_bits = max(amax_bits, o.amax);
      out.zeros += o.zeros;
      out.nonfinite += o.nonfinite;
      nans += o.nans;
    }
    double sum = tree.Finish();
    double amax = DecodeMagnitude(ten.dtype, amax_bits);
    bool defined = true;
    if (ten.dtype == 4 || ten.dtype == 5) {
      // Read now, on the stream: a graph replay sees this step's scale.
      const float sv = ten.scale_inv_ptr != nullptr ? *ten.scale_inv_ptr : ten.scale_inv;
      defined = item::ApplyFp8Scale(sv, &sum, &amax);  // else step 5a: sumsq NaN
    }
    if (defined) {
      out.sumsq = __dadd_rn(out.sumsq, sum);
      out.amax = out.amax > amax ? out.amax : amax;
    } else {
      undefined = true;
    }
    out.numel += ten.numel;
  }
  if (nans > 0 || undefined) {
    out.sumsq = __longlong_as_double(static_cast<long long>(kNanBits));
  } else if (out.nonfinite > 0) {
    out.sumsq = __longlong_as_double(0x7ff0000000000000ll);
  }
  t.unit_out[u] = out;
}

// ------------------------------------------------------------ launchers

uint32_t Blocks(uint64_t wanted, uint32_t cap) {
  return static_cast<uint32_t>(wanted < cap ? wanted : cap);
}

template <DType D>
cudaError_t LaunchItems(const Tables& t, const LaunchConfig& c, cudaStream_t st) {
  uint64_t first = t.item_range[static_cast<int>(D)][0];
  uint64_t end = t.item_range[static_cast<int>(D)][1];
  if (end <= first) return cudaSuccess;
  const uint32_t blocks = Blocks((end - first + kWarpsPerBlock - 1) / kWarpsPerBlock,
                                 c.max_item_blocks[static_cast<int>(D)]);
  Tables copy = t;
  void* args[] = {&copy, &first, &end};
  return cudaLaunchKernel(reinterpret_cast<const void*>(&ItemKernel<D>), dim3(blocks),
                          dim3(kItemBlock), args, 0, st);
}

template <DType D>
cudaError_t ItemOccupancy(int sms, LaunchConfig* c) {
  int per_sm = 0;
  const cudaError_t e =
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, &ItemKernel<D>, kItemBlock, 0);
  if (e != cudaSuccess) return e;
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
  Tables copy = t;
  if (t.n_segs > 0) {
    void* args[] = {&copy};
    const cudaError_t e =
        cudaLaunchKernel(reinterpret_cast<const void*>(&SegKernel),
                         dim3(Blocks(t.n_segs, c.max_blocks)), dim3(kLanes), args, 0, st);
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  if (t.n_units > 0 || replay_counter != nullptr) {
    void* args[] = {&copy, &replay_counter};
    const uint32_t blocks = t.n_units > 0 ? (t.n_units + 127) / 128 : 1;
    const cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(&UnitKernel), dim3(blocks),
                                           dim3(128), args, 0, st);
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  return 0;
}
}  // namespace gnmr::cuda
