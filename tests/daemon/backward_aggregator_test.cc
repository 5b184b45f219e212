// StepAggregator and the backward columns (docs/statistics.md, "Backward
// columns"): checked before anything is kept, combined like the forward
// columns (replicas' sums averaged, counts summed, shards added, the
// earliest order), and absent for a unit one of whose shards sent none.
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/aggregator/step_aggregator.h"

namespace gnmr {
namespace {

using Clock = StepAggregator::Clock;

// Units "a" (sharded 2 ways: rank r holds shard r) and "b" (replicated),
// each rank's report with the given backward rows (sumsq, saturated,
// zeros, numel, order) for a and b.
struct Row {
  double sumsq;
  uint64_t saturated, zeros, numel;
  uint32_t order;
};
v1::StepStats Report(int64_t step, const std::vector<Row>& rows) {
  v1::StepStats s;
  s.set_step(step);
  for (uint32_t id : {0u, 1u}) {
    s.add_unit_id(id);
    s.add_sumsq(1.0);
  }
  for (const Row& r : rows) {
    s.add_bwd_sumsq(r.sumsq);
    s.add_bwd_saturated(r.saturated);
    s.add_bwd_zeros(r.zeros);
    s.add_bwd_numel(r.numel);
    s.add_bwd_order(r.order);
  }
  return s;
}

struct BackwardColumns : ::testing::Test {
  void SetUp() override {
    std::vector<uint32_t> ids;
    std::vector<std::string> added;
    for (uint32_t r = 0; r < 2; ++r) {
      ASSERT_TRUE(topo.RegisterRank(r, {{"a", 100, r, 2}, {"b", 50, 0, 1}}, &ids, &added).ok());
    }
  }
  void Add(StepAggregator& agg, uint32_t rank, const v1::StepStats& s) {
    StepAggregator::Outcome o;
    const Status st = agg.Add(rank, s, t0, &o);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  JobTopology topo;
  Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);
};

TEST_F(BackwardColumns, CombineAsTheForwardColumns) {
  StepAggregator agg(&topo, {});
  Add(agg, 0, Report(0, {{4.0, 1, 10, 100, 2}, {8.0, 2, 5, 50, 1}}));
  Add(agg, 1, Report(0, {{9.0, 3, 20, 100, 1}, {2.0, 0, 5, 50, 2}}));
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0, &c));
  ASSERT_EQ(c.samples.size(), 2u);
  const UnitSample& a = c.samples[0];  // shards: added
  EXPECT_EQ(a.bwd_sumsq, 13.0);
  EXPECT_EQ(a.bwd_saturated, 4u);
  EXPECT_EQ(a.bwd_zeros, 30u);
  EXPECT_EQ(a.bwd_numel, 200u);
  EXPECT_EQ(a.bwd_order, BackwardOrderKey(0, 1));
  const UnitSample& b = c.samples[1];  // replicas: sums averaged, counts summed
  EXPECT_EQ(b.bwd_sumsq, 5.0);
  EXPECT_EQ(b.bwd_saturated, 2u);
  EXPECT_EQ(b.bwd_zeros, 10u);
  EXPECT_EQ(b.bwd_numel, 100u);
  EXPECT_EQ(b.bwd_order, BackwardOrderKey(0, 1));
  EXPECT_TRUE(BackwardCountsFit(a) && BackwardCountsFit(b));
}

TEST_F(BackwardColumns, AShardWithoutThemLeavesTheUnitWithout) {
  StepAggregator agg(&topo, {});
  Add(agg, 0, Report(0, {{4.0, 1, 10, 100, 2}, {8.0, 2, 5, 50, 1}}));
  Add(agg, 1, Report(0, {}));  // an older client, or no backward tensors
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0, &c));
  EXPECT_EQ(c.samples[0].bwd_numel, 0u);  // a's shard 1 sent none
  EXPECT_EQ(c.samples[0].bwd_sumsq, 0.0);
  EXPECT_EQ(c.samples[0].bwd_order, 0u);
  EXPECT_EQ(c.samples[1].bwd_numel, 50u);  // b: rank 0's replica alone
  EXPECT_EQ(c.samples[1].bwd_sumsq, 8.0);
}

TEST_F(BackwardColumns, InconsistentColumnsAreRefusedAndChangeNothing) {
  StepAggregator agg(&topo, {});
  v1::StepStats short_column = Report(0, {{4.0, 1, 10, 100, 2}, {8.0, 2, 5, 50, 1}});
  short_column.mutable_bwd_zeros()->RemoveLast();
  v1::StepStats short_order = Report(0, {{4.0, 1, 10, 100, 2}, {8.0, 2, 5, 50, 1}});
  short_order.mutable_bwd_order()->RemoveLast();
  const double inf = std::numeric_limits<double>::infinity();
  for (const auto& [bad, why] : std::vector<std::pair<v1::StepStats, std::string>>{
           {short_column, "backward columns must all be empty"},
           {short_order, "bwd_order must be empty"},
           {Report(0, {{-1.0, 0, 0, 100, 1}, {1.0, 0, 0, 50, 2}}), "backward statistics are"},
           {Report(0, {{1.0, 101, 0, 100, 1}, {1.0, 0, 0, 50, 2}}), "backward statistics are"},
           {Report(0, {{1.0, 0, 51, 100, 1}, {1.0, 0, 51, 50, 2}}), "backward statistics are"},
           {Report(0, {{1.0, 0, 0, 100, 3}, {1.0, 0, 0, 50, 2}}), "is not a position"},
           {Report(0, {{1.0, 0, 0, 0, 1}, {1.0, 0, 0, 50, 2}}), "is not a position"}}) {
    StepAggregator::Outcome o;
    const Status st = agg.Add(0, bad, t0, &o);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << why;
    EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
  }
  EXPECT_EQ(agg.open_steps(), 0u);
  // A non-finite sum is a signal, as for the gradient: accepted.
  Add(agg, 0, Report(0, {{inf, 0, 0, 100, 1}, {1.0, 0, 0, 50, 2}}));
  EXPECT_EQ(agg.open_steps(), 1u);
}

}  // namespace
}  // namespace gnmr
