// BackwardAccumulator (client/src/backward_stats.h): the backward
// statistics a rank gathers between two Observe calls, and their columns
// on the wire (docs/statistics.md, "Backward columns").
#include "client/src/backward_stats.h"

#include <gtest/gtest.h>

#include "client/src/report_wire.h"

namespace gnmr {
namespace {

UnitStats Gradient(double sumsq, uint64_t saturated, uint64_t zeros, uint64_t numel) {
  UnitStats s;
  s.sumsq = sumsq;
  s.saturated = saturated;
  s.zeros = zeros;
  s.numel = numel;
  return s;
}

// Calls add up; the order is of first calls (backward's order); a
// recycled slot carries nothing of an earlier step.
TEST(BackwardAccumulator, CallsAddUpInFirstCallOrderAndSlotsComeBackClean) {
  BackwardAccumulator acc;
  acc.Resize(3);
  Report r;
  acc.MoveInto(&r);
  EXPECT_EQ(r.bwd_units, 0u);  // nothing observed: no columns
  EXPECT_TRUE(r.bwd_numel.empty());
  acc.Add(2, Gradient(2.0, 1, 4, 10));
  acc.Add(0, Gradient(5.0, 0, 1, 8));
  acc.Add(2, Gradient(3.0, 2, 0, 6));  // micro-batch 2 of unit 2
  acc.Add(1, UnitStats{});             // numel 0: no row
  acc.MoveInto(&r);
  EXPECT_EQ(r.bwd_units, 2u);
  EXPECT_EQ(r.bwd_sumsq, (std::vector<double>{5.0, 0.0, 5.0}));
  EXPECT_EQ(r.bwd_saturated, (std::vector<uint64_t>{0, 0, 3}));
  EXPECT_EQ(r.bwd_zeros, (std::vector<uint64_t>{1, 0, 4}));
  EXPECT_EQ(r.bwd_numel, (std::vector<uint64_t>{8, 0, 16}));
  EXPECT_EQ(r.bwd_order, (std::vector<uint32_t>{2, 0, 1}));

  acc.Add(1, Gradient(1.0, 0, 0, 4));  // the slot again, another unit
  acc.MoveInto(&r);
  EXPECT_EQ(r.bwd_units, 1u);
  EXPECT_EQ(r.bwd_numel, (std::vector<uint64_t>{0, 4, 0}));
  EXPECT_EQ(r.bwd_order, (std::vector<uint32_t>{0, 1, 0}));
  acc.MoveInto(&r);  // and again, with nothing
  EXPECT_EQ(r.bwd_units, 0u);
  EXPECT_EQ(r.bwd_numel, (std::vector<uint64_t>{0, 0, 0}));
}

// The wire form carries the four columns and bwd_order only when some unit
// had backward statistics, dense or sparse; fwd_stage travels with them.
TEST(BackwardAccumulator, TheWireCarriesTheColumnsOnlyWithStatistics) {
  BackwardAccumulator acc;
  acc.Resize(2);
  Report r;
  r.sumsq = {1.0, 1.0};
  r.amax = {0.0, 0.0};
  r.nonfinite = {0, 0};
  r.zeros = {0, 0};
  r.inactive = {0, 0};
  acc.Add(1, Gradient(9.0, 1, 2, 64));
  acc.MoveInto(&r);
  v1::StepStats wire;
  ReportToStepStats(r, {10, 11}, {0, 1}, /*pipeline_stage=*/3, &wire);
  ASSERT_EQ(wire.bwd_numel_size(), 2);
  EXPECT_EQ(wire.bwd_sumsq(1), 9.0);
  EXPECT_EQ(wire.bwd_saturated(1), 1u);
  EXPECT_EQ(wire.bwd_zeros(1), 2u);
  EXPECT_EQ(wire.bwd_numel(1), 64u);
  EXPECT_EQ(wire.bwd_numel(0), 0u);
  EXPECT_EQ(wire.bwd_order(1), 1u);
  EXPECT_EQ(wire.fwd_stage(), 3u);
  EXPECT_EQ(wire.fwd_numel_size(), 0);  // no forward statistics: no forward columns

  r.inactive = {1, 0};  // the sparse form: unit 1's row only
  r.inactive_count = 1;
  ReportToStepStats(r, {10, 11}, {0, 1}, 3, &wire);
  ASSERT_EQ(wire.bwd_numel_size(), 1);
  EXPECT_EQ(wire.bwd_numel(0), 64u);
  EXPECT_EQ(wire.bwd_order(0), 1u);
  r.inactive = {0, 0};
  r.inactive_count = 0;

  acc.MoveInto(&r);  // the next step: none
  ReportToStepStats(r, {10, 11}, {0, 1}, 3, &wire);
  EXPECT_EQ(wire.bwd_numel_size(), 0);
  EXPECT_EQ(wire.bwd_order_size(), 0);
  EXPECT_EQ(wire.fwd_stage(), 0u);
}

}  // namespace
}  // namespace gnmr
