// A simulated warp for the CPU tests of the CUDA item kernel's arithmetic
// (kernels/cuda/item_math.h is __host__ __device__): the kernel's own
// per-thread functions run for each of the 32 threads in turn, and the
// shuffles and warp reductions are done here the way the kernel does them
// (stats_kernels.cu). Used by gpu_item_math_test.cc and
// gpu_item_math_sat_test.cc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "gnmr/tensor.h"
#include "kernels/cuda/item_math.h"

namespace gnmr::testing {

namespace item = cuda::item;

template <uint32_t P>
double SimTree(double (&v)[item::kWarp][item::kSlots]) {
  for (uint32_t level = 0; level < 8; ++level) {
    const uint32_t s = 128u >> level;
    if (item::CrossThread<P>(s)) {
      double copy[item::kWarp][item::kSlots];
      std::memcpy(copy, v, sizeof copy);
      for (uint32_t t = 0; t < item::kWarp; ++t) {
        const uint32_t from = t + item::ShuffleDelta<P>(s);  // __shfl_down_sync
        item::CrossStep<P>(v[t], copy[from < item::kWarp ? from : t]);
      }
    } else {
      for (uint32_t t = 0; t < item::kWarp; ++t) item::InThreadStep<P>(s, v[t]);
    }
  }
  return v[0][0];
}

template <DType D>
uint32_t ElementBits(const unsigned char* p, uint32_t e) {
  uint32_t b = 0;
  std::memcpy(&b, p + static_cast<size_t>(e) * item::Fmt<D>::kSize, item::Fmt<D>::kSize);
  return b;
}

template <DType D, bool kSat = false>
item::Result SimVecItem(const unsigned char* p, uint32_t sat = 0) {
  double v[item::kWarp][item::kSlots] = {};
  uint32_t amax = 0, nonzero = 0, saturated = 0;
  for (uint32_t t = 0; t < item::kWarp; ++t) {
    item::Fast f;
    item::ThreadVecItem<D, kSat>(
        [&](uint32_t L) {
          item::Vec<D> x;
          std::memcpy(x.w, p + item::VecOffset<D>(t, L) * item::Fmt<D>::kSize, item::kVecBytes<D>);
          return x;
        },
        v[t], &f, kSat ? item::SatAddend<D>(sat) : 0u);
    amax = std::max(amax, item::FastAmax<D>(f));
    nonzero += item::FastNonzero<D>(f);
    saturated += item::FastSaturated<D>(f);
  }
  item::Result r;
  r.partial = SimTree<item::Fmt<D>::kP>(v);
  r.amax = amax;
  r.zeros = item::kItemElems - nonzero;
  r.saturated = saturated;
  return r;
}

template <DType D, bool kCareful, bool kSat = false>
item::Result SimScalarItem(const unsigned char* p, uint32_t n, uint32_t sat = 0) {
  double v[item::kWarp][item::kSlots] = {};
  item::Result r;
  for (uint32_t t = 0; t < item::kWarp; ++t) {
    item::Counts c;
    item::ThreadScalarItem<D, kCareful, kSat>([&](uint32_t e) { return ElementBits<D>(p, e); }, t,
                                              n, v[t], &c, sat);
    r.amax = std::max(r.amax, c.amax);
    r.zeros += c.zeros;
    r.nonfinite += c.nonfinite;
    r.nans += c.nans;
    r.saturated += c.saturated;
  }
  r.partial = SimTree<1>(v);
  if (!kCareful) r.nonfinite = r.nans = 0;
  return r;
}

// The kernel's per-item dispatch (ItemKernel), with `address` standing for
// the tensor's start (it decides between the vector and the scalar path).
// kSat, sat: the item's tensor counts saturation at pattern `sat`.
template <DType D, bool kSat = false>
item::Result SimItem(const unsigned char* p, uint32_t n, uintptr_t address, bool* vector_path,
                     bool* rescanned, uint32_t sat = 0) {
  *vector_path = item::UsesVectorPath<D>(n, address);
  item::Result r =
      *vector_path ? SimVecItem<D, kSat>(p, sat) : SimScalarItem<D, false, kSat>(p, n, sat);
  *rescanned = item::NeedsCarefulScan<D>(r);
  if (*rescanned) r = SimScalarItem<D, true, kSat>(p, n, sat);
  return r;
}

}  // namespace gnmr::testing
