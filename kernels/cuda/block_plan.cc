// Checks and descriptors of block-scaled tensors for the CUDA kernels
// (block_plan.h). The shape rules are gnmr::cpu::CheckBlockTensor's own,
// called on a host-marked copy (it answers Unimplemented for a device
// tensor): one set of rules for both paths.
#include "kernels/cuda/block_plan.h"

#include "kernels/block_stats.h"

namespace gnmr::cuda::blk {
namespace {

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

uint64_t BlockRows(const BlockTensorRef& t) {
  return t.layout == BlockLayout::kRowwise ? 1 : BlockFormatBlockSize(t.format);
}
uint64_t BlockCols(const BlockTensorRef& t) {
  return t.layout == BlockLayout::kColumnwise ? 1 : BlockFormatBlockSize(t.format);
}
bool IsE2M1(BlockFormat f) { return f == BlockFormat::kMxfp4 || f == BlockFormat::kNvfp4; }
uint32_t Log2(uint64_t b) { return b == 16 ? 4 : b == 32 ? 5 : b == 128 ? 7 : 0; }

}  // namespace

std::string FormatAndLayout(const BlockTensorRef& t) {
  const char* layout = t.layout == BlockLayout::kRowwise      ? "rowwise"
                       : t.layout == BlockLayout::kColumnwise ? "columnwise"
                       : t.layout == BlockLayout::kSquare     ? "square"
                                                              : "unknown layout";
  return std::string(BlockFormatName(t.format)) + " " + layout;
}

uint64_t DataBytes(const BlockTensorRef& t) {
  const uint64_t n = t.rows * t.cols;
  return IsE2M1(t.format) ? n / 2 : n;
}
uint64_t ScaleTensorBytes(const BlockTensorRef& t) {
  return t.scale_rows * t.scale_cols * ScaleBytes(t.format);
}
uint64_t SourceBytes(const BlockTensorRef& t) {
  return t.source == nullptr ? 0 : t.rows * t.cols * DTypeSize(t.source_dtype);
}

Status CheckBlockShape(const BlockTensorRef& t) {
  BlockTensorRef host = t;
  host.device = kHostDevice;  // only the shape rules; memory is checked by the caller
  return cpu::CheckBlockTensor(host);
}

BlockDesc MakeDesc(const BlockTensorRef& t) {
  BlockDesc d{};
  d.data = static_cast<const unsigned char*>(t.data);
  d.scales = static_cast<const unsigned char*>(t.scales);
  d.source = static_cast<const unsigned char*>(t.source);
  d.rows = t.rows;
  d.cols = t.cols;
  d.numel = t.rows * t.cols;
  d.grid_rows = CeilDiv(t.rows, BlockRows(t));
  d.grid_cols = CeilDiv(t.cols, BlockCols(t));
  d.scale_cols = t.scale_cols;
  d.n_items = CeilDiv(d.numel, kItemElems);
  d.n_segs = CeilDiv(d.n_items, kSegItems);
  d.n_blocks = d.grid_rows * d.grid_cols;
  d.n_bsegs = CeilDiv(d.n_blocks, kSegItems);
  d.global_scale = static_cast<double>(t.global_scale);
  d.format = static_cast<uint32_t>(t.format);
  d.layout = static_cast<uint32_t>(t.layout);
  d.scale_layout = static_cast<uint32_t>(t.scale_layout);
  d.source_dtype = static_cast<uint32_t>(t.source_dtype);
  d.log2_block_rows = Log2(BlockRows(t));
  d.log2_block_cols = Log2(BlockCols(t));
  constexpr uint64_t kStep = kLanes - kSlots;  // 248
  d.step_rows = t.cols == 0 ? 0 : static_cast<uint32_t>(kStep / t.cols);
  d.step_cols = t.cols == 0 ? 0 : static_cast<uint32_t>(kStep % t.cols);
  return d;
}

Status BuildPlan(const BlockTensorRef* tensors, size_t count, int device, const PointerCheck& check,
                 Plan* plan) {
  if (count > 65535) return InvalidArgument("more than 65,535 block-scaled tensors in one call");
  if (count > 0 && tensors == nullptr) return InvalidArgument("null tensor array");
  Plan p;
  for (size_t i = 0; i < count; ++i) {
    const BlockTensorRef& t = tensors[i];
    const std::string what = "tensor " + std::to_string(i) + " (" + FormatAndLayout(t) + "): ";
    Status s = CheckBlockShape(t);
    if (!s.ok()) return InvalidArgument("tensor " + std::to_string(i) + ": " + s.message());
    if (t.device != device) {
      return InvalidArgument(what + "on device " + std::to_string(t.device) + ", not CUDA device " +
                             std::to_string(device));
    }
    BlockDesc d = MakeDesc(t);
    const void* dev = nullptr;
    if (d.numel > 0) {
      if (!(s = check(t.data, DataBytes(t), 1, &dev)).ok())
        return InvalidArgument(what + "data: " + s.message());
      d.data = static_cast<const unsigned char*>(dev);
      if (!(s = check(t.scales, ScaleTensorBytes(t), ScaleBytes(t.format), &dev)).ok()) {
        return InvalidArgument(what + "scales: " + s.message());
      }
      d.scales = static_cast<const unsigned char*>(dev);
      if (t.source != nullptr) {
        if (!(s = check(t.source, SourceBytes(t), DTypeSize(t.source_dtype), &dev)).ok()) {
          return InvalidArgument(what + "source: " + s.message());
        }
        d.source = static_cast<const unsigned char*>(dev);
      }
    }
    d.first_item = p.items;
    d.first_seg = p.segs;
    d.first_block = p.blocks;
    d.first_bseg = p.bsegs;
    p.items += d.n_items;
    p.segs += d.n_segs;
    p.blocks += d.n_blocks;
    p.bsegs += d.n_bsegs;
    p.max_bsegs = d.n_bsegs > p.max_bsegs ? d.n_bsegs : p.max_bsegs;
    p.max_items = d.n_items > p.max_items ? d.n_items : p.max_items;
    p.max_segs = d.n_segs > p.max_segs ? d.n_segs : p.max_segs;
    p.max_blocks = d.n_blocks > p.max_blocks ? d.n_blocks : p.max_blocks;
    p.descs.push_back(d);
  }
  // Launch groups: per format, the block kernel over its non-empty tensors,
  // then the item kernel over those with a source.
  for (uint32_t f = 1; f <= 5; ++f) {
    for (int source_only = 0; source_only < 2; ++source_only) {
      Group g{static_cast<BlockFormat>(f),
              source_only == 1,
              static_cast<uint32_t>(p.order.size()),
              0,
              0,
              0};
      for (uint32_t i = 0; i < p.descs.size(); ++i) {
        const BlockDesc& d = p.descs[i];
        if (d.format != f || d.numel == 0 || (g.source && d.source == nullptr)) continue;
        p.order.push_back(i);
        ++g.count;
        g.max_items = d.n_items > g.max_items ? d.n_items : g.max_items;
        g.max_blocks = d.n_blocks > g.max_blocks ? d.n_blocks : g.max_blocks;
      }
      if (g.count > 0) p.groups.push_back(g);
    }
  }
  *plan = std::move(p);
  return Status::Ok();
}

}  // namespace gnmr::cuda::blk
