// gnmr_observe_forward_blocks: the C form of Client::ObserveForwardBlocks.
// The C enums' numbers are the C++ enums' (checked below); a value outside
// them is refused here, before a cast could fold it onto a valid one.
#include <string>

#include "client/src/client_c_internal.h"
#include "gnmr/block_tensor.h"
#include "gnmr/gnmr_c.h"

namespace {

using gnmr::BlockFormat;
using gnmr::BlockLayout;
using gnmr::ScaleLayout;

static_assert(GNMR_BLOCK_MXFP8_E4M3 == static_cast<int>(BlockFormat::kMxfp8E4M3) &&
              GNMR_BLOCK_MXFP8_E5M2 == static_cast<int>(BlockFormat::kMxfp8E5M2) &&
              GNMR_BLOCK_MXFP4 == static_cast<int>(BlockFormat::kMxfp4) &&
              GNMR_BLOCK_NVFP4 == static_cast<int>(BlockFormat::kNvfp4) &&
              GNMR_BLOCK_FP8 == static_cast<int>(BlockFormat::kFp8Block));
static_assert(GNMR_BLOCK_ROWWISE == static_cast<int>(BlockLayout::kRowwise) &&
              GNMR_BLOCK_COLUMNWISE == static_cast<int>(BlockLayout::kColumnwise) &&
              GNMR_BLOCK_SQUARE == static_cast<int>(BlockLayout::kSquare));
static_assert(GNMR_SCALES_COMPACT == static_cast<int>(ScaleLayout::kCompact) &&
              GNMR_SCALES_SWIZZLED == static_cast<int>(ScaleLayout::kSwizzled) &&
              GNMR_SCALES_COMPACT_TRANSPOSED == static_cast<int>(ScaleLayout::kCompactTransposed));

}  // namespace

namespace gnmr::c_api {

std::string ToBlockRef(const gnmr_block_tensor& t, gnmr::BlockTensorRef* r) {
  auto outside = [](int32_t v, int32_t lo, int32_t hi) { return v < lo || v > hi; };
  if (outside(t.format, GNMR_BLOCK_MXFP8_E4M3, GNMR_BLOCK_FP8)) {
    return "format " + std::to_string(t.format) + " is not a GNMR_BLOCK_* format";
  }
  if (outside(t.layout, GNMR_BLOCK_ROWWISE, GNMR_BLOCK_SQUARE)) {
    return "layout " + std::to_string(t.layout) + " is not a GNMR_BLOCK_* layout";
  }
  if (outside(t.scale_layout, GNMR_SCALES_COMPACT, GNMR_SCALES_COMPACT_TRANSPOSED)) {
    return "scale_layout " + std::to_string(t.scale_layout) + " is not a GNMR_SCALES_* layout";
  }
  const int32_t dtype = t.source_dtype == 0 ? GNMR_DTYPE_FP32 : t.source_dtype;
  if (outside(dtype, GNMR_DTYPE_FP32, GNMR_DTYPE_FP16)) {
    return "source_dtype " + std::to_string(t.source_dtype) +
           " is not GNMR_DTYPE_FP32, _BF16 or _FP16";
  }
  *r = gnmr::BlockTensorRef();
  r->format = static_cast<BlockFormat>(t.format);
  r->layout = static_cast<BlockLayout>(t.layout);
  r->scale_layout = static_cast<ScaleLayout>(t.scale_layout);
  // location: 0 host, k + 1 CUDA device k; a negative one maps below -1.
  r->device = t.location == 0 ? gnmr::kHostDevice : t.location - 1;
  r->data = t.data;
  r->rows = t.rows;
  r->cols = t.cols;
  r->scales = t.scales;
  r->scale_rows = t.scale_rows;
  r->scale_cols = t.scale_cols;
  r->global_scale = t.global_scale == 0.0f ? 1.0f : t.global_scale;
  r->source = t.source;
  r->source_dtype = static_cast<gnmr::DType>(dtype);
  return "";
}

}  // namespace gnmr::c_api

int gnmr_observe_forward_blocks(gnmr_client* c, uint32_t unit, const gnmr_block_tensor* tensors,
                                size_t count) {
  using gnmr::c_api::Fail;
  using gnmr::c_api::Null;
  using gnmr::c_api::Report;
  return gnmr::c_api::Call([&]() -> int {
    if (c == nullptr) return Null("client");
    if (tensors == nullptr && count > 0) return Null("tensors");
    c->block_scratch.resize(count);  // called per unit per forward pass: no allocation
    for (size_t i = 0; i < count; ++i) {
      const std::string bad = gnmr::c_api::ToBlockRef(tensors[i], &c->block_scratch[i]);
      if (!bad.empty()) {
        return Fail(gnmr::StatusCode::kInvalidArgument,
                    "gnmr_observe_forward_blocks: tensor " + std::to_string(i) + ": " + bad);
      }
    }
    return Report(c->client->ObserveForwardBlocks(unit, c->block_scratch.data(), count));
  });
}
