// ForwardAccumulator (client/src/forward_stats.h): the forward statistics a
// rank gathers between two Observe calls.
#include "client/src/forward_stats.h"

#include <gtest/gtest.h>

#include "client/src/report_wire.h"

namespace gnmr {
namespace {

// ForwardAccumulator: calls add up as one tensor set; a recycled report
// slot carries nothing of an earlier step.
TEST(ForwardAccumulator, CallsAddUpAndSlotsComeBackClean) {
  ForwardAccumulator acc;
  acc.Resize(3);
  Report r;
  acc.MoveInto(&r);
  EXPECT_EQ(r.fwd_units, 0u);  // nothing observed: no columns
  UnitStats a;
  a.sumsq = 2.0;
  a.amax = 3.0;
  a.saturated = 1;
  a.zeros = 4;
  a.numel = 10;
  UnitStats b = a;
  b.amax = 5.0;
  b.numel = 6;
  acc.Add(2, a);
  acc.Add(2, b);
  acc.Add(0, UnitStats{});  // numel 0: no row
  EXPECT_FALSE(acc.empty());
  acc.MoveInto(&r);
  EXPECT_TRUE(acc.empty());
  ASSERT_EQ(r.fwd_numel.size(), 3u);
  EXPECT_EQ(r.fwd_units, 1u);
  EXPECT_EQ(r.fwd_sumsq[2], 4.0);
  EXPECT_EQ(r.fwd_amax[2], 5.0);
  EXPECT_EQ(r.fwd_saturated[2], 2u);
  EXPECT_EQ(r.fwd_zeros[2], 8u);
  EXPECT_EQ(r.fwd_numel[2], 16u);
  EXPECT_EQ(r.fwd_numel[0], 0u);
  // The slot again, one step later: unit 1 only.
  acc.Add(1, a);
  acc.MoveInto(&r);
  EXPECT_EQ(r.fwd_units, 1u);
  EXPECT_EQ(r.fwd_numel[2], 0u);
  EXPECT_EQ(r.fwd_sumsq[2], 0.0);
  EXPECT_EQ(r.fwd_numel[1], 10u);
  acc.MoveInto(&r);  // and empty
  EXPECT_EQ(r.fwd_units, 0u);
}

// fwd_order: each unit's position among the step's forward units, by its
// first call; a merge (the device path's rows, after the host's) goes on
// counting, and a recycled slot starts again from 1.
TEST(ForwardAccumulator, OrderIsTheFirstCallsPosition) {
  ForwardAccumulator acc;
  acc.Resize(4);
  UnitStats a;
  a.sumsq = 1.0;
  a.numel = 10;
  Report r;
  acc.Add(3, a);
  acc.Add(1, a);
  acc.Add(3, a);  // a second call keeps the first position
  acc.MoveInto(&r);
  ASSERT_EQ(r.fwd_order.size(), 4u);
  EXPECT_EQ(r.fwd_order[3], 1u);
  EXPECT_EQ(r.fwd_order[1], 2u);
  EXPECT_EQ(r.fwd_order[0], 0u);
  EXPECT_EQ(r.fwd_order[2], 0u);
  ForwardAccumulator device;
  device.Resize(4);
  device.Add(2, a);
  device.Add(1, a);  // already listed by the host rows
  device.MergeInto(&r);
  EXPECT_EQ(r.fwd_order[2], 3u);
  EXPECT_EQ(r.fwd_order[1], 2u);
  EXPECT_EQ(r.fwd_units, 3u);
  acc.Add(0, a);
  acc.MoveInto(&r);  // the slot again
  EXPECT_EQ(r.fwd_order[0], 1u);
  EXPECT_EQ(r.fwd_order[1], 0u);
  EXPECT_EQ(r.fwd_order[2], 0u);
  EXPECT_EQ(r.fwd_order[3], 0u);
}

// The gradient columns of a two-unit report, both units active: what
// ReportToStepStats needs besides the forward rows under test.
void GiveGradientColumns(Report* r) {
  r->sumsq = {1.0, 1.0};
  r->amax = {0.0, 0.0};
  r->nonfinite = {0, 0};
  r->zeros = {0, 0};
  r->inactive = {0, 0};
}

// Block-scaled calls fill the row as plain ones do and add their block
// figures; the wire form carries the four block columns only when some unit
// had them, and a recycled slot drops them.
TEST(ForwardAccumulator, BlockFiguresRideInTheirOwnColumns) {
  ForwardAccumulator acc;
  acc.Resize(2);
  BlockStats b;
  b.numel = 64;
  b.sumsq = 9.0;
  b.amax = 448.0;
  b.saturated = 3;
  b.zero_codes = 5;
  b.blocks = 2;
  b.saturated_blocks = 1;
  b.dead_blocks = 1;
  b.scale_clamps = 2;
  acc.AddBlocks(1, b, 0);
  acc.AddBlocks(1, b, 0);
  UnitStats plain;
  plain.sumsq = 1.0;
  plain.numel = 10;
  acc.Add(0, plain);
  Report r;
  acc.MoveInto(&r);
  EXPECT_EQ(r.fwd_units, 2u);
  EXPECT_EQ(r.fwd_block_units, 1u);
  EXPECT_EQ(r.fwd_sumsq[1], 18.0);
  EXPECT_EQ(r.fwd_amax[1], 448.0);
  EXPECT_EQ(r.fwd_saturated[1], 6u);
  EXPECT_EQ(r.fwd_zeros[1], 10u);
  EXPECT_EQ(r.fwd_numel[1], 128u);
  EXPECT_EQ(r.fwd_blocks, (std::vector<uint64_t>{0, 4}));
  EXPECT_EQ(r.fwd_saturated_blocks, (std::vector<uint64_t>{0, 2}));
  EXPECT_EQ(r.fwd_dead_blocks, (std::vector<uint64_t>{0, 2}));
  EXPECT_EQ(r.fwd_scale_clamps, (std::vector<uint64_t>{0, 4}));

  GiveGradientColumns(&r);
  v1::StepStats wire;
  ReportToStepStats(r, {10, 11}, {0, 1}, 0, &wire);
  ASSERT_EQ(wire.fwd_blocks_size(), 2);
  EXPECT_EQ(wire.fwd_blocks(1), 4u);
  EXPECT_EQ(wire.fwd_saturated_blocks(1), 2u);
  EXPECT_EQ(wire.fwd_dead_blocks(1), 2u);
  EXPECT_EQ(wire.fwd_scale_clamps(1), 4u);
  r.inactive = {1, 0};  // the sparse form: unit 1's row only
  r.inactive_count = 1;
  ReportToStepStats(r, {10, 11}, {0, 1}, 0, &wire);
  ASSERT_EQ(wire.fwd_blocks_size(), 1);
  EXPECT_EQ(wire.fwd_blocks(0), 4u);
  r.inactive = {0, 0};
  r.inactive_count = 0;

  acc.Add(1, plain);  // the slot again: no block-scaled call
  acc.MoveInto(&r);
  EXPECT_EQ(r.fwd_block_units, 0u);
  EXPECT_EQ(r.fwd_blocks[1], 0u);
  ReportToStepStats(r, {10, 11}, {0, 1}, 0, &wire);
  EXPECT_EQ(wire.fwd_blocks_size(), 0);  // an older daemon's form
  EXPECT_EQ(wire.fwd_numel_size(), 2);
  EXPECT_EQ(wire.fwd_source_numel_size(), 0);  // no source was given
}

// Source figures (docs/statistics.md, "Source columns") add up over calls
// like the counts, only for the calls that came with a source, and ride in
// their own four columns; a slot without them sends none.
TEST(ForwardAccumulator, SourceFiguresRideInTheirOwnColumns) {
  ForwardAccumulator acc;
  acc.Resize(2);
  BlockStats b;
  b.numel = 64;
  b.sumsq = 9.0;
  b.blocks = 2;
  b.has_source = true;
  b.underflow = 3;
  b.error_sumsq = 0.5;
  b.source_sumsq = 10.0;
  acc.AddBlocks(0, b, 64);
  acc.AddBlocks(0, b, 32);  // a call whose second tensor had no source
  BlockStats without = b;
  without.has_source = false;
  acc.AddBlocks(1, without, 0);
  Report r;
  acc.MoveInto(&r);
  EXPECT_EQ(r.fwd_source_units, 1u);
  EXPECT_EQ(r.fwd_source_numel, (std::vector<uint64_t>{96, 0}));
  EXPECT_EQ(r.fwd_underflow, (std::vector<uint64_t>{6, 0}));
  EXPECT_EQ(r.fwd_error_sumsq, (std::vector<double>{1.0, 0.0}));
  EXPECT_EQ(r.fwd_source_sumsq, (std::vector<double>{20.0, 0.0}));

  GiveGradientColumns(&r);
  v1::StepStats wire;
  ReportToStepStats(r, {10, 11}, {0, 1}, 0, &wire);
  ASSERT_EQ(wire.fwd_source_numel_size(), 2);
  EXPECT_EQ(wire.fwd_source_numel(0), 96u);
  EXPECT_EQ(wire.fwd_underflow(0), 6u);
  EXPECT_EQ(wire.fwd_error_sumsq(0), 1.0);
  EXPECT_EQ(wire.fwd_source_sumsq(0), 20.0);
  r.inactive = {0, 1};  // the sparse form: unit 0's row only
  r.inactive_count = 1;
  ReportToStepStats(r, {10, 11}, {0, 1}, 0, &wire);
  ASSERT_EQ(wire.fwd_source_numel_size(), 1);
  EXPECT_EQ(wire.fwd_error_sumsq(0), 1.0);
  r.inactive = {0, 0};
  r.inactive_count = 0;

  acc.AddBlocks(0, without, 0);  // the slot again: no source
  acc.MoveInto(&r);
  EXPECT_EQ(r.fwd_source_units, 0u);
  EXPECT_EQ(r.fwd_source_numel[0], 0u);
  ReportToStepStats(r, {10, 11}, {0, 1}, 0, &wire);
  EXPECT_EQ(wire.fwd_source_numel_size(), 0);
  EXPECT_EQ(wire.fwd_blocks_size(), 2);
}

}  // namespace
}  // namespace gnmr
