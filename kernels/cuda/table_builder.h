// The host side of GpuStats::SetTable: validates the units' tensors and
// lays out the device tables (kernels/cuda/stats_kernels.h). Pure C++ (the
// pointer check is injected), so the CPU tests check the layout
// (tests/kernels/gpu_host_logic_test.cc).
//
// Layout: tensors, pointers and units in SetTable order; work items
// grouped by dtype (fp32, bf16, fp16, e4m3, e5m2: item_range says where
// each group is), inside a dtype first the tensors without saturation
// counting, then those with it (from sat_begin), each tensor's items
// consecutive and in order, so one kernel instantiation per dtype and
// saturation mode covers a contiguous range; segments per
// tensor, in tensor order, each an aligned block of up to kSegItems items
// (an exact subtree of the tensor's item tree).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "gnmr/status.h"
#include "gnmr/tensor.h"
#include "kernels/cuda/stats_kernels.h"

namespace gnmr::cuda {

struct HostTables {
  std::vector<DevTensor> tensors;
  std::vector<const void*> ptrs;  // device addresses (CheckFn's), null for empty tensors
  std::vector<DevItem> items;
  std::vector<DevSeg> segs;
  std::vector<DevUnit> units;
  uint64_t item_range[kDTypeSlots][2] = {};
  uint64_t sat_begin[kDTypeSlots] = {};
};

// OK and the device address of `bytes` at `p` (aligned to `align`), or why
// the device cannot read them.
using ReadableCheck =
    std::function<Status(const void* p, size_t bytes, size_t align, const void** device_ptr)>;

// InvalidArgument (naming the unit and tensor) for an unknown dtype, a
// non-finite fp8 scale_inv without scale_inv_ptr, a negative or NaN
// saturation_magnitude, null data, a tensor on
// another device, or memory `check` refuses.
Status BuildTables(const std::vector<std::vector<TensorRef>>& units, int device,
                   const ReadableCheck& check, HostTables* out);

}  // namespace gnmr::cuda
