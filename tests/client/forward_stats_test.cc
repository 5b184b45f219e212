// ForwardAccumulator (client/src/forward_stats.h): the forward statistics a
// rank gathers between two Observe calls.
#include "client/src/forward_stats.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace gnmr
