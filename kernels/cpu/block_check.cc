// Names, geometry and the checks of block-scaled tensors (kernels/block_stats.h,
// CheckBlockTensor). Every byte of a descriptor may come from a peer or a
// wrong binding: nothing here trusts a size before checking it for
// overflow.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/block_stats.h"
#include "kernels/cpu/block_format.h"

namespace gnmr {

const char* BlockFormatName(BlockFormat f) {
  switch (f) {
    case BlockFormat::kMxfp8E4M3:
      return "mxfp8_e4m3";
    case BlockFormat::kMxfp8E5M2:
      return "mxfp8_e5m2";
    case BlockFormat::kMxfp4:
      return "mxfp4";
    case BlockFormat::kNvfp4:
      return "nvfp4";
    case BlockFormat::kFp8Block:
      return "fp8_block";
  }
  return "unknown";
}

uint32_t BlockFormatBlockSize(BlockFormat f) {
  switch (f) {
    case BlockFormat::kMxfp8E4M3:
    case BlockFormat::kMxfp8E5M2:
    case BlockFormat::kMxfp4:
      return 32;
    case BlockFormat::kNvfp4:
      return 16;
    case BlockFormat::kFp8Block:
      return 128;
  }
  return 0;
}

namespace cpu {
namespace {

constexpr uint64_t kMaxElements = uint64_t{1} << 48;
constexpr uint64_t kMaxScales = uint64_t{1} << 40;

const char* LayoutName(BlockLayout l) {
  switch (l) {
    case BlockLayout::kRowwise:
      return "rowwise";
    case BlockLayout::kColumnwise:
      return "columnwise";
    case BlockLayout::kSquare:
      return "square";
  }
  return "unknown layout";
}

bool Misaligned(const void* p, uintptr_t align) {
  return reinterpret_cast<uintptr_t>(p) % align != 0;
}

uint64_t RoundUp(uint64_t v, uint64_t m) { return (v + m - 1) / m * m; }

}  // namespace

Status CheckBlockTensor(const BlockTensorRef& t) {
  const uint32_t block = BlockFormatBlockSize(t.format);
  if (block == 0) {
    return InvalidArgument("unknown block format " + std::to_string(static_cast<int>(t.format)) +
                           " (" + LayoutName(t.layout) + " layout)");
  }
  if (t.layout != BlockLayout::kRowwise && t.layout != BlockLayout::kColumnwise &&
      t.layout != BlockLayout::kSquare) {
    return InvalidArgument(std::string(BlockFormatName(t.format)) + ": unknown block layout " +
                           std::to_string(static_cast<int>(t.layout)));
  }
  // Messages are built only on error: this may run on the training thread.
  const std::string what = std::string(BlockFormatName(t.format)) + " " + LayoutName(t.layout) +
                           " " + (t.layout == BlockLayout::kRowwise ? "1x" : "") +
                           std::to_string(block) +
                           (t.layout == BlockLayout::kColumnwise ? "x1"
                            : t.layout == BlockLayout::kSquare   ? "x" + std::to_string(block)
                                                                 : "");
  auto error = [&what](const std::string& problem) {
    return InvalidArgument(what + ": " + problem);
  };
  if (t.scale_layout != ScaleLayout::kCompact && t.scale_layout != ScaleLayout::kSwizzled &&
      t.scale_layout != ScaleLayout::kCompactTransposed) {
    return error("unknown scale layout " + std::to_string(static_cast<int>(t.scale_layout)));
  }
  if (t.device != kHostDevice) {
    return Unimplemented(what + ": device tensors need the CUDA statistics path");
  }
  uint64_t numel = 0;
  if (t.rows > kMaxElements || t.cols > kMaxElements ||
      __builtin_mul_overflow(t.rows, t.cols, &numel) || numel > kMaxElements) {
    return error("shape " + std::to_string(t.rows) + " x " + std::to_string(t.cols) +
                 " has more than 2^48 elements");
  }
  if (numel > 0 && t.data == nullptr) {
    return error("data is null but the shape is " + std::to_string(t.rows) + " x " +
                 std::to_string(t.cols));
  }
  if (block::CodesOf(t.format) == block::Codes::kE2M1 && numel % 2 != 0) {
    return error("packed FP4 needs an even element count (two codes per byte), not " +
                 std::to_string(numel));
  }
  if (!std::isfinite(t.global_scale)) {
    return error("global_scale is not finite");
  }
  if (t.format != BlockFormat::kNvfp4 && t.global_scale != 1.0f) {
    return error("global_scale must be 1 (only nvfp4 has a per-tensor scale)");
  }
  if (t.source != nullptr) {
    switch (t.source_dtype) {
      case DType::kFp32:
      case DType::kBf16:
      case DType::kFp16:
        if (Misaligned(t.source, DTypeSize(t.source_dtype))) {
          return error(std::string("source is not aligned to its dtype ") +
                       DTypeName(t.source_dtype));
        }
        break;
      default:
        return error("source dtype must be fp32, bf16 or fp16, not " +
                     std::string(DTypeName(t.source_dtype)));
    }
  }
  const block::Geometry g = block::GeometryOf(t);
  if (t.scale_rows > kMaxElements || t.scale_cols > kMaxElements ||
      (t.scale_rows > 0 && t.scale_cols > kMaxScales / t.scale_rows)) {
    return error("the scale tensor [" + std::to_string(t.scale_rows) + ", " +
                 std::to_string(t.scale_cols) + "] has more than 2^40 entries");
  }
  const std::string have =
      "[" + std::to_string(t.scale_rows) + ", " + std::to_string(t.scale_cols) + "]";
  if (t.scale_layout == ScaleLayout::kSwizzled) {
    if (t.layout == BlockLayout::kSquare) {
      return error("swizzled scales are for 1-D blocks; square blocks need compact scales");
    }
    const uint64_t r = g.columnwise ? g.cols : g.rows;
    const uint64_t c = g.columnwise ? g.grid_rows : g.grid_cols;
    const uint64_t rpad = RoundUp(r, 128), cpad = RoundUp(c, 4);
    if (numel > 0 && (t.scale_rows != rpad || t.scale_cols != cpad)) {
      return error("swizzled scales must be the padded grid [" + std::to_string(rpad) + ", " +
                   std::to_string(cpad) + "], not " + have);
    }
  } else if (t.scale_layout == ScaleLayout::kCompactTransposed) {
    if (numel > 0 && (t.scale_rows < g.grid_cols || t.scale_cols < g.grid_rows)) {
      return error("the transposed scale tensor " + have + " does not cover the block grid's " +
                   "transpose [" + std::to_string(g.grid_cols) + ", " +
                   std::to_string(g.grid_rows) + "]");
    }
  } else if (numel > 0 && (t.scale_rows < g.grid_rows || t.scale_cols < g.grid_cols)) {
    return error("the scale tensor " + have + " does not cover the block grid [" +
                 std::to_string(g.grid_rows) + ", " + std::to_string(g.grid_cols) + "]");
  }
  if (numel > 0 && t.scales == nullptr) {
    return error("scales are null");
  }
  if (block::ScalesOf(t.format) == block::Scales::kFp32 && Misaligned(t.scales, 4)) {
    return error("fp32 scales are not 4-byte aligned");
  }
  return Status::Ok();
}

}  // namespace cpu
}  // namespace gnmr
