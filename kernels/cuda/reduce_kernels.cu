// Statistics kernels, steps 5-6 of kernels/stats_order.h: the segment
// kernel (item partials into segment sums, item counts into segment counts)
// and the unit kernel (segments into tensors, the fp8 scale, tensors into
// units). The item kernels (steps 1-4) are in stats_kernels.cu, which
// launches these through LaunchReductions.
#include <cuda_runtime.h>

#include "kernels/cuda/item_math.h"
#include "kernels/cuda/stats_kernels.h"
#include "kernels/cuda/tree_reduce.h"

namespace gnmr::cuda {
namespace {

constexpr uint32_t kFull = 0xffffffffu;
constexpr uint32_t kLanes = 256;
constexpr uint64_t kNanBits = 0x7ff8000000000000ull;

uint32_t Blocks(uint64_t wanted, uint32_t cap) {
  return static_cast<uint32_t>(wanted < cap ? wanted : cap);
}

// Integer block reductions (order-independent): the maximum of amax and
// the sums of c[0..kCounts), valid in thread 0. A segment's counts are at
// most 4096 * 4096 elements, so they fit 32 bits.
constexpr int kCounts = 4;  // zeros, nonfinite, nans, saturated
__device__ void ReduceCounts(uint32_t* amax, uint32_t (&c)[kCounts]) {
  __shared__ uint32_t w[1 + kCounts][kLanes / 32];
  const uint32_t warp = threadIdx.x / 32;
  const uint32_t m = __reduce_max_sync(kFull, *amax);
  if (threadIdx.x % 32 == 0) w[0][warp] = m;
  for (int i = 0; i < kCounts; ++i) {
    const uint32_t v = __reduce_add_sync(kFull, c[i]);
    if (threadIdx.x % 32 == 0) w[1 + i][warp] = v;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (uint32_t k = 1; k < kLanes / 32; ++k) {
      w[0][0] = max(w[0][0], w[0][k]);
      for (int i = 0; i < kCounts; ++i) w[1 + i][0] += w[1 + i][k];
    }
    *amax = w[0][0];
    for (int i = 0; i < kCounts; ++i) c[i] = w[1 + i][0];
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
    uint32_t amax = 0;
    uint32_t c[kCounts] = {};
    for (uint32_t i = j * kPer; i < (j + 1) * kPer && i < seg.n_items; ++i) {
      const ItemOut o = t.item_out[seg.first_item + i];
      tree.Push(o.partial);
      amax = max(amax, o.amax);
      c[0] += o.zeros;
      c[1] += o.nonfinite;
      c[2] += o.nans;
      c[3] += o.saturated;
    }
    const double sum = PairTree(sh, tree.Finish());
    ReduceCounts(&amax, c);
    if (j == 0) t.seg_out[s] = SegOut{sum, amax, 0, c[0], c[1], c[2], c[3]};
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
      out.saturated += o.saturated;
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

}  // namespace

int LaunchReductions(const Tables& t, const LaunchConfig& c, uint64_t* replay_counter,
                     void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
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
