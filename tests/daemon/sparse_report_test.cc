// StepAggregator with sparse reports (docs/statistics.md): omitted units are
// inactive (no sample, never incomplete), a dense report keeps today's
// meaning, and the sparse form is validated as untrusted input.
#include <gtest/gtest.h>

#include "daemon/aggregator/step_aggregator.h"

namespace gnmr {
namespace {

using Clock = StepAggregator::Clock;

// A sparse report: every column filled, as the client sends it.
v1::StepStats Sparse(int64_t step, std::vector<uint32_t> ids, std::vector<double> sumsq) {
  v1::StepStats s;
  s.set_step(step);
  s.set_sparse(true);
  for (uint32_t id : ids) s.add_unit_id(id);
  for (double v : sumsq) {
    s.add_sumsq(v);
    s.add_amax(1.0);
    s.add_nonfinite(0);
    s.add_zeros(0);
  }
  return s;
}

v1::StepStats Dense(int64_t step, std::vector<uint32_t> ids, std::vector<double> sumsq) {
  v1::StepStats s = Sparse(step, std::move(ids), std::move(sumsq));
  s.set_sparse(false);
  return s;
}

// Two ranks, four units: "e0".."e2" replicated (experts), "w" sharded 2
// ways (rank r holds shard r).
struct SparseReports : ::testing::Test {
  void SetUp() override {
    std::vector<uint32_t> ids;
    std::vector<std::string> added;
    for (uint32_t r = 0; r < 2; ++r) {
      ASSERT_TRUE(topo.RegisterRank(
                          r, {{"e0", 10, 0, 1}, {"e1", 10, 0, 1}, {"e2", 10, 0, 1}, {"w", 8, r, 2}},
                          &ids, &added)
                      .ok());
    }
  }
  Status Add(StepAggregator& agg, uint32_t rank, const v1::StepStats& s) {
    StepAggregator::Outcome o;
    return agg.Add(rank, s, t0, &o);
  }
  JobTopology topo;
  Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);
};

TEST_F(SparseReports, OmittedUnitsAreInactiveNotIncomplete) {
  StepAggregator agg(&topo, {});
  ASSERT_TRUE(Add(agg, 0, Sparse(0, {1}, {4.0})).ok());
  ASSERT_TRUE(Add(agg, 1, Sparse(0, {1}, {6.0})).ok());
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0, &c));
  EXPECT_FALSE(c.by_deadline);
  ASSERT_EQ(c.samples.size(), 1u);  // only the listed unit reaches the controller
  EXPECT_EQ(c.samples[0].unit_id, 1u);
  EXPECT_EQ(c.samples[0].sumsq, 5.0);  // replicas averaged
  EXPECT_EQ(c.incomplete_units, 0u);
  EXPECT_EQ(c.omitted_units, 3u);
}

TEST_F(SparseReports, AllUnitsOmittedIsAnEmptyCompleteStep) {
  StepAggregator agg(&topo, {});
  ASSERT_TRUE(Add(agg, 0, Sparse(3, {}, {})).ok());
  ASSERT_TRUE(Add(agg, 1, Sparse(3, {}, {})).ok());
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0, &c));
  EXPECT_EQ(c.step, 3);
  EXPECT_TRUE(c.samples.empty());
  EXPECT_EQ(c.incomplete_units, 0u);
  EXPECT_EQ(c.omitted_units, 4u);
}

TEST_F(SparseReports, AShardOmittedByItsRankCountsAsNothing) {
  StepAggregator agg(&topo, {});
  ASSERT_TRUE(Add(agg, 0, Sparse(0, {3}, {2.0})).ok());  // shard 0 of "w"
  ASSERT_TRUE(Add(agg, 1, Sparse(0, {}, {})).ok());      // shard 1: nothing
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0, &c));
  ASSERT_EQ(c.samples.size(), 1u);
  EXPECT_EQ(c.samples[0].unit_id, 3u);
  EXPECT_EQ(c.samples[0].sumsq, 2.0);
  EXPECT_EQ(c.samples[0].numel, 16u);
  EXPECT_EQ(c.incomplete_units, 0u);
}

TEST_F(SparseReports, AReplicaThatOmitsAUnitDoesNotHalveIt) {
  StepAggregator agg(&topo, {});
  ASSERT_TRUE(Add(agg, 0, Sparse(0, {0}, {8.0})).ok());
  ASSERT_TRUE(Add(agg, 1, Sparse(0, {}, {})).ok());
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0, &c));
  ASSERT_EQ(c.samples.size(), 1u);
  EXPECT_EQ(c.samples[0].sumsq, 8.0);  // averaged over the replicas that listed it
}

TEST_F(SparseReports, DenseReportKeepsItsMeaningNextToASparseOne) {
  StepAggregator agg(&topo, {});
  // Rank 0 dense, listing only e0: its other units are not reported.
  ASSERT_TRUE(Add(agg, 0, Dense(0, {0}, {1.0})).ok());
  ASSERT_TRUE(Add(agg, 1, Sparse(0, {}, {})).ok());
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0, &c));
  // e0 listed; e1, e2 covered by rank 1's sparse report (replicas): inactive;
  // "w" shard 0 is held only by rank 0, whose dense report left it out.
  ASSERT_EQ(c.samples.size(), 1u);
  EXPECT_EQ(c.samples[0].unit_id, 0u);
  EXPECT_EQ(c.incomplete_units, 1u);
  EXPECT_EQ(c.omitted_units, 2u);
}

TEST_F(SparseReports, DeadlineWithoutARankCountsItsShardsIncomplete) {
  StepAggregator agg(&topo, {std::chrono::seconds(2), 64});
  ASSERT_TRUE(Add(agg, 0, Sparse(0, {0}, {1.0})).ok());
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0 + std::chrono::seconds(2), &c));
  EXPECT_TRUE(c.by_deadline);
  ASSERT_EQ(c.samples.size(), 1u);
  // e1, e2: rank 0's replica covers them (inactive); "w" lacks shard 1.
  EXPECT_EQ(c.incomplete_units, 1u);
  EXPECT_EQ(c.omitted_units, 2u);
}

TEST_F(SparseReports, ConsecutiveStepsStartFromZero) {
  // acc_ is reset only where a step touched it: a second step must not see
  // the first one's sums.
  StepAggregator agg(&topo, {});
  StepAggregator::ClosedStep c;
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(Add(agg, 0, Sparse(step, {2, 3}, {1.0, 3.0})).ok());
    ASSERT_TRUE(Add(agg, 1, Sparse(step, {2}, {1.0})).ok());
    ASSERT_TRUE(agg.PopReady(t0, &c));
    ASSERT_EQ(c.samples.size(), 2u);
    EXPECT_EQ(c.samples[0].sumsq, 1.0);
    EXPECT_EQ(c.samples[1].sumsq, 3.0);
  }
}

TEST_F(SparseReports, InvalidSparseReportsArePreciseAndChangeNothing) {
  StepAggregator agg(&topo, {});
  struct Case {
    v1::StepStats stats;
    StatusCode code;
    std::string message;
  };
  v1::StepStats short_column = Sparse(0, {0, 1}, {1.0, 1.0});
  short_column.mutable_zeros()->RemoveLast();
  v1::StepStats no_optional = Sparse(0, {0}, {1.0});
  no_optional.clear_amax();
  const std::vector<Case> cases = {
      {short_column, StatusCode::kInvalidArgument,
       "sparse report: every column must have unit_id's length 2: sumsq 2, amax 2, nonfinite 2, "
       "zeros 1"},
      {no_optional, StatusCode::kInvalidArgument,
       "sparse report: every column must have unit_id's length 1: sumsq 1, amax 0, nonfinite 1, "
       "zeros 1"},
      {Sparse(0, {0, 4}, {1.0, 1.0}), StatusCode::kInvalidArgument,
       "sparse report: unit_id[1] = 4 is out of range (the job has 4 units)"},
      {Sparse(0, {2, 1}, {1.0, 1.0}), StatusCode::kInvalidArgument,
       "sparse report: unit_id[1] = 1 is below unit_id[0] = 2 (ids must strictly increase)"},
      {Sparse(0, {1, 1}, {1.0, 1.0}), StatusCode::kInvalidArgument,
       "sparse report: unit_id[1] = 1 repeats unit_id[0] = 1 (ids must strictly increase)"},
      {Sparse(0, {0}, {-1.0}), StatusCode::kInvalidArgument, "unit id 0 has negative sumsq"},
  };
  for (const Case& k : cases) {
    Status s = Add(agg, 0, k.stats);
    EXPECT_EQ(s.code(), k.code) << s.ToString();
    EXPECT_EQ(s.message().rfind(k.message, 0), 0u) << s.message();
  }
  EXPECT_EQ(agg.open_steps(), 0u);
  EXPECT_EQ(agg.last_step_of_rank(0), -1);
  ASSERT_TRUE(Add(agg, 0, Sparse(0, {0}, {1.0})).ok());  // step 0 still free
}

TEST_F(SparseReports, AUnitTheRankDidNotRegisterIsNotFound) {
  JobTopology partial;
  std::vector<uint32_t> ids;
  std::vector<std::string> added;
  ASSERT_TRUE(partial.RegisterRank(0, {{"x", 1, 0, 1}, {"y", 1, 0, 1}}, &ids, &added).ok());
  ASSERT_TRUE(partial.RegisterRank(1, {{"y", 1, 0, 1}}, &ids, &added).ok());
  StepAggregator agg(&partial, {});
  StepAggregator::Outcome o;
  Status s = agg.Add(1, Sparse(0, {0}, {1.0}), t0, &o);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_EQ(s.message(), "unit id 0 is not registered by rank 1");
}

TEST_F(SparseReports, EveryRankMustReachTheStepWhateverTheOrder) {
  // The completeness cursor: ranks report in rank order, then in reverse.
  JobTopology many;
  std::vector<uint32_t> ids;
  std::vector<std::string> added;
  for (uint32_t r = 0; r < 16; ++r) {
    ASSERT_TRUE(many.RegisterRank(r, {{"u", 1, 0, 1}}, &ids, &added).ok());
  }
  StepAggregator agg(&many, {});
  StepAggregator::Outcome o;
  StepAggregator::ClosedStep c;
  for (int64_t step = 0; step < 2; ++step) {
    for (uint32_t k = 0; k < 16; ++k) {
      const uint32_t r = step == 0 ? k : 15 - k;
      EXPECT_FALSE(agg.PopReady(t0, &c)) << "step " << step << " before rank " << r;
      ASSERT_TRUE(agg.Add(r, Sparse(step, {0}, {1.0}), t0, &o).ok());
    }
    ASSERT_TRUE(agg.PopReady(t0, &c));
    EXPECT_EQ(c.step, step);
    EXPECT_EQ(c.ranks_reported, 16u);
    EXPECT_FALSE(c.by_deadline);
  }
}

}  // namespace
}  // namespace gnmr
