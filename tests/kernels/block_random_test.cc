// ComputeBlockStats against the literal reference (kernels/cpu/
// block_reference.h), bit for bit, on seeded random tensors: every format,
// block layout and scale layout, tail shapes, special codes and scales,
// sources of every dtype, multi-tensor units.
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu_isa.h"
#include "tests/kernels/block_test_util.h"

namespace gnmr {
namespace {

using testing::ExpectMatchesReference;
using testing::FastStats;
using testing::FillOptions;
using testing::FillRandom;
using testing::ScalePad;
using testing::TestBlockTensor;

const BlockFormat kFormats[] = {BlockFormat::kMxfp8E4M3, BlockFormat::kMxfp8E5M2,
                                BlockFormat::kMxfp4, BlockFormat::kNvfp4, BlockFormat::kFp8Block};

bool IsE2M1(BlockFormat f) { return f == BlockFormat::kMxfp4 || f == BlockFormat::kNvfp4; }

std::string Describe(const BlockTensorRef& r, const std::string& fill) {
  return std::string(BlockFormatName(r.format)) + " layout " +
         std::to_string(static_cast<int>(r.layout)) + " scales " +
         std::to_string(static_cast<int>(r.scale_layout)) + " [" + std::to_string(r.rows) + ", " +
         std::to_string(r.cols) + "] " + fill;
}

// Tails of every kind: empty, one element (E2M1: two), rows and columns off
// the block size, element counts off 256 and 4096, exact multiples of 4096,
// several work items.
std::vector<std::pair<uint64_t, uint64_t>> Shapes(BlockFormat f) {
  return {{0, 0},   {0, 70},    {6, 0},     {1, IsE2M1(f) ? 2u : 1u}, {2, 3},    {33, 70},
          {64, 64}, {128, 128}, {130, 257}, {16, 4097 * 2},           {257, 300}};
}

struct Fill {
  const char* name;
  FillOptions options;
};

std::vector<Fill> Fills() {
  FillOptions specials;
  specials.specials = true;
  FillOptions saturating;
  saturating.saturated_rate = 0.5;
  saturating.zero_block_rate = 0.3;
  std::vector<Fill> fills = {{"plain", {}}, {"specials", specials}, {"saturating", saturating}};
  const std::pair<const char*, DType> sources[] = {
      {"fp32 source", DType::kFp32}, {"bf16 source", DType::kBf16}, {"fp16 source", DType::kFp16}};
  for (const auto& [name, dtype] : sources) {
    FillOptions o;
    o.with_source = true;
    o.source_dtype = dtype;
    fills.push_back({name, o});
  }
  FillOptions special_source = specials;
  special_source.with_source = true;
  fills.push_back({"specials, fp32 source", special_source});
  return fills;
}

// NVFP4's global scale: powers of two, other values, negative, subnormal,
// zero (all finite, so all valid).
float GlobalScale(BlockFormat f, uint64_t seed) {
  if (f != BlockFormat::kNvfp4) return 1.0f;
  const float g[] = {1.0f, 0.001953125f, 3.7e-3f, 123.456f, 0.0f, -0.75f, 1e-40f};
  return g[seed % 7];
}

class BlockRandom
    : public ::testing::TestWithParam<std::tuple<BlockFormat, BlockLayout, ScalePad>> {};

TEST_P(BlockRandom, MatchesReference) {
  const auto [format, layout, pad] = GetParam();
  uint64_t seed = static_cast<uint64_t>(format) * 1000 + static_cast<uint64_t>(layout) * 100 +
                  static_cast<uint64_t>(pad) * 10;
  BlockStats seen;
  for (const auto& [rows, cols] : Shapes(format)) {
    for (const Fill& fill : Fills()) {
      ++seed;
      TestBlockTensor t(format, layout, rows, cols, pad, seed % 3);
      t.set_global_scale(GlobalScale(format, seed));
      FillRandom(&t, seed, fill.options);
      ExpectMatchesReference({t.Ref()}, Describe(t.Ref(), fill.name));
      const BlockTensorRef ref = t.Ref();
      const BlockStats s = cpu::BlockStatsNaive(&ref, 1);
      seen.nonfinite += s.nonfinite;
      seen.scale_clamps += s.scale_clamps;
      seen.dead_blocks += s.dead_blocks;
      seen.saturated_blocks += s.saturated_blocks;
      seen.underflow += s.underflow;
    }
  }
  // The fills reach every special case they are meant to.
  EXPECT_GT(seen.nonfinite, 0u);
  EXPECT_GT(seen.scale_clamps, 0u);
  EXPECT_GT(seen.dead_blocks, 0u);
  EXPECT_GT(seen.saturated_blocks, 0u);
  EXPECT_GT(seen.underflow, 0u);
}

std::string ParamName(
    const ::testing::TestParamInfo<std::tuple<BlockFormat, BlockLayout, ScalePad>>& info) {
  const char* layouts[] = {"Rowwise", "Columnwise", "Square"};
  const char* pads[] = {"Exact", "Padded", "Swizzled", "Transposed"};
  std::string name = BlockFormatName(std::get<0>(info.param));
  return name + "_" + layouts[static_cast<int>(std::get<1>(info.param))] + "_" +
         pads[static_cast<int>(std::get<2>(info.param))];
}

INSTANTIATE_TEST_SUITE_P(Compact, BlockRandom,
                         ::testing::Combine(::testing::ValuesIn(kFormats),
                                            ::testing::Values(BlockLayout::kRowwise,
                                                              BlockLayout::kColumnwise,
                                                              BlockLayout::kSquare),
                                            ::testing::Values(ScalePad::kExact, ScalePad::kPadded)),
                         ParamName);

INSTANTIATE_TEST_SUITE_P(Transposed, BlockRandom,
                         ::testing::Combine(::testing::ValuesIn(kFormats),
                                            ::testing::Values(BlockLayout::kRowwise,
                                                              BlockLayout::kSquare),
                                            ::testing::Values(ScalePad::kTransposed)),
                         ParamName);

INSTANTIATE_TEST_SUITE_P(Swizzled, BlockRandom,
                         ::testing::Combine(::testing::ValuesIn(kFormats),
                                            ::testing::Values(BlockLayout::kRowwise,
                                                              BlockLayout::kColumnwise),
                                            ::testing::Values(ScalePad::kSwizzled)),
                         ParamName);

// Every kernel build gives the reference's bits; a build this CPU cannot
// run is Unimplemented.
TEST(BlockRandomUnits, EveryIsaBuildMatchesReference) {
  uint64_t seed = 500;
  for (BlockFormat format : kFormats) {
    for (BlockLayout layout :
         {BlockLayout::kRowwise, BlockLayout::kColumnwise, BlockLayout::kSquare}) {
      for (const Fill& fill : Fills()) {
        ++seed;
        TestBlockTensor t(format, layout, 131, 290, ScalePad::kPadded, seed % 3);
        t.set_global_scale(GlobalScale(format, seed));
        FillRandom(&t, seed, fill.options);
        const BlockTensorRef ref = t.Ref();
        const BlockStats want = cpu::BlockStatsNaive(&ref, 1);
        for (cpu::Isa isa : {cpu::Isa::kBaseline, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
          BlockStats got;
          const Status s = cpu::ComputeBlockStatsWithIsa(isa, &ref, 1, &got);
          if (!cpu::IsaAvailable(isa)) {
            EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << cpu::IsaName(isa);
            continue;
          }
          ASSERT_TRUE(s.ok()) << s.ToString();
          testing::ExpectSameBlock(want, got,
                                   Describe(ref, fill.name) + " isa " + cpu::IsaName(isa));
        }
      }
    }
  }
}

// The same block scales stored compact and swizzled give the same
// statistics (checks the implementation's swizzle without the reference).
TEST(BlockRandomUnits, SwizzledEqualsCompact) {
  for (BlockFormat format : kFormats) {
    for (BlockLayout layout : {BlockLayout::kRowwise, BlockLayout::kColumnwise}) {
      TestBlockTensor compact(format, layout, 300, 260, ScalePad::kPadded);
      TestBlockTensor swizzled(format, layout, 300, 260, ScalePad::kSwizzled);
      FillOptions o;
      o.with_source = true;
      FillRandom(&compact, 77, o);
      FillRandom(&swizzled, 77, o);
      testing::ExpectSameBlock(FastStats({compact.Ref()}), FastStats({swizzled.Ref()}),
                               BlockFormatName(format));
    }
  }
}

// Units of several tensors: formats mixed, sums combined in tensor order.
TEST(BlockRandomUnits, MultiTensorUnits) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    std::vector<TestBlockTensor> tensors;
    for (size_t k = 0; k < 4; ++k) {
      const BlockFormat format = kFormats[(seed + k) % 5];
      const BlockLayout layout = k % 2 ? BlockLayout::kColumnwise : BlockLayout::kRowwise;
      tensors.emplace_back(format, layout, 40 + 37 * k, 96 + 2 * seed, ScalePad::kPadded);
      FillOptions o;
      o.specials = seed % 3 == 0;
      o.with_source = true;  // every tensor: has_source is not ambiguous
      o.source_dtype = k % 2 ? DType::kBf16 : DType::kFp32;
      tensors.back().set_global_scale(GlobalScale(format, seed + k));
      FillRandom(&tensors.back(), seed * 10 + k, o);
    }
    std::vector<BlockTensorRef> refs;
    for (const TestBlockTensor& t : tensors) refs.push_back(t.Ref());
    ExpectMatchesReference(refs, "unit " + std::to_string(seed));
    const TestBlockTensor empty(BlockFormat::kNvfp4, BlockLayout::kRowwise, 0, 0);
    refs.push_back(empty.Ref());
    ExpectMatchesReference(refs, "unit with an empty tensor " + std::to_string(seed));
  }
}

// A unit where some tensors have a source and others do not: the
// reference reads has_source as "any tensor has one", its sums and counts
// over those tensors.
TEST(BlockRandomUnits, SomeTensorsWithSource) {
  TestBlockTensor a(BlockFormat::kMxfp8E4M3, BlockLayout::kRowwise, 64, 64);
  TestBlockTensor b(BlockFormat::kNvfp4, BlockLayout::kRowwise, 64, 64);
  FillOptions with;
  with.with_source = true;
  FillRandom(&a, 5, {});
  FillRandom(&b, 6, with);
  ExpectMatchesReference({a.Ref(), b.Ref()}, "without, with");
  ExpectMatchesReference({b.Ref(), a.Ref()}, "with, without");
}

}  // namespace
}  // namespace gnmr
