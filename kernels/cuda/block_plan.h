// Host side of the block-scaled kernels (internal, no CUDA calls): the
// checks of gnmr::cpu::CheckBlockTensor for device tensors and the
// descriptors, item / segment / flag offsets and launch groups one request
// needs. Kept apart from CUDA so the CPU tests (gpu_block_math_test.cc)
// build the same descriptors the kernels read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gnmr/block_tensor.h"
#include "gnmr/status.h"
#include "kernels/cuda/block_stats_kernels.h"

namespace gnmr::cuda::blk {

// gnmr::cpu::CheckBlockTensor's rules (kernels/block_stats.h) for a tensor
// of any device: enums, null pointers, sizes, scale coverage, alignment,
// global_scale. The message names the format and layout.
Status CheckBlockShape(const BlockTensorRef& t);

// "mxfp8_e4m3 rowwise", ... for messages.
std::string FormatAndLayout(const BlockTensorRef& t);

// Bytes of codes, scales and source a tensor spans.
uint64_t DataBytes(const BlockTensorRef& t);
uint64_t ScaleTensorBytes(const BlockTensorRef& t);
uint64_t SourceBytes(const BlockTensorRef& t);

// The kernels' descriptor of a checked tensor, with its offsets left 0 and
// its pointers as given.
BlockDesc MakeDesc(const BlockTensorRef& t);

struct Plan {
  std::vector<BlockDesc> descs;
  std::vector<uint32_t> order;  // tensor indices, grouped (Group)
  std::vector<Group> groups;
  uint64_t items = 0, segs = 0, blocks = 0, bsegs = 0;
  uint64_t max_items = 0, max_segs = 0, max_blocks = 0, max_bsegs = 0;
};

// Translates a host pointer of `bytes` (aligned to `align`) into the
// device's address, or refuses it.
using PointerCheck =
    std::function<Status(const void* p, size_t bytes, size_t align, const void** device_ptr)>;

// Checks every tensor (shape, `device`, pointers through `check`) and
// builds the plan; `plan` is complete only on OK. Messages start with
// "tensor i (format layout): ".
Status BuildPlan(const BlockTensorRef* tensors, size_t count, int device, const PointerCheck& check,
                 Plan* plan);

}  // namespace gnmr::cuda::blk
