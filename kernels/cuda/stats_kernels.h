// Device tables and kernel launchers of gnmr_cuda_stats (internal).
// Plain structs shared by the host code (gpu_stats.cc, table_builder.cc)
// and the kernels (stats_kernels.cu); see kernels/stats_order.h for the
// order and kernels/cuda/item_math.h for the item kernel's layout.
#pragma once

#include <cstdint>

#include "gnmr/tensor.h"

namespace gnmr::cuda {

// DType values are 1..5; arrays indexed by them have this many entries.
constexpr int kDTypeSlots = 6;

struct DevTensor {
  uint64_t numel;
  uint64_t first_seg;          // index into the segment table
  const float* scale_inv_ptr;  // fp8: read at run time if set (TensorRef)
  uint32_t n_segs;
  uint32_t unit;
  float scale_inv;
  uint32_t dtype;       // gnmr::DType
  uint32_t saturation;  // saturation pattern (kernels/saturation.h), 0: not counted
  uint32_t pad;
};
// A work item: 4096 elements (the last of a tensor may be partial). The
// item table is grouped by dtype (Tables::item_range), inside a dtype the
// items of tensors that count saturation last (from Tables::sat_begin),
// each tensor's items consecutive and in order.
struct DevItem {
  uint64_t offset;  // first element
  uint32_t tensor;
  uint32_t n;  // elements, 1..4096
};
// A segment: an aligned block of up to kSegItems items of one tensor, an
// exact subtree of the tensor's item tree (stats_order.h step 5).
constexpr uint32_t kSegItems = 4096;
struct DevSeg {
  uint64_t first_item;
  uint32_t n_items;
  uint32_t pad;
};
struct DevUnit {
  uint32_t first_tensor;
  uint32_t n_tensors;
};
struct ItemOut {
  double partial;
  uint32_t amax, zeros, nonfinite, nans, saturated, pad;
};
struct SegOut {
  double sum;
  uint32_t amax, pad;
  uint64_t zeros, nonfinite, nans, saturated;
};

struct Tables {
  const DevTensor* tensors;
  const unsigned char* const* ptrs;  // one per tensor
  const DevItem* items;
  const DevSeg* segs;
  const DevUnit* units;
  ItemOut* item_out;
  SegOut* seg_out;
  UnitStats* unit_out;  // n_units results, then the 8-byte replay stamp
  uint64_t n_items, n_segs;
  uint32_t n_units;
  uint64_t item_range[kDTypeSlots][2];  // [first, end) of each dtype's items
  // Per dtype, where in [first, end) the items that count saturation begin
  // (the item kernel's kSat instantiation runs [sat_begin, end)).
  uint64_t sat_begin[kDTypeSlots];
};

// Launch geometry, from the device (InitLaunchConfig, under a DeviceGuard).
struct LaunchConfig {
  uint32_t max_item_blocks[kDTypeSlots] = {};  // resident blocks, whole device
  uint32_t max_blocks = 0;                     // for the other kernels
};

// Each returns the cudaError_t of the first failed launch as int (0 =
// success), read from the launch calls themselves: the thread's last-error
// state (the trainer's) is neither read nor cleared here.
int InitLaunchConfig(int device, LaunchConfig* config);
// `replay_counter` non-null (captured launches): the unit kernel
// increments it and writes the new value as the replay stamp.
int LaunchStats(const Tables& t, const LaunchConfig& c, uint64_t* replay_counter, void* stream);
// The part of LaunchStats after the item kernels: segments and units
// (reduce_kernels.cu).
int LaunchReductions(const Tables& t, const LaunchConfig& c, uint64_t* replay_counter,
                     void* stream);
int LaunchApply(const Tables& t, const LaunchConfig& c, const float* unit_scale, void* stream);

}  // namespace gnmr::cuda
