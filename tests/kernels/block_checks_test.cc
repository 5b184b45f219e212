// The inputs kernels/block_stats.h refuses, one test each: InvalidArgument
// (Unimplemented for a device tensor) from CheckBlockTensor and from
// ComputeBlockStats, whose `out` stays untouched, with a message naming the
// tensor's format and layout.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/kernels/block_test_util.h"

namespace gnmr {
namespace {

using testing::ScalePad;
using testing::TestBlockTensor;

// The header does not spell the layouts' names; these are the enum's.
const char* LayoutWord(BlockLayout l) {
  switch (l) {
    case BlockLayout::kRowwise:
      return "rowwise";
    case BlockLayout::kColumnwise:
      return "columnwise";
    case BlockLayout::kSquare:
      return "square";
  }
  return "";
}

// `bad` is refused alone and as the second tensor of a unit whose first is
// valid; `out` keeps its sentinel values.
void ExpectRefused(const BlockTensorRef& bad, StatusCode code = StatusCode::kInvalidArgument,
                   bool names_format = true) {
  const Status check = cpu::CheckBlockTensor(bad);
  EXPECT_EQ(check.code(), code) << check.ToString();
  if (names_format) {
    EXPECT_NE(check.message().find(BlockFormatName(bad.format)), std::string::npos)
        << check.message();
    EXPECT_NE(check.message().find(LayoutWord(bad.layout)), std::string::npos) << check.message();
  }
  TestBlockTensor good(BlockFormat::kMxfp8E4M3, BlockLayout::kRowwise, 4, 64);
  testing::FillRandom(&good, 1, {});
  const std::vector<BlockTensorRef> refs = {good.Ref(), bad};
  BlockStats out;
  out.numel = 12345;
  out.sumsq = 7.0;
  out.blocks = 99;
  out.has_source = true;
  const Status s = cpu::ComputeBlockStats(refs.data(), refs.size(), &out);
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_EQ(out.numel, 12345u);
  EXPECT_EQ(out.sumsq, 7.0);
  EXPECT_EQ(out.blocks, 99u);
  EXPECT_TRUE(out.has_source);
}

// A small valid tensor of each format and layout to break.
struct Valid {
  explicit Valid(BlockFormat f, BlockLayout l = BlockLayout::kRowwise,
                 ScalePad pad = ScalePad::kExact)
      : t(f, l, 64, 64, pad) {
    testing::FillRandom(&t, 3, {});
    ref = t.Ref();
    EXPECT_TRUE(cpu::CheckBlockTensor(ref).ok()) << cpu::CheckBlockTensor(ref).ToString();
  }
  TestBlockTensor t;
  BlockTensorRef ref;
};

TEST(BlockChecks, FormatOutsideEnum) {
  Valid v(BlockFormat::kMxfp8E4M3);
  for (int f : {0, 6, 255}) {
    v.ref.format = static_cast<BlockFormat>(f);
    ExpectRefused(v.ref, StatusCode::kInvalidArgument, false);
    EXPECT_NE(cpu::CheckBlockTensor(v.ref).message().find("unknown"), std::string::npos);
  }
}

// Disabled: block_stats.h says every message names the tensor's format and
// layout, but block_check.cc answers "unknown block format N" without the
// layout (here "rowwise").
TEST(BlockChecks, FormatOutsideEnumNamesLayout) {
  Valid v(BlockFormat::kMxfp8E4M3);
  v.ref.format = static_cast<BlockFormat>(6);
  ExpectRefused(v.ref);
}

TEST(BlockChecks, LayoutOutsideEnum) {
  Valid v(BlockFormat::kNvfp4);
  v.ref.layout = static_cast<BlockLayout>(3);
  ExpectRefused(v.ref, StatusCode::kInvalidArgument, false);
  EXPECT_NE(cpu::CheckBlockTensor(v.ref).message().find("nvfp4"), std::string::npos);
}

TEST(BlockChecks, ScaleLayoutOutsideEnum) {
  Valid v(BlockFormat::kMxfp4, BlockLayout::kColumnwise);
  v.ref.scale_layout = static_cast<ScaleLayout>(3);
  ExpectRefused(v.ref);
}

TEST(BlockChecks, SourceDtypeOutsideEnum) {
  Valid v(BlockFormat::kFp8Block);
  v.t.AddSource(DType::kFp32);
  v.ref = v.t.Ref();
  v.ref.source_dtype = static_cast<DType>(0);
  ExpectRefused(v.ref);
  v.ref.source_dtype = static_cast<DType>(6);
  ExpectRefused(v.ref);
  // DType's fp8 values are in its enum but are no source dtype
  // (BlockTensorRef::source: fp32 / bf16 / fp16).
  v.ref.source_dtype = DType::kFp8E4M3;
  ExpectRefused(v.ref);
}

TEST(BlockChecks, NullData) {
  Valid v(BlockFormat::kMxfp8E5M2, BlockLayout::kColumnwise);
  v.ref.data = nullptr;
  ExpectRefused(v.ref);
}

TEST(BlockChecks, MoreThan2To48Elements) {
  // 128x128 blocks keep the scale grid (2^34 entries) within its limit.
  Valid v(BlockFormat::kFp8Block, BlockLayout::kSquare);
  v.ref.rows = 1ull << 24;
  v.ref.cols = (1ull << 24) + 128;
  v.ref.scale_rows = v.ref.rows / 128;
  v.ref.scale_cols = v.ref.cols / 128;
  ExpectRefused(v.ref);
  // rows * cols wraps around to 0 in 64 bits (refused for the scales too).
  v.ref.rows = 1ull << 40;
  v.ref.cols = 1ull << 40;
  ExpectRefused(v.ref);
}

TEST(BlockChecks, E2M1OddElementCount) {
  for (BlockFormat f : {BlockFormat::kMxfp4, BlockFormat::kNvfp4}) {
    TestBlockTensor t(f, BlockLayout::kRowwise, 3, 5);
    ExpectRefused(t.Ref());
  }
}

TEST(BlockChecks, NullScales) {
  Valid v(BlockFormat::kNvfp4, BlockLayout::kSquare);
  v.ref.scales = nullptr;
  ExpectRefused(v.ref);
}

TEST(BlockChecks, CompactScalesDoNotCoverTheGrid) {
  Valid v(BlockFormat::kMxfp8E4M3, BlockLayout::kRowwise);  // grid [64, 2]
  v.ref.scale_cols = 1;
  ExpectRefused(v.ref);
  v.ref.scale_cols = 2;
  v.ref.scale_rows = 63;
  ExpectRefused(v.ref);
  Valid c(BlockFormat::kFp8Block, BlockLayout::kColumnwise);  // grid [1, 64]
  c.ref.scale_cols = 63;
  ExpectRefused(c.ref);
}

TEST(BlockChecks, SwizzledScalesNotThePaddedGrid) {
  Valid v(BlockFormat::kMxfp8E4M3, BlockLayout::kRowwise, ScalePad::kSwizzled);  // [128, 4]
  v.ref.scale_rows = 256;
  ExpectRefused(v.ref);
  v.ref.scale_rows = 64;  // the grid itself, unpadded
  v.ref.scale_cols = 2;
  ExpectRefused(v.ref);
  Valid c(BlockFormat::kNvfp4, BlockLayout::kColumnwise, ScalePad::kSwizzled);  // [128, 4]
  c.ref.scale_cols = 8;
  ExpectRefused(c.ref);
}

// kCompactTransposed: [blocks across, blocks down] must be covered; the
// untransposed shape of a non-square grid is not enough.
TEST(BlockChecks, TransposedScalesMustCoverTheTransposedGrid) {
  Valid v(BlockFormat::kFp8Block, BlockLayout::kRowwise, ScalePad::kTransposed);
  EXPECT_TRUE(cpu::CheckBlockTensor(v.ref).ok());
  const uint64_t across = v.ref.scale_rows, down_padded = v.ref.scale_cols;
  v.ref.scale_rows = across - 1;
  ExpectRefused(v.ref);
  EXPECT_NE(cpu::CheckBlockTensor(v.ref).message().find("transposed"), std::string::npos);
  v.ref.scale_rows = across;
  v.ref.scale_cols = v.t.grid_rows() - 1;
  ExpectRefused(v.ref);
  v.ref.scale_cols = down_padded;
  EXPECT_TRUE(cpu::CheckBlockTensor(v.ref).ok());
}

TEST(BlockChecks, MoreThan2To40Scales) {
  Valid v(BlockFormat::kMxfp8E4M3);
  v.ref.scale_rows = 1ull << 21;
  v.ref.scale_cols = 1ull << 20;
  ExpectRefused(v.ref);
}

TEST(BlockChecks, SwizzledSquareBlocks) {
  Valid v(BlockFormat::kNvfp4, BlockLayout::kSquare);  // grid [4, 4]
  v.ref.scale_layout = ScaleLayout::kSwizzled;
  v.ref.scale_rows = 128;
  v.ref.scale_cols = 4;
  ExpectRefused(v.ref);
}

TEST(BlockChecks, Fp32ScalesMisaligned) {
  Valid v(BlockFormat::kFp8Block, BlockLayout::kSquare);
  v.ref.scales = static_cast<const unsigned char*>(v.ref.scales) + 2;
  ExpectRefused(v.ref);
}

TEST(BlockChecks, SourceMisaligned) {
  for (DType dtype : {DType::kFp32, DType::kBf16, DType::kFp16}) {
    Valid v(BlockFormat::kMxfp8E4M3);
    v.t.AddSource(dtype);
    v.ref = v.t.Ref();
    EXPECT_TRUE(cpu::CheckBlockTensor(v.ref).ok());
    const unsigned char* source = static_cast<const unsigned char*>(v.ref.source);
    v.ref.source = source + 1;
    ExpectRefused(v.ref);
    if (dtype == DType::kFp32) {
      v.ref.source = source + 2;
      ExpectRefused(v.ref);
    }
  }
}

TEST(BlockChecks, GlobalScaleNotFinite) {
  Valid v(BlockFormat::kNvfp4);
  for (float g : {NAN, INFINITY, -INFINITY}) {
    v.ref.global_scale = g;
    ExpectRefused(v.ref);
  }
}

TEST(BlockChecks, GlobalScaleOnOtherFormats) {
  for (BlockFormat f : {BlockFormat::kMxfp8E4M3, BlockFormat::kMxfp8E5M2, BlockFormat::kMxfp4,
                        BlockFormat::kFp8Block}) {
    Valid v(f);
    v.ref.global_scale = 2.0f;
    ExpectRefused(v.ref);
  }
}

TEST(BlockChecks, DeviceTensorUnimplemented) {
  Valid v(BlockFormat::kMxfp8E4M3);
  v.ref.device = 0;
  ExpectRefused(v.ref, StatusCode::kUnimplemented);
}

// The limits themselves are accepted (checked only: nothing is read).
TEST(BlockChecks, LimitsAccepted) {
  Valid v(BlockFormat::kFp8Block, BlockLayout::kSquare);
  v.ref.rows = 1ull << 24;  // 2^48 elements, 2^34 scales
  v.ref.cols = 1ull << 24;
  v.ref.scale_rows = v.ref.rows / 128;
  v.ref.scale_cols = v.ref.cols / 128;
  EXPECT_TRUE(cpu::CheckBlockTensor(v.ref).ok()) << cpu::CheckBlockTensor(v.ref).ToString();
  Valid s(BlockFormat::kMxfp8E4M3);  // grid [64, 2], 2^40 scales
  s.ref.scale_rows = 1ull << 20;
  s.ref.scale_cols = 1ull << 20;
  EXPECT_TRUE(cpu::CheckBlockTensor(s.ref).ok()) << cpu::CheckBlockTensor(s.ref).ToString();
}

TEST(BlockChecks, ValidEdgeCasesAccepted) {
  TestBlockTensor empty(BlockFormat::kMxfp4, BlockLayout::kRowwise, 0, 0);
  EXPECT_TRUE(cpu::CheckBlockTensor(empty.Ref()).ok());  // data null, no elements
  TestBlockTensor odd(BlockFormat::kMxfp8E4M3, BlockLayout::kRowwise, 3, 5, ScalePad::kExact, 1);
  EXPECT_TRUE(cpu::CheckBlockTensor(odd.Ref()).ok());  // codes at an odd address
  Valid g(BlockFormat::kNvfp4);
  g.ref.global_scale = 0.0f;  // finite
  EXPECT_TRUE(cpu::CheckBlockTensor(g.ref).ok());
}

}  // namespace
}  // namespace gnmr
