// Block-scaled tensors (MXFP8, MXFP4, NVFP4, FP8 with 1x128 / 128x128
// scales) as the libraries store them, read in place, and their
// statistics. Public header: installed as <gnmr/block_tensor.h>.
//
// The formats, the block statistics and their canonical order are
// docs/statistics.md, "Block-scaled formats". In short: a stored matrix of
// element codes [rows, cols], row-major, cut into blocks of
// block_rows x block_cols elements; each block has one scale, and the value
// of an element is decode(code) * decode(block scale) (* global_scale for
// NVFP4). Every scale here multiplies (it is what the libraries call
// scale_inv: TE's `_rowwise_scale_inv`, torchao's `scale` / `_scale_e4m3`).
#pragma once

#include <cstdint>

#include "gnmr/tensor.h"

namespace gnmr {

// The element and scale formats of a block-scaled tensor. The values are
// the wire's (gnmr.v1.BlockFormat).
enum class BlockFormat : uint8_t {
  kMxfp8E4M3 = 1,  // e4m3fn codes, one E8M0 scale per 32 elements (OCP MX)
  kMxfp8E5M2 = 2,  // e5m2 codes, one E8M0 scale per 32 elements
  kMxfp4 = 3,      // E2M1 codes, two per byte, one E8M0 scale per 32
  kNvfp4 = 4,      // E2M1 codes, two per byte, one e4m3fn scale per 16 (or
                   // 16x16), and an fp32 per-tensor global_scale
  kFp8Block = 5,   // e4m3fn codes, one fp32 scale per 1x128 or 128x128
};

// "mxfp8_e4m3", "mxfp8_e5m2", "mxfp4", "nvfp4", "fp8_block"; "unknown".
const char* BlockFormatName(BlockFormat f);

// Elements per block along the blocked dimension: 32 (MX), 16 (NVFP4),
// 128 (FP8 block); 0 for a value outside the enum.
uint32_t BlockFormatBlockSize(BlockFormat f);

// Which elements share a scale, with B = BlockFormatBlockSize:
// - kRowwise: 1 x B (B consecutive elements of a row; the usual layout,
//   TE's rowwise data, torchao's MXTensor / NVFP4Tensor);
// - kColumnwise: B x 1 (B consecutive rows of a column: TE's MXFP8
//   columnwise data, which is stored untransposed);
// - kSquare: B x B (NVFP4 16x16 and FP8 128x128 weight blocks).
// A partial block at the end of a row or column is a block of its own.
enum class BlockLayout : uint8_t { kRowwise = 0, kColumnwise = 1, kSquare = 2 };

// How the scale tensor is stored. Both may be padded beyond the blocks
// (TE pads MXFP8 scales to multiples of 128 x 4); padding is never read.
// - kCompact: row-major [scale_rows, scale_cols] (scale_cols is the row
//   stride, in scales), block (i, j) at i * scale_cols + j, where i and j
//   index the block grid: [ceil(rows / block rows), ceil(cols / block cols)].
// - kSwizzled: the 128 x 4 tile layout of cuBLAS block scaling (TE's
//   swizzled scales, torchao's `to_blocked`), for 1-D blocks only. The grid
//   is taken K-major (rowwise: [rows, ceil(cols / B)]; columnwise: [cols,
//   ceil(rows / B)]), padded to [128 * ceil(R / 128), 4 * ceil(C / 4)], and
//   entry (r, c) is at
//     ((r / 128) * (Cpad / 4) + c / 4) * 512 + (r % 32) * 16 + ((r / 32) % 4) * 4 + c % 4.
//   scale_rows and scale_cols must then be the padded grid's (Rpad, Cpad).
// - kCompactTransposed: the transpose of kCompact, row-major
//   [scale_rows, scale_cols] covering [blocks across, blocks down]: block
//   (i, j) at j * scale_cols + i. TE stores the 1x128 scales of
//   Float8BlockwiseQTensor this way ([ceil(K / 128), roundup(M, 4)]).
enum class ScaleLayout : uint8_t { kCompact = 0, kSwizzled = 1, kCompactTransposed = 2 };

// A non-owning view of one block-scaled tensor (the caller keeps the memory
// alive, as for TensorRef).
struct BlockTensorRef {
  BlockFormat format = BlockFormat::kMxfp8E4M3;
  BlockLayout layout = BlockLayout::kRowwise;
  ScaleLayout scale_layout = ScaleLayout::kCompact;
  int32_t device = kHostDevice;

  // The codes: [rows, cols] row-major, one byte per element, or for E2M1
  // two per byte, element 2k in the low nibble of byte k (the order of
  // torchao and TE). For E2M1, rows * cols must be even. Any alignment.
  const void* data = nullptr;
  uint64_t rows = 0;
  uint64_t cols = 0;

  // The scales: E8M0 bytes (MX), e4m3fn bytes (NVFP4) or fp32 (FP8 block,
  // 4-byte aligned), laid out as scale_layout says in a tensor of
  // [scale_rows, scale_cols] entries, which must cover the block grid.
  const void* scales = nullptr;
  uint64_t scale_rows = 0;
  uint64_t scale_cols = 0;

  // NVFP4's per-tensor fp32 scale (torchao's per_tensor_scale, TE's
  // amax-derived global scale): multiplies every element. Must be finite;
  // other formats must leave it 1.
  float global_scale = 1.0f;

  // Optional: the high-precision tensor this one was quantized from,
  // [rows, cols] row-major in the same element order, fp32 / bf16 / fp16
  // (source_dtype). With it the statistics add underflow and the relative
  // error, and dead blocks are judged against it.
  const void* source = nullptr;
  DType source_dtype = DType::kFp32;
};

// Statistics of one or more block-scaled tensors (a unit's), in the
// canonical order of docs/statistics.md, "Block-scaled formats".
struct BlockStats {
  uint64_t numel = 0;
  // Of the dequantized values: sum of x^2 in fp64 (NaN if any value is
  // NaN, else +Inf if any is infinite) and max |x| over finite values.
  double sumsq = 0.0;
  double amax = 0.0;
  uint64_t nonfinite = 0;  // NaN codes, and every element of a NaN-scaled block
  uint64_t zero_codes = 0;
  uint64_t saturated = 0;  // codes at the element format's largest magnitude

  uint64_t blocks = 0;
  uint64_t saturated_blocks = 0;  // blocks with at least one saturated code
  // Blocks whose codes are all zero while their source block has a
  // non-zero element that is not NaN; without a source, blocks whose codes
  // are all zero.
  uint64_t dead_blocks = 0;
  // Blocks whose scale sits at an end of its format's range or is NaN:
  // E8M0 0x00, 0xFE or 0xFF; e4m3fn at or below its smallest normal
  // (2^-6), at 448, or NaN; fp32 zero, subnormal or not finite.
  uint64_t scale_clamps = 0;
  // The binary exponent floor(log2 s) of the finite, non-zero block scales
  // (exact for E8M0 and power-of-two scales): min, max, and their sum and
  // count for the mean (scale_log2_sum / scaled_blocks).
  int32_t scale_log2_min = 0;
  int32_t scale_log2_max = 0;
  int64_t scale_log2_sum = 0;
  uint64_t scaled_blocks = 0;

  // has_source: some tensor had a source (even an empty one). With it:
  // finite source elements x != 0 whose
  // dequantized value is 0 (TE's underflow), sum((x - x_hat)^2) and
  // sum(x^2) over finite pairs, canonical order; the relative error is
  // error_sumsq / source_sumsq.
  bool has_source = false;
  uint64_t underflow = 0;
  double error_sumsq = 0.0;
  double source_sumsq = 0.0;
};

}  // namespace gnmr
