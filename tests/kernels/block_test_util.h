// Helpers for the block-scaled statistics tests: an owned block-scaled
// tensor (codes, scales with the libraries' padding, an optional source),
// seeded random fills, and the comparison of two BlockStats bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "gnmr/block_tensor.h"
#include "kernels/block_stats.h"
#include "kernels/cpu/block_reference.h"
#include "tests/client/stats_test_util.h"

namespace gnmr::testing {

inline uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
inline uint64_t RoundUp(uint64_t a, uint64_t b) { return CeilDiv(a, b) * b; }

// How the scale tensor is shaped: exactly the block grid, the grid padded
// as TE pads it (rows of the K-major grid to 128, its columns to 4), or
// swizzled (which implies that padding).
// kTransposed: ScaleLayout::kCompactTransposed, padded like TE ([C, R] up
// to multiples of 4 columns).
enum class ScalePad { kExact, kPadded, kSwizzled, kTransposed };

class TestBlockTensor {
 public:
  TestBlockTensor(BlockFormat format, BlockLayout layout, uint64_t rows, uint64_t cols,
                  ScalePad pad = ScalePad::kExact, size_t data_offset = 0)
      : rows_(rows), cols_(cols), data_offset_(data_offset) {
    ref_.format = format;
    ref_.layout = layout;
    ref_.rows = rows;
    ref_.cols = cols;
    const uint64_t grid_rows = CeilDiv(rows, cpu::BlockRowsOf(ref_));
    const uint64_t grid_cols = CeilDiv(cols, cpu::BlockColsOf(ref_));
    const bool colwise = layout == BlockLayout::kColumnwise;
    // The K-major grid [R, C] (columnwise: the transpose of the block grid).
    const uint64_t k_rows = colwise ? grid_cols : grid_rows;
    const uint64_t k_cols = colwise ? grid_rows : grid_cols;
    uint64_t pr = k_rows, pc = k_cols;
    if (pad == ScalePad::kPadded || pad == ScalePad::kSwizzled) {
      pr = RoundUp(k_rows, 128), pc = RoundUp(k_cols, 4);
    }
    ref_.scale_layout = pad == ScalePad::kSwizzled     ? ScaleLayout::kSwizzled
                        : pad == ScalePad::kTransposed ? ScaleLayout::kCompactTransposed
                                                       : ScaleLayout::kCompact;
    const bool transpose = colwise && pad != ScalePad::kSwizzled;
    ref_.scale_rows = transpose ? pc : pr;
    ref_.scale_cols = transpose ? pr : pc;
    if (pad == ScalePad::kTransposed) {  // [blocks across, blocks down], columns padded to 4
      ref_.scale_rows = grid_cols;
      ref_.scale_cols = RoundUp(grid_rows, 4);
    }
    grid_rows_ = grid_rows;
    grid_cols_ = grid_cols;
    const bool e2m1 = format == BlockFormat::kMxfp4 || format == BlockFormat::kNvfp4;
    data_.assign(data_offset + (e2m1 ? CeilDiv(rows * cols, 2) : rows * cols) + 1, 0);
    // Padding holds NaN scales: a read of it shows in every statistic.
    scales_.assign(ref_.scale_rows * ref_.scale_cols * ScaleSize() + 4, 0xff);
  }

  uint64_t grid_rows() const { return grid_rows_; }
  uint64_t grid_cols() const { return grid_cols_; }
  BlockFormat format() const { return ref_.format; }
  size_t ScaleSize() const { return ref_.format == BlockFormat::kFp8Block ? 4 : 1; }

  void SetCode(uint64_t r, uint64_t c, uint8_t code) {
    const uint64_t i = r * cols_ + c;
    unsigned char* d = data_.data() + data_offset_;
    if (ref_.format != BlockFormat::kMxfp4 && ref_.format != BlockFormat::kNvfp4) {
      d[i] = code;
    } else if (i % 2 == 0) {
      d[i / 2] = static_cast<unsigned char>((d[i / 2] & 0xf0) | (code & 0xf));
    } else {
      d[i / 2] = static_cast<unsigned char>((d[i / 2] & 0x0f) | (code << 4));
    }
  }
  // Codes of row r from column 0 on.
  void SetCodes(uint64_t r, std::initializer_list<uint8_t> codes) {
    uint64_t c = 0;
    for (uint8_t code : codes) SetCode(r, c++, code);
  }
  void SetByte(uint64_t k, uint8_t b) { data_[data_offset_ + k] = b; }
  // E8M0 / e4m3fn bits, or fp32 bits for FP8 block.
  void SetScaleBits(uint64_t block_r, uint64_t block_c, uint32_t bits) {
    const uint64_t index = cpu::BlockScaleIndex(Ref(), block_r, block_c);
    std::memcpy(scales_.data() + index * ScaleSize(), &bits, ScaleSize());
  }
  void SetScaleFloat(uint64_t block_r, uint64_t block_c, float s) {
    uint32_t bits;
    std::memcpy(&bits, &s, 4);
    SetScaleBits(block_r, block_c, bits);
  }
  void set_global_scale(float g) { ref_.global_scale = g; }

  void AddSource(DType dtype) {
    source_ = TestTensor(dtype, rows_ * cols_);
    has_source_ = true;
  }
  void SetSource(uint64_t r, uint64_t c, float x) { source_.Set(r * cols_ + c, x); }
  void SetSourceBits(uint64_t r, uint64_t c, uint32_t bits) {
    source_.SetBits(r * cols_ + c, bits);
  }

  BlockTensorRef Ref() const {
    BlockTensorRef r = ref_;
    r.data = rows_ * cols_ == 0 ? nullptr : data_.data() + data_offset_;
    r.scales = scales_.data();
    if (has_source_) {
      r.source = source_.Ref().data;
      r.source_dtype = source_.Ref().dtype;
    }
    return r;
  }

 private:
  uint64_t rows_, cols_;
  size_t data_offset_;
  uint64_t grid_rows_ = 0, grid_cols_ = 0;
  BlockTensorRef ref_;
  std::vector<unsigned char> data_;
  std::vector<unsigned char> scales_;
  bool has_source_ = false;
  TestTensor source_{DType::kFp32, 0};
};

// What a random fill puts in: specials (NaN / Inf codes, range-end and NaN
// scales), whole all-zero or saturated blocks, and a source.
struct FillOptions {
  bool specials = false;
  double zero_block_rate = 0.1;
  double saturated_rate = 0.02;
  bool with_source = false;
  DType source_dtype = DType::kFp32;
};

// A random code: zeros often, saturated codes at `saturated_rate`, NaN /
// Inf codes only with specials.
inline uint8_t RandomCode(BlockFormat f, std::mt19937_64& rng, const FillOptions& o) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const uint8_t sign = (rng() & 1) ? 0x80 : 0;
  const bool e2m1 = f == BlockFormat::kMxfp4 || f == BlockFormat::kNvfp4;
  const bool e5m2 = f == BlockFormat::kMxfp8E5M2;
  const double p = u(rng);
  if (e2m1) {
    if (p < 0.15) return static_cast<uint8_t>(sign >> 4);
    if (p < 0.15 + o.saturated_rate) return static_cast<uint8_t>((sign >> 4) | 7);
    return static_cast<uint8_t>((sign >> 4) | (1 + rng() % 6));
  }
  const uint8_t max = e5m2 ? 0x7b : 0x7e;
  if (p < 0.1) return sign;
  if (p < 0.1 + o.saturated_rate) return sign | max;
  if (o.specials && p > 0.995) return sign | (e5m2 ? static_cast<uint8_t>(0x7c + rng() % 4) : 0x7f);
  return sign | static_cast<uint8_t>(1 + rng() % (max - 1));
}

// A random scale in the usual range, or with specials now and then a
// range-end or NaN scale (fp32: zero, subnormal, Inf or NaN).
inline uint32_t RandomScaleBits(BlockFormat f, std::mt19937_64& rng, const FillOptions& o) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const bool special = o.specials && u(rng) < 0.1;
  if (f == BlockFormat::kFp8Block) {
    static const float kSpecial[] = {0.0f, -0.0f, 1e-40f, INFINITY, NAN, 0x1p-126f, 0x1p-20f};
    float s = special ? kSpecial[rng() % 7] : static_cast<float>(std::ldexp(0.5 + u(rng), -6));
    if (!special && rng() % 4 == 0) s = std::ldexp(1.0f, static_cast<int>(rng() % 20) - 12);
    uint32_t bits;
    std::memcpy(&bits, &s, 4);
    return bits;
  }
  if (f == BlockFormat::kNvfp4) {
    static const uint8_t kSpecial[] = {0x00, 0x01, 0x07, 0x08, 0x7e, 0x7f, 0x09, 0x7d};
    return special ? kSpecial[rng() % 8] : static_cast<uint32_t>(0x10 + rng() % 0x60);
  }
  static const uint8_t kSpecial[] = {0x00, 0xfe, 0xff, 0x01, 0xfd};
  return special ? kSpecial[rng() % 5] : static_cast<uint32_t>(107 + rng() % 40);
}

// A source value near y = x_hat * g (a quantization error of a few
// percent), and for y = 0 a small value or zero (underflow, dead blocks).
// With specials, NaN / Inf now and then; NaN only where y != 0, since
// whether a NaN source element keeps a block of zero codes dead is
// ambiguous in the docs (block_literal_test.cc, NonFiniteSourceNextToZero).
inline float RandomSource(double y, bool specials, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  if (std::isnan(y)) return static_cast<float>(u(rng));
  if (specials && rng() % 64 == 0) return y != 0.0 && rng() % 2 ? NAN : -INFINITY;
  if (std::isinf(y)) return static_cast<float>(y);
  if (y == 0.0) return rng() % 2 ? 0.0f : static_cast<float>(std::ldexp(u(rng), -20));
  return static_cast<float>(y * (1.0 + 0.05 * u(rng)));
}

inline void FillRandom(TestBlockTensor* t, uint64_t seed, const FillOptions& o) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const BlockTensorRef ref = t->Ref();
  const uint64_t br = cpu::BlockRowsOf(ref), bc = cpu::BlockColsOf(ref);
  if (o.with_source) t->AddSource(o.source_dtype);
  for (uint64_t bi = 0; bi < t->grid_rows(); ++bi) {
    for (uint64_t bj = 0; bj < t->grid_cols(); ++bj) {
      t->SetScaleBits(bi, bj, RandomScaleBits(t->format(), rng, o));
      const bool zero = u(rng) < o.zero_block_rate;
      for (uint64_t r = bi * br; r < (bi + 1) * br && r < ref.rows; ++r) {
        for (uint64_t c = bj * bc; c < (bj + 1) * bc && c < ref.cols; ++c) {
          t->SetCode(r, c, zero ? 0 : RandomCode(t->format(), rng, o));
        }
      }
    }
  }
  if (!o.with_source) return;
  const BlockTensorRef filled = t->Ref();
  const double g = static_cast<double>(filled.global_scale);
  for (uint64_t r = 0; r < ref.rows; ++r) {
    for (uint64_t c = 0; c < ref.cols; ++c) {
      const double y = cpu::BlockElementValue(filled, r, c) * g;
      t->SetSource(r, c, RandomSource(y, o.specials, rng));
    }
  }
}

// Every field of two BlockStats equal, the doubles bit for bit.
inline void ExpectSameBlock(const BlockStats& want, const BlockStats& got,
                            const std::string& what = "") {
  using S = BlockStats;
  const std::pair<const char*, double S::*> sums[] = {{"sumsq", &S::sumsq},
                                                      {"amax", &S::amax},
                                                      {"error_sumsq", &S::error_sumsq},
                                                      {"source_sumsq", &S::source_sumsq}};
  for (const auto& [name, field] : sums) {
    EXPECT_EQ(Bits(want.*field), Bits(got.*field))
        << what << " " << name << " " << want.*field << " vs " << got.*field;
  }
  const std::pair<const char*, uint64_t S::*> counts[] = {
      {"numel", &S::numel},
      {"nonfinite", &S::nonfinite},
      {"zero_codes", &S::zero_codes},
      {"saturated", &S::saturated},
      {"blocks", &S::blocks},
      {"saturated_blocks", &S::saturated_blocks},
      {"dead_blocks", &S::dead_blocks},
      {"scale_clamps", &S::scale_clamps},
      {"scaled_blocks", &S::scaled_blocks},
      {"underflow", &S::underflow}};
  for (const auto& [name, field] : counts)
    EXPECT_EQ(want.*field, got.*field) << what << " " << name;
  EXPECT_EQ(want.scale_log2_min, got.scale_log2_min) << what;
  EXPECT_EQ(want.scale_log2_max, got.scale_log2_max) << what;
  EXPECT_EQ(want.scale_log2_sum, got.scale_log2_sum) << what;
  EXPECT_EQ(want.has_source, got.has_source) << what;
}

// ComputeBlockStats of the tensors, expected OK.
inline BlockStats FastStats(const std::vector<BlockTensorRef>& refs) {
  BlockStats out;
  const Status s = cpu::ComputeBlockStats(refs.data(), refs.size(), &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

// The implementation and the reference agree bit for bit on `refs`.
inline void ExpectMatchesReference(const std::vector<BlockTensorRef>& refs,
                                   const std::string& what) {
  for (const BlockTensorRef& r : refs) {
    const Status s = cpu::CheckBlockTensor(r);
    ASSERT_TRUE(s.ok()) << what << ": " << s.ToString();
  }
  ExpectSameBlock(cpu::BlockStatsNaive(refs.data(), refs.size()), FastStats(refs), what);
}

}  // namespace gnmr::testing
