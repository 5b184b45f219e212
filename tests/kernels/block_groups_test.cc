// The rowwise e4m3 path that takes blocks in aligned groups of 8 (MXFP8
// e4m3 1x32, FP8 block 1x128; kernels/cpu/block_fp8_avx512.h where the CPU
// has VBMI and VNNI) against the literal reference, bit for bit, in every
// ISA build: groups inside a row and across rows, the blocks after the
// last group, every scale layout, and the groups it refuses (NaN codes,
// NaN / zero / subnormal / Inf fp32 scales) next to groups it takes.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu_isa.h"
#include "tests/kernels/block_test_util.h"

namespace gnmr {
namespace {

using testing::FillOptions;
using testing::FillRandom;
using testing::ScalePad;
using testing::TestBlockTensor;

const BlockFormat kFormats[] = {BlockFormat::kMxfp8E4M3, BlockFormat::kFp8Block};
const ScalePad kPads[] = {ScalePad::kExact, ScalePad::kPadded, ScalePad::kSwizzled,
                          ScalePad::kTransposed};

uint64_t BlockOf(BlockFormat f) { return f == BlockFormat::kFp8Block ? 128 : 32; }

// Every ISA build this CPU runs gives the reference's bits.
void ExpectEveryIsa(const TestBlockTensor& t, const std::string& what) {
  const BlockTensorRef ref = t.Ref();
  ASSERT_TRUE(cpu::CheckBlockTensor(ref).ok()) << what;
  const BlockStats want = cpu::BlockStatsNaive(&ref, 1);
  for (cpu::Isa isa : {cpu::Isa::kBaseline, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (!cpu::IsaAvailable(isa)) continue;
    BlockStats got;
    ASSERT_TRUE(cpu::ComputeBlockStatsWithIsa(isa, &ref, 1, &got).ok()) << what;
    testing::ExpectSameBlock(want, got, what + " isa " + cpu::IsaName(isa));
  }
}

// Blocks per row: one (groups span 8 rows), fewer than a group, a group,
// off a group (groups across rows), several groups; block counts off 8.
TEST(BlockGroups, RandomShapesFillsAndLayouts) {
  FillOptions specials;
  specials.specials = true;
  FillOptions saturating;
  saturating.saturated_rate = 0.5;
  saturating.zero_block_rate = 0.3;
  FillOptions rare_zero;
  rare_zero.zero_block_rate = 0.0;
  rare_zero.saturated_rate = 0.0;
  const std::pair<const char*, FillOptions> fills[] = {
      {"plain", {}}, {"specials", specials}, {"saturating", saturating}, {"no zero", rare_zero}};
  uint64_t seed = 9000;
  for (BlockFormat format : kFormats) {
    for (ScalePad pad : kPads) {
      for (uint64_t per_row : {1, 3, 8, 13, 24}) {
        for (uint64_t rows : {1, 7, 17}) {
          for (const auto& [name, options] : fills) {
            ++seed;
            TestBlockTensor t(format, BlockLayout::kRowwise, rows, per_row * BlockOf(format), pad,
                              seed % 3);
            FillRandom(&t, seed, options);
            ExpectEveryIsa(t, std::string(BlockFormatName(format)) + " pad " +
                                  std::to_string(static_cast<int>(pad)) + " " +
                                  std::to_string(rows) + "x" + std::to_string(per_row) +
                                  " blocks " + name);
          }
        }
      }
    }
  }
}

// Scales at the ends of their range (E8M0 0x00 = 2^-127 and 0xfe = 2^127;
// fp32 smallest and largest normal), all-zero and all-saturated blocks,
// and one special per group in turn: its group goes the scalar way.
TEST(BlockGroups, EdgeScalesAndCodes) {
  for (BlockFormat format : kFormats) {
    const uint64_t b = BlockOf(format);
    const bool fp32 = format == BlockFormat::kFp8Block;
    TestBlockTensor t(format, BlockLayout::kRowwise, 4, 16 * b);
    FillRandom(&t, 7, {});
    const uint32_t ends[] = {fp32 ? 0x00800000u : 0x00u, fp32 ? 0x7f7fffffu : 0xfeu,
                             fp32 ? 0xbf800000u : 0x7fu, fp32 ? 0x3fc00001u : 0x80u};
    for (uint64_t bi = 0; bi < 4; ++bi) {
      for (uint64_t bj = 0; bj < 16; ++bj) t.SetScaleBits(bi, bj, ends[(bi + bj) % 4]);
    }
    for (uint64_t c = 0; c < b; ++c) {
      t.SetCode(0, c, 0x00);                             // block (0, 0): all zero, dead
      t.SetCode(0, b + c, 0x80);                         // block (0, 1): all -0, dead
      t.SetCode(1, c, 0x7e | (c % 2 ? 0x80 : 0));        // block (1, 0): all saturated
      t.SetCode(1, b + c, static_cast<uint8_t>(c % 8));  // block (1, 1): subnormal or zero
      t.SetCode(2, c, static_cast<uint8_t>(c % 9 == 8 ? 0x88 : c % 8));  // (2, 0): up to 2^-6
      t.SetCode(3, b + c, 0x01);                                         // (3, 1): all 2^-9
    }
    ExpectEveryIsa(t, std::string(BlockFormatName(format)) + " range ends");
    // One special in each group in turn (and the others intact).
    const uint32_t special_scales[] = {fp32 ? 0x7fc00000u : 0xffu, fp32 ? 0x00000001u : 0xffu,
                                       fp32 ? 0x80000000u : 0xffu, fp32 ? 0x7f800000u : 0xffu};
    for (uint64_t group = 0; group < 8; ++group) {
      TestBlockTensor u(format, BlockLayout::kRowwise, 4, 16 * b);
      FillRandom(&u, 100 + group, {});
      const uint64_t bi = group / 2, bj = (group % 2) * 8 + group % 8;
      u.SetScaleBits(bi, bj, special_scales[group % 4]);
      ExpectEveryIsa(
          u, std::string(BlockFormatName(format)) + " scale in group " + std::to_string(group));
      TestBlockTensor v(format, BlockLayout::kRowwise, 4, 16 * b);
      FillRandom(&v, 200 + group, {});
      v.SetCode(bi, bj * b + group, group % 2 ? 0xff : 0x7f);  // NaN code
      ExpectEveryIsa(
          v, std::string(BlockFormatName(format)) + " NaN code in group " + std::to_string(group));
    }
  }
}

}  // namespace
}  // namespace gnmr
