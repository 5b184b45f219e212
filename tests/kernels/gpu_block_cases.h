// Test cases for the block-scaled CUDA path (gpu_block_math_test.cc,
// gpu_block_stats_test.cc): random tensors of every format / layout / scale
// layout with the patterns that matter (NaN / Inf / saturated / zero codes,
// all-zero blocks, clamped scales, tails, widths below 8 and above 256).
// The comparison is block_test_util.h's ExpectSameBlock.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gnmr/block_tensor.h"
#include "tests/kernels/block_test_util.h"  // CeilDiv, ExpectSameBlock

namespace gnmr::testing {

// One tensor with its own storage (codes, scales, source).
struct BlockCase {
  BlockTensorRef ref;
  std::vector<unsigned char> data, scales, source;
  std::string name;

  BlockTensorRef Ref() const {
    BlockTensorRef r = ref;
    r.data = data.empty() ? nullptr : data.data();
    r.scales = scales.data();
    r.source = source.empty() ? nullptr : source.data();
    return r;
  }
};

inline uint32_t BlockOf(BlockFormat f) {
  return f == BlockFormat::kNvfp4 ? 16 : f == BlockFormat::kFp8Block ? 128 : 32;
}
inline bool E2M1(BlockFormat f) { return f == BlockFormat::kMxfp4 || f == BlockFormat::kNvfp4; }

inline std::vector<BlockFormat> AllFormats() {
  return {BlockFormat::kMxfp8E4M3, BlockFormat::kMxfp8E5M2, BlockFormat::kMxfp4,
          BlockFormat::kNvfp4, BlockFormat::kFp8Block};
}

// A random tensor. `source`: 0 none, else the source DType. Codes are
// random with a share of zeros, saturated and NaN / Inf codes; every
// fifth block is all zero (dead); scales include the clamped ends. NaN /
// Inf codes and scales only for seeds divisible by 3 (they make the sum
// NaN or Inf, which would hide the sums of the other cases).
inline BlockCase MakeBlockCase(BlockFormat f, BlockLayout layout, ScaleLayout sl, uint64_t rows,
                               uint64_t cols, int source, uint32_t seed) {
  std::mt19937 rng(seed);
  const bool specials = seed % 3 == 0;
  BlockCase c;
  BlockTensorRef& r = c.ref;
  r.format = f;
  r.layout = layout;
  r.scale_layout = sl;
  r.rows = rows;
  r.cols = cols;
  const uint64_t B = BlockOf(f);
  const uint64_t br = layout == BlockLayout::kRowwise ? 1 : B;
  const uint64_t bc = layout == BlockLayout::kColumnwise ? 1 : B;
  const uint64_t gr = CeilDiv(rows, br), gc = CeilDiv(cols, bc);
  const uint64_t n = rows * cols;
  const uint32_t sat = E2M1(f) ? 0x7 : f == BlockFormat::kMxfp8E5M2 ? 0x7b : 0x7e;
  const uint32_t mask = E2M1(f) ? 0xf : 0xff;
  std::vector<uint8_t> codes(n);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t blk = ((i / cols) / br) * gc + (i % cols) / bc;
    const uint32_t k = rng() % 64;
    uint32_t v = rng() & mask;
    if (blk % 5 == 3)
      v = k == 0 ? 0x80 & mask : 0;  // dead block (+0 / -0)
    else if (k < 4)
      v = 0;
    else if (!E2M1(f) && (v & 0x7f) > sat)
      v = sat;  // no NaN / Inf unless specials
    else if (k < 7)
      v = sat | (rng() & 1 ? (E2M1(f) ? 8 : 0x80) : 0);
    else if (k == 7 && !E2M1(f) && specials)
      v = f == BlockFormat::kMxfp8E5M2 ? 0x7c + rng() % 4 : 0x7f;
    codes[i] = static_cast<uint8_t>(v);
  }
  if (E2M1(f)) {
    c.data.assign(n / 2, 0);
    for (uint64_t i = 0; i < n; ++i) c.data[i / 2] |= codes[i] << (4 * (i % 2));
  } else {
    c.data.assign(codes.begin(), codes.end());
  }
  // Scales: compact with a padded row stride, its transpose (TE's 1x128
  // scales), or the swizzled padded grid.
  if (sl == ScaleLayout::kSwizzled) {
    const bool col = layout == BlockLayout::kColumnwise;
    r.scale_rows = CeilDiv(col ? gc : gr, 128) * 128;
    r.scale_cols = CeilDiv(col ? gr : gc, 4) * 4;
  } else if (sl == ScaleLayout::kCompactTransposed) {
    r.scale_rows = gc;
    r.scale_cols = CeilDiv(gr, 4) * 4;
  } else {
    r.scale_rows = gr + 1;
    r.scale_cols = gc + 3;
  }
  const uint64_t ns = r.scale_rows * r.scale_cols;
  const size_t sb = f == BlockFormat::kFp8Block ? 4 : 1;
  c.scales.resize(ns * sb);
  for (uint64_t i = 0; i < ns; ++i) {
    const uint32_t k = rng() % 40;
    if (f == BlockFormat::kFp8Block) {
      float s = std::ldexp(1.0f + (rng() % 1000) / 1000.0f, static_cast<int>(rng() % 40) - 30);
      if (k == 0) s = 0.0f;
      if (k == 1) s = 1e-40f;  // subnormal
      if (k == 2 && specials) s = INFINITY;
      if (k == 3 && specials) s = NAN;
      if (k == 4) s = -s;
      if (k == 5) s = std::ldexp(1.0f, -20);  // a power of two
      std::memcpy(&c.scales[i * 4], &s, 4);
    } else if (f == BlockFormat::kNvfp4) {
      const uint8_t v[] = {0x00, 0x01, 0x08, 0x7e, 0x7f, 0xff, 0xb0};
      c.scales[i] = k < 7 ? v[k] : static_cast<uint8_t>(0x09 + rng() % 0x70);
      if (!specials && (c.scales[i] & 0x7f) == 0x7f) c.scales[i] = 0x7e;
    } else {
      const uint8_t v[] = {0x00, 0xfe, 0xff, 0x01, 0x7f};
      c.scales[i] = k < 5 ? v[k] : static_cast<uint8_t>(100 + rng() % 50);
      if (!specials && c.scales[i] == 0xff) c.scales[i] = 0xfe;
    }
  }
  if (f == BlockFormat::kNvfp4) r.global_scale = 0.0371f * static_cast<float>(1 + rng() % 100);
  if (source != 0) {
    r.source_dtype = static_cast<DType>(source);
    const size_t es = r.source_dtype == DType::kFp32 ? 4 : 2;
    c.source.resize(n * es);
    for (uint64_t i = 0; i < n; ++i) {
      const uint32_t k = rng() % 50;
      float x = std::ldexp(static_cast<float>(static_cast<int>(rng() % 2001) - 1000),
                           static_cast<int>(rng() % 30) - 20);
      if (k == 0) x = NAN;
      if (k == 1) x = -INFINITY;
      if (k < 5 && k > 1) x = 1e-30f;  // quantizes to zero: underflow
      uint32_t bits;
      std::memcpy(&bits, &x, 4);
      if (es == 4) {
        std::memcpy(&c.source[i * 4], &bits, 4);
      } else {
        // bf16: the top half; fp16: random finite / NaN / Inf halves.
        uint16_t h = static_cast<uint16_t>(bits >> 16);
        if (r.source_dtype == DType::kFp16) {
          h = static_cast<uint16_t>(k == 0 ? 0x7e00 : k == 1 ? 0xfc00 : rng() % 0x7c00);
          if (k > 1 && k < 5) h = 0x0001;
          if (rng() & 1) h |= 0x8000;
        }
        std::memcpy(&c.source[i * 2], &h, 2);
      }
    }
  }
  c.name = std::to_string(static_cast<int>(f)) + "/" + std::to_string(static_cast<int>(layout)) +
           "/" + std::to_string(static_cast<int>(sl)) + " " + std::to_string(rows) + "x" +
           std::to_string(cols) + " src" + std::to_string(source);
  return c;
}

// Every format x layout x scale layout x a few shapes (tails, < one item,
// several items, a partial last item, widths below 8 and above 256).
inline std::vector<BlockCase> AllBlockCases(bool with_sources) {
  const uint64_t shapes[][2] = {{1, 2},    {3, 6},    {33, 70},  {130, 257},
                                {64, 128}, {257, 40}, {5, 1030}, {300, 2}};
  std::vector<BlockCase> out;
  uint32_t seed = 1;
  for (BlockFormat f : AllFormats()) {
    for (BlockLayout l : {BlockLayout::kRowwise, BlockLayout::kColumnwise, BlockLayout::kSquare}) {
      for (ScaleLayout sl :
           {ScaleLayout::kCompact, ScaleLayout::kSwizzled, ScaleLayout::kCompactTransposed}) {
        if (sl == ScaleLayout::kSwizzled && l == BlockLayout::kSquare) continue;
        for (const auto& s : shapes) {
          const int src = !with_sources ? 0 : static_cast<int>(seed % 4);  // none, fp32, bf16, fp16
          out.push_back(MakeBlockCase(f, l, sl, s[0], s[1], src, seed++));
        }
      }
    }
  }
  return out;
}

}  // namespace gnmr::testing
