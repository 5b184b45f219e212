// The reference's own building blocks against independent constructions:
// the element and scale decoders against the formats' tables, and the
// swizzled scale index of gnmr/block_tensor.h against torchao's
// `to_blocked` replayed as a chain of tensor operations.
#include "kernels/cpu/block_reference.h"

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/client/stats_test_util.h"

namespace gnmr {
namespace {

TEST(BlockReference, E2M1Table) {
  const double magnitudes[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (uint8_t code = 0; code < 16; ++code) {
    const double want = (code & 8) ? -magnitudes[code & 7] : magnitudes[code & 7];
    EXPECT_EQ(cpu::E2M1Value(code), want) << int{code};
    EXPECT_EQ(std::signbit(cpu::E2M1Value(code)), (code & 8) != 0) << int{code};
  }
}

TEST(BlockReference, Fp8AndE8M0) {
  for (int b = 0; b < 256; ++b) {
    const uint8_t code = static_cast<uint8_t>(b);
    const double e4m3 = testing::Fp8ToDouble(code, true);
    const double e5m2 = testing::Fp8ToDouble(code, false);
    if (std::isnan(e4m3)) {
      EXPECT_TRUE(std::isnan(cpu::E4M3Value(code))) << b;
    } else {
      EXPECT_EQ(cpu::E4M3Value(code), e4m3) << b;
    }
    if (std::isnan(e5m2)) {
      EXPECT_TRUE(std::isnan(cpu::E5M2Value(code))) << b;
    } else {
      EXPECT_EQ(cpu::E5M2Value(code), e5m2) << b;
    }
    if (b == 0xff) {
      EXPECT_TRUE(std::isnan(cpu::E8M0Value(code)));
    } else {
      EXPECT_EQ(cpu::E8M0Value(code), std::pow(2.0, b - 127)) << b;
    }
  }
  EXPECT_EQ(cpu::E4M3Value(0x7e), 448.0);
  EXPECT_EQ(cpu::E4M3Value(0x08), 0x1p-6);
  EXPECT_EQ(cpu::E4M3Value(0x01), 0x1p-9);
  EXPECT_EQ(cpu::E5M2Value(0x7b), 57344.0);
  EXPECT_EQ(cpu::E5M2Value(0x7c), INFINITY);
  EXPECT_EQ(cpu::E5M2Value(0xfc), -INFINITY);
}

// A contiguous row-major tensor of ids with torch's shape operations: view
// and reshape of a contiguous tensor keep the data, permute moves it.
struct IdTensor {
  std::vector<uint64_t> shape;
  std::vector<int64_t> data;
};

IdTensor View(IdTensor t, std::vector<uint64_t> shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  EXPECT_EQ(n, t.data.size());
  t.shape = std::move(shape);
  return t;
}

// out[i_0, ..., i_k] = in[j] with j[perm[k]] = i_k.
IdTensor Permute(const IdTensor& t, const std::vector<size_t>& perm) {
  const size_t dims = t.shape.size();
  IdTensor out;
  for (size_t k = 0; k < dims; ++k) out.shape.push_back(t.shape[perm[k]]);
  out.data.resize(t.data.size());
  std::vector<uint64_t> in_stride(dims, 1);
  for (size_t k = dims - 1; k > 0; --k) in_stride[k - 1] = in_stride[k] * t.shape[k];
  for (uint64_t flat = 0; flat < out.data.size(); ++flat) {
    uint64_t rest = flat, in_index = 0;
    for (size_t k = dims; k-- > 0;) {
      const uint64_t i = rest % out.shape[k];
      rest /= out.shape[k];
      in_index += i * in_stride[perm[k]];
    }
    out.data[flat] = t.data[in_index];
  }
  return out;
}

// torchao's to_blocked(input [R, C]): pad to [128 * ceil(R / 128),
// 4 * ceil(C / 4)], view(n_row_blocks, 128, n_col_blocks, 4)
// .permute(0, 2, 1, 3).reshape(-1, 4, 32, 4).transpose(1, 2)
// .reshape(-1, 32, 16).flatten(). Entry p holds the id r * C + c of the
// input entry stored there, or -1 for padding.
std::vector<int64_t> ToBlocked(uint64_t rows, uint64_t cols) {
  const uint64_t n_row_blocks = (rows + 127) / 128, n_col_blocks = (cols + 3) / 4;
  const uint64_t padded_cols = n_col_blocks * 4;
  IdTensor t;
  t.shape = {n_row_blocks * 128, padded_cols};
  t.data.assign(n_row_blocks * 128 * padded_cols, -1);
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) {
      t.data[r * padded_cols + c] = static_cast<int64_t>(r * cols + c);
    }
  }
  t = Permute(View(t, {n_row_blocks, 128, n_col_blocks, 4}), {0, 2, 1, 3});
  t = Permute(View(t, {n_row_blocks * n_col_blocks, 4, 32, 4}), {0, 2, 1, 3});
  t = View(t, {n_row_blocks * n_col_blocks, 32, 16});
  return t.data;
}

TEST(BlockReference, SwizzleFormulaIsToBlocked) {
  const std::pair<uint64_t, uint64_t> grids[] = {{1, 1},   {5, 3},   {32, 4},   {128, 4},
                                                 {130, 7}, {300, 9}, {257, 17}, {64, 130}};
  for (const auto& [rows, cols] : grids) {
    const std::vector<int64_t> blocked = ToBlocked(rows, cols);
    const uint64_t padded_cols = (cols + 3) / 4 * 4;
    uint64_t seen = 0;
    for (uint64_t p = 0; p < blocked.size(); ++p) {
      if (blocked[p] < 0) continue;
      const uint64_t r = static_cast<uint64_t>(blocked[p]) / cols;
      const uint64_t c = static_cast<uint64_t>(blocked[p]) % cols;
      EXPECT_EQ(cpu::SwizzledScaleIndex(r, c, padded_cols), p)
          << "grid [" << rows << ", " << cols << "] entry (" << r << ", " << c << ")";
      ++seen;
    }
    EXPECT_EQ(seen, rows * cols);
  }
}

}  // namespace
}  // namespace gnmr
