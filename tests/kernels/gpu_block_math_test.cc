// The block-scaled kernels' arithmetic (kernels/cuda/block_item_math.h,
// block_walk.h, __host__ __device__) and host plan (block_plan.h) on the
// CPU: decoding, scale classes, packed code figures, and whole requests as
// the kernels compute them (gpu_block_sim.h) against
// gnmr::cpu::ComputeBlockStats and the literal reference
// (kernels/cpu/block_reference.h), bit for bit. Runs without a GPU.
#include <gtest/gtest.h>

#include "kernels/block_stats.h"
#include "kernels/cpu/block_reference.h"
#include "tests/kernels/gpu_block_cases.h"
#include "tests/kernels/gpu_block_sim.h"

namespace gnmr::testing {
namespace {

using BF = BlockFormat;

uint64_t NanOrBits(double x) { return std::isnan(x) ? 1 : Bits(x); }

TEST(GpuBlockMath, CodesDecodeAsDefined) {
  for (uint32_t c = 0; c < 256; ++c) {
    EXPECT_EQ(NanOrBits(blk::DecodeCode<BF::kMxfp8E4M3>(c)), NanOrBits(cpu::E4M3Value(c))) << c;
    EXPECT_EQ(NanOrBits(blk::DecodeCode<BF::kMxfp8E5M2>(c)), NanOrBits(cpu::E5M2Value(c))) << c;
    EXPECT_EQ(NanOrBits(blk::DecodeScale<BF::kMxfp4>(c)),
              NanOrBits(c == 0xff ? NAN : std::ldexp(1.0, static_cast<int>(c) - 127)))
        << c;
    EXPECT_EQ(NanOrBits(blk::DecodeScale<BF::kNvfp4>(c)), NanOrBits(cpu::E4M3Value(c))) << c;
  }
  for (uint32_t c = 0; c < 16; ++c) {
    EXPECT_EQ(Bits(blk::DecodeCode<BF::kMxfp4>(c)), Bits(cpu::E2M1Value(c))) << c;
  }
}

// PackedCodes against a code-by-code loop, on random words and on words
// of one repeated code (every code of the format).
template <BF F>
void CheckPacked(uint64_t w) {
  const blk::Packed p = blk::PackedCodes<F>(w);
  uint32_t zeros = 0, sat = 0, max_mag = 0;
  bool nonfinite = false;
  for (uint32_t i = 0; i < 8; ++i) {
    const uint32_t mag = blk::CodeOf<F>(w, i) & blk::Code<F>::kMask;
    zeros += mag == 0;
    sat += mag == blk::Code<F>::kSaturated;
    max_mag = std::max(max_mag, mag);
    nonfinite = nonfinite || !std::isfinite(blk::DecodeCode<F>(mag));
  }
  EXPECT_EQ(p.zeros, zeros) << std::hex << w;
  EXPECT_EQ(p.saturated, sat) << std::hex << w;
  EXPECT_EQ(p.max_mag, max_mag) << std::hex << w;
  EXPECT_EQ(p.nonfinite, nonfinite) << std::hex << w;
}

template <BF F>
void CheckPackedWords() {
  std::mt19937_64 rng(7);
  const uint32_t bits = blk::Code<F>::kBits;
  for (uint64_t code = 0; code < (1u << bits); ++code) {
    uint64_t w = 0;
    for (uint32_t i = 0; i < 8; ++i) w |= code << (bits * i);
    CheckPacked<F>(w);
  }
  for (int k = 0; k < 20000; ++k) {
    uint64_t w = rng();
    if (bits == 4) w &= 0xffffffffu;
    CheckPacked<F>(w);
  }
}

TEST(GpuBlockMath, PackedCodeFiguresMatchCodeByCode) {
  CheckPackedWords<BF::kMxfp8E4M3>();
  CheckPackedWords<BF::kMxfp8E5M2>();
  CheckPackedWords<BF::kMxfp4>();
  CheckPackedWords<BF::kFp8Block>();
}

TEST(GpuBlockMath, ScaleClassesFollowTheDefinitions) {
  // E8M0: 0x00, 0xFE, 0xFF clamp; 0xFF has no log2.
  EXPECT_TRUE(blk::ClassifyScale<BF::kMxfp4>(0x00).clamp);
  EXPECT_TRUE(blk::ClassifyScale<BF::kMxfp4>(0xfe).clamp);
  EXPECT_FALSE(blk::ClassifyScale<BF::kMxfp4>(0xff).has_log2);
  EXPECT_EQ(blk::ClassifyScale<BF::kMxfp4>(0x00).log2, -127);
  EXPECT_EQ(blk::ClassifyScale<BF::kMxfp4>(0x85).log2, 6);
  EXPECT_FALSE(blk::ClassifyScale<BF::kMxfp4>(0x85).clamp);
  // e4m3fn: <= 2^-6 (0x08), 448 (0x7E), NaN; subnormal 0x01 = 2^-9.
  EXPECT_TRUE(blk::ClassifyScale<BF::kNvfp4>(0x08).clamp);
  EXPECT_FALSE(blk::ClassifyScale<BF::kNvfp4>(0x09).clamp);
  EXPECT_TRUE(blk::ClassifyScale<BF::kNvfp4>(0x7e).clamp);
  EXPECT_EQ(blk::ClassifyScale<BF::kNvfp4>(0x01).log2, -9);
  EXPECT_EQ(blk::ClassifyScale<BF::kNvfp4>(0x07).log2, -7);
  EXPECT_FALSE(blk::ClassifyScale<BF::kNvfp4>(0x00).has_log2);
  // fp32: zero, subnormal, Inf, NaN clamp; subnormals still have a log2.
  EXPECT_TRUE(blk::ClassifyScale<BF::kFp8Block>(0x00000001u).clamp);
  EXPECT_EQ(blk::ClassifyScale<BF::kFp8Block>(0x00000001u).log2, -149);
  EXPECT_EQ(blk::ClassifyScale<BF::kFp8Block>(0x3fffffffu).log2, 0);   // 1.999..
  EXPECT_EQ(blk::ClassifyScale<BF::kFp8Block>(0xbf000000u).log2, -1);  // -0.5
  EXPECT_FALSE(blk::ClassifyScale<BF::kFp8Block>(0x7f800000u).has_log2);
}

BlockStats Cpu(const BlockTensorRef* refs, size_t n) {
  BlockStats s;
  const Status st = cpu::ComputeBlockStats(refs, n, &s);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return s;
}

TEST(GpuBlockMath, SimulatedKernelsMatchTheReferenceForEveryCase) {
  for (bool sources : {false, true}) {
    for (const BlockCase& c : AllBlockCases(sources)) {
      const BlockTensorRef r = c.Ref();
      ExpectSameBlock(cpu::BlockStatsNaive(&r, 1), SimBlockStats(&r, 1), c.name);
    }
  }
}

TEST(GpuBlockMath, TheCasesCoverEveryStatistic) {
  // The comparisons above mean something only if the cases produce every
  // figure: sums, NaN / Inf, saturated, dead and clamped blocks, underflow.
  const std::vector<BlockCase> cases = AllBlockCases(true);
  std::vector<BlockTensorRef> refs;
  for (const BlockCase& c : cases) refs.push_back(c.Ref());
  const BlockStats s = cpu::BlockStatsNaive(refs.data(), refs.size());
  EXPECT_GT(s.nonfinite, 0u);
  EXPECT_GT(s.zero_codes, 0u);
  EXPECT_GT(s.saturated, 0u);
  EXPECT_GT(s.saturated_blocks, 0u);
  EXPECT_GT(s.dead_blocks, 0u);
  EXPECT_GT(s.scale_clamps, 0u);
  EXPECT_GT(s.scaled_blocks, 0u);
  EXPECT_LT(s.scale_log2_min, 0);
  EXPECT_GT(s.underflow, 0u);
  EXPECT_GT(s.error_sumsq, 0.0);
  EXPECT_GT(s.source_sumsq, 0.0);
  int finite = 0;
  for (const BlockCase& c : cases) {
    const BlockTensorRef r = c.Ref();
    const BlockStats one = cpu::BlockStatsNaive(&r, 1);
    finite += std::isfinite(one.sumsq) && one.sumsq > 0.0;
  }
  EXPECT_GT(finite, static_cast<int>(cases.size()) / 2);
  // Without NaN codes and scales the sum is finite and non-zero.
  const BlockCase c =
      MakeBlockCase(BF::kMxfp4, BlockLayout::kRowwise, ScaleLayout::kCompact, 130, 64, 0, 5);
  BlockCase clean = c;
  for (unsigned char& b : clean.scales) b = b >= 0xfe ? 0x7f : b;
  const BlockTensorRef r = clean.Ref();
  const BlockStats f = cpu::BlockStatsNaive(&r, 1);
  EXPECT_TRUE(std::isfinite(f.sumsq) && f.sumsq > 0.0) << f.sumsq;
  ExpectSameBlock(SimBlockStats(&r, 1), f, "finite mxfp4");
}

TEST(GpuBlockMath, SimulatedKernelsMatchTheCpuPathForEveryCase) {
  for (bool sources : {false, true}) {
    for (const BlockCase& c : AllBlockCases(sources)) {
      const BlockTensorRef r = c.Ref();
      ExpectSameBlock(SimBlockStats(&r, 1), Cpu(&r, 1), c.name);
    }
  }
  std::vector<BlockCase> cases = AllBlockCases(true);
  std::vector<BlockTensorRef> refs;
  for (const BlockCase& c : cases) refs.push_back(c.Ref());
  ExpectSameBlock(SimBlockStats(refs.data(), refs.size()), Cpu(refs.data(), refs.size()),
                  "every case in one unit");
  // An empty tensor with a source adds nothing but has_source.
  const BlockCase empty =
      MakeBlockCase(BF::kNvfp4, BlockLayout::kRowwise, ScaleLayout::kCompact, 0, 64, 1, 99);
  ASSERT_TRUE(cases[3].source.empty());
  BlockTensorRef pair[] = {cases[3].Ref(), empty.Ref()};
  const float dummy = 0.0f;
  pair[1].source = &dummy;  // an empty source: no bytes, but a pointer
  ExpectSameBlock(SimBlockStats(pair, 2), Cpu(pair, 2), "with an empty sourced tensor");
  EXPECT_TRUE(SimBlockStats(pair, 2).has_source);
}

TEST(GpuBlockMath, SimulatedKernelsMatchTheReferenceForMixedUnits) {
  const std::vector<BlockCase> cases = AllBlockCases(true);
  std::vector<BlockTensorRef> refs;
  for (size_t i = 0; i < cases.size(); i += 7) refs.push_back(cases[i].Ref());
  refs.push_back(MakeBlockCase(BF::kNvfp4, BlockLayout::kRowwise, ScaleLayout::kCompact, 0, 64, 1,
                               99)
                     .Ref());  // empty, with a source
  ExpectSameBlock(SimBlockStats(refs.data(), refs.size()),
                  cpu::BlockStatsNaive(refs.data(), refs.size()), "mixed unit");
}

TEST(GpuBlockMath, SeveralItemsAndATailItem) {
  // 9 items and a tail (130 x 257), and 5 x 1030 wide rows: the item tree
  // and the (row, column) stepping across item rows.
  for (BF f : AllFormats()) {
    for (BlockLayout l : {BlockLayout::kRowwise, BlockLayout::kColumnwise}) {
      const BlockCase c = MakeBlockCase(f, l, ScaleLayout::kSwizzled, 200, 300, 2, 7);
      const BlockTensorRef r = c.Ref();
      ExpectSameBlock(SimBlockStats(&r, 1), cpu::BlockStatsNaive(&r, 1), c.name);
    }
  }
}

TEST(GpuBlockPlan, RefusesWhatTheCpuCheckRefuses) {
  const BlockCase good =
      MakeBlockCase(BF::kMxfp8E4M3, BlockLayout::kRowwise, ScaleLayout::kCompact, 4, 64, 0, 3);
  ASSERT_TRUE(blk::CheckBlockShape(good.Ref()).ok());
  auto refused = [&](auto mutate, const char* what) {
    BlockTensorRef r = good.Ref();
    mutate(r);
    const Status s = blk::CheckBlockShape(r);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
    if (BlockFormatBlockSize(r.format) != 0) {
      EXPECT_NE(s.message().find(BlockFormatName(r.format)), std::string::npos) << s.message();
    }
  };
  refused([](BlockTensorRef& r) { r.format = static_cast<BF>(9); }, "format");
  refused([](BlockTensorRef& r) { r.layout = static_cast<BlockLayout>(3); }, "layout");
  refused([](BlockTensorRef& r) { r.scale_layout = static_cast<ScaleLayout>(3); }, "scale layout");
  refused([](BlockTensorRef& r) { r.data = nullptr; }, "null data");
  refused([](BlockTensorRef& r) { r.scales = nullptr; }, "null scales");
  refused(
      [](BlockTensorRef& r) {
        r.rows = uint64_t{1} << 40;
        r.cols = 1 << 9;
      },
      "2^49 elements");
  refused([](BlockTensorRef& r) { r.scale_cols = 1; }, "scales short of the grid");
  refused(
      [](BlockTensorRef& r) {
        r.scale_rows = uint64_t{1} << 21;
        r.scale_cols = 1 << 20;
      },
      "2^41 scales");
  refused([](BlockTensorRef& r) { r.scale_layout = ScaleLayout::kSwizzled; }, "unpadded swizzle");
  refused(
      [](BlockTensorRef& r) {
        r.layout = BlockLayout::kSquare;
        r.scale_layout = ScaleLayout::kSwizzled;
      },
      "swizzled square");
  refused([](BlockTensorRef& r) { r.global_scale = 2.0f; }, "global_scale outside NVFP4");
  refused(
      [](BlockTensorRef& r) {
        r.format = BF::kMxfp4;
        r.rows = 3;
        r.cols = 63;
      },
      "odd E2M1");
  refused(
      [](BlockTensorRef& r) {
        r.format = BF::kNvfp4;
        r.global_scale = INFINITY;
      },
      "infinite global_scale");
  refused(
      [](BlockTensorRef& r) {
        r.source = r.data;
        r.source_dtype = DType::kFp8E4M3;
      },
      "fp8 source");
  refused(
      [](BlockTensorRef& r) {
        r.format = BF::kFp8Block;
        r.scales = static_cast<const unsigned char*>(r.scales) + 1;
      },
      "unaligned fp32 scales");
}

TEST(GpuBlockPlan, GroupsByFormatAndSourceAndRefusesOtherDevices) {
  const std::vector<BlockCase> cases = AllBlockCases(true);
  std::vector<BlockTensorRef> refs;
  for (const BlockCase& c : cases) refs.push_back(c.Ref());
  blk::Plan plan;
  auto same = [](const void* p, size_t, size_t, const void** d) {
    *d = p;
    return Status::Ok();
  };
  ASSERT_TRUE(blk::BuildPlan(refs.data(), refs.size(), kHostDevice, same, &plan).ok());
  // Per format: the block kernel's group holds every (non-empty) tensor of
  // it, the item kernel's those with a source.
  std::vector<int> in_block_group(refs.size()), in_source_group(refs.size());
  for (const blk::Group& g : plan.groups) {
    for (uint32_t i = g.first; i < g.first + g.count; ++i) {
      const blk::BlockDesc& d = plan.descs[plan.order[i]];
      EXPECT_EQ(d.format, static_cast<uint32_t>(g.format));
      ++(g.source ? in_source_group : in_block_group)[plan.order[i]];
    }
  }
  for (size_t i = 0; i < refs.size(); ++i) {
    EXPECT_EQ(in_block_group[i], 1) << i;
    EXPECT_EQ(in_source_group[i], refs[i].source != nullptr ? 1 : 0) << i;
  }
  refs[3].device = 1;
  const Status s = blk::BuildPlan(refs.data(), refs.size(), kHostDevice, same, &plan);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor 3"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace gnmr::testing
