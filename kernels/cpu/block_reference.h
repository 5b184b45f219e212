// Reference statistics of block-scaled tensors (docs/statistics.md,
// "Block-scaled formats"), for tests of gnmr::cpu::ComputeBlockStats and the
// CUDA kernels. Written from the documents alone: values decoded with
// std::ldexp from the OCP MX definitions, scales indexed with the formulas
// of gnmr/block_tensor.h, sumsq as a vector of block partials and the
// source sums in a literal lane array, both through a recursive item tree.
// Slow and obvious on purpose; shares no code with block_stats.cc.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gnmr/block_tensor.h"

namespace gnmr::cpu {

// Every statistic of `count` tensors, which are assumed valid
// (CheckBlockTensor OK) and on the host.
BlockStats BlockStatsNaive(const BlockTensorRef* tensors, size_t count);

// The element formats, by the OCP MX specification (e4m3fn: no Inf,
// S.1111.111 = NaN; e5m2: IEEE-like; E2M1: no NaN or Inf; E8M0: 2^(e-127),
// 0xFF = NaN). `code` holds the format's bits in its low bits.
double E4M3Value(uint8_t code);
double E5M2Value(uint8_t code);
double E2M1Value(uint8_t code);
double E8M0Value(uint8_t code);

// Block shape of a tensor: rows and columns of elements sharing a scale.
uint64_t BlockRowsOf(const BlockTensorRef& t);
uint64_t BlockColsOf(const BlockTensorRef& t);

// The swizzled index of block-grid entry (r, c) in a padded grid of
// `cpad` columns: the closed formula of gnmr/block_tensor.h.
uint64_t SwizzledScaleIndex(uint64_t r, uint64_t c, uint64_t cpad);

// The code of element (r, c) (for E2M1 the nibble, in its low 4 bits).
uint8_t BlockElementCode(const BlockTensorRef& t, uint64_t r, uint64_t c);

// The index into t.scales (in scales, not bytes) and the decoded value of
// the scale of block (block_r, block_c) of the block grid.
uint64_t BlockScaleIndex(const BlockTensorRef& t, uint64_t block_r, uint64_t block_c);
double BlockScaleValue(const BlockTensorRef& t, uint64_t block_r, uint64_t block_c);

// decode(code) * decode(block scale) of element (r, c), one fp64 multiply
// (docs, canonical order step 2); without NVFP4's global_scale.
double BlockElementValue(const BlockTensorRef& t, uint64_t r, uint64_t c);

// Source element (r, c) as a double (0 when the tensor has no source).
double BlockSourceValue(const BlockTensorRef& t, uint64_t r, uint64_t c);

}  // namespace gnmr::cpu
