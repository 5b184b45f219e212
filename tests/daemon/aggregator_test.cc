// StepAggregator: completion, deadline, late reports, shard/replica
// combination, ordering independence and validation.
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/aggregator/step_aggregator.h"

namespace gnmr {
namespace {

using Clock = StepAggregator::Clock;

v1::StepStats Stats(int64_t step, std::vector<uint32_t> ids, std::vector<double> sumsq) {
  v1::StepStats s;
  s.set_step(step);
  for (uint32_t id : ids) s.add_unit_id(id);
  for (double v : sumsq) s.add_sumsq(v);
  return s;
}

// Two ranks: "a" sharded 2 ways (rank r holds shard r); "b" replicated.
struct TwoRanks : ::testing::Test {
  void SetUp() override {
    std::vector<uint32_t> ids;
    std::vector<std::string> added;
    for (uint32_t r = 0; r < 2; ++r) {
      ASSERT_TRUE(topo.RegisterRank(r, {{"a", 100, r, 2}, {"b", 50, 0, 1}}, &ids, &added).ok());
    }
    ASSERT_EQ(added.size(), 2u);
  }
  StepAggregator::Outcome Add(StepAggregator& agg, uint32_t rank, const v1::StepStats& s,
                              Clock::time_point t) {
    StepAggregator::Outcome o;
    Status st = agg.Add(rank, s, t, &o);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return o;
  }
  JobTopology topo;
  Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);
};

TEST_F(TwoRanks, CompleteStepCombinesShardsAndReplicas) {
  StepAggregator agg(&topo, {});
  Add(agg, 0, Stats(0, {0, 1}, {4.0, 9.0}), t0);
  StepAggregator::ClosedStep c;
  EXPECT_FALSE(agg.PopReady(t0, &c));  // rank 1 missing
  Add(agg, 1, Stats(0, {0, 1}, {5.0, 11.0}), t0);
  ASSERT_TRUE(agg.PopReady(t0, &c));
  EXPECT_FALSE(c.by_deadline);
  ASSERT_EQ(c.samples.size(), 2u);
  EXPECT_EQ(c.samples[0].sumsq, 9.0);  // shards summed: 4 + 5
  EXPECT_EQ(c.samples[0].numel, 200u);
  EXPECT_EQ(c.samples[1].sumsq, 10.0);  // replicas averaged: (9 + 11) / 2
  EXPECT_EQ(c.samples[1].numel, 50u);
  EXPECT_EQ(c.incomplete_units, 0u);
}

TEST_F(TwoRanks, DeadlineClosesWithIncompleteUnits) {
  StepAggregator agg(&topo, {std::chrono::seconds(2), 64});
  Add(agg, 0, Stats(0, {0, 1}, {4.0, 9.0}), t0);
  StepAggregator::ClosedStep c;
  EXPECT_FALSE(agg.PopReady(t0 + std::chrono::milliseconds(1999), &c));
  ASSERT_TRUE(agg.NextDeadline().has_value());
  EXPECT_EQ(*agg.NextDeadline(), t0 + std::chrono::seconds(2));
  ASSERT_TRUE(agg.PopReady(t0 + std::chrono::seconds(2), &c));
  EXPECT_TRUE(c.by_deadline);
  ASSERT_EQ(c.samples.size(), 1u);  // "a" lacks shard 1; "b" has a replica
  EXPECT_EQ(c.samples[0].unit_id, 1u);
  EXPECT_EQ(c.samples[0].sumsq, 9.0);
  EXPECT_EQ(c.incomplete_units, 1u);
  // Rank 1's report for step 0 now is late.
  EXPECT_EQ(Add(agg, 1, Stats(0, {0, 1}, {5.0, 11.0}), t0), StepAggregator::Outcome::kLate);
  EXPECT_FALSE(agg.PopReady(t0 + std::chrono::seconds(10), &c));
}

TEST_F(TwoRanks, SkippedStepCountsAsPassed) {
  StepAggregator agg(&topo, {});
  Add(agg, 0, Stats(5, {0, 1}, {1, 1}), t0);
  Add(agg, 1, Stats(7, {0, 1}, {1, 1}), t0);  // rank 1 skipped step 5
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0, &c));
  EXPECT_EQ(c.step, 5);
  EXPECT_EQ(c.ranks_reported, 1u);
  EXPECT_EQ(c.incomplete_units, 1u);
  EXPECT_FALSE(agg.PopReady(t0, &c));  // step 7 waits for rank 0
}

TEST_F(TwoRanks, ArrivalOrderDoesNotChangeTheResult) {
  const double x = 0.1, y = 0.7;  // sums that round differently by order
  StepAggregator a(&topo, {}), b(&topo, {});
  Add(a, 0, Stats(0, {1}, {x}), t0);
  Add(a, 1, Stats(0, {1}, {y}), t0);
  Add(b, 1, Stats(0, {1}, {y}), t0);
  Add(b, 0, Stats(0, {1}, {x}), t0);
  StepAggregator::ClosedStep ca, cb;
  ASSERT_TRUE(a.PopReady(t0, &ca));
  ASSERT_TRUE(b.PopReady(t0, &cb));
  ASSERT_EQ(ca.samples.size(), 1u);
  EXPECT_EQ(std::memcmp(&ca.samples[0].sumsq, &cb.samples[0].sumsq, sizeof(double)), 0);
}

TEST_F(TwoRanks, NonFiniteAndCountsCombine) {
  StepAggregator agg(&topo, {});
  v1::StepStats s0 = Stats(0, {0, 1}, {NAN, 1.0});
  for (double v : {2.0, 3.0}) s0.add_amax(v);
  for (uint64_t v : {4u, 0u}) s0.add_nonfinite(v);
  for (uint64_t v : {1u, 2u}) s0.add_zeros(v);
  v1::StepStats s1 = Stats(0, {0, 1}, {1.0, 1.0});
  for (double v : {5.0, 1.0}) s1.add_amax(v);
  for (uint64_t v : {0u, 0u}) s1.add_nonfinite(v);
  for (uint64_t v : {3u, 4u}) s1.add_zeros(v);
  Add(agg, 0, s0, t0);
  Add(agg, 1, s1, t0);
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0, &c));
  EXPECT_TRUE(std::isnan(c.samples[0].sumsq));
  EXPECT_EQ(c.samples[0].amax, 5.0);
  EXPECT_EQ(c.samples[0].nonfinite, 4u);
  EXPECT_EQ(c.samples[0].zeros, 4u);
  EXPECT_EQ(c.samples[1].zeros, 6u);  // replicas' counts are summed
}

TEST_F(TwoRanks, InvalidReportsChangeNothing) {
  StepAggregator agg(&topo, {});
  StepAggregator::Outcome o;
  v1::StepStats ragged = Stats(0, {0, 1}, {1.0});
  EXPECT_EQ(agg.Add(0, ragged, t0, &o).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(agg.Add(0, Stats(0, {0, 0}, {1, 1}), t0, &o).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(agg.Add(0, Stats(0, {9}, {1}), t0, &o).code(), StatusCode::kNotFound);
  EXPECT_EQ(agg.Add(0, Stats(0, {0}, {-1.0}), t0, &o).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(agg.Add(0, Stats(-3, {0}, {1.0}), t0, &o).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(agg.Add(7, Stats(0, {0}, {1.0}), t0, &o).code(), StatusCode::kNotFound);
  EXPECT_EQ(agg.open_steps(), 0u);
  EXPECT_EQ(agg.last_step_of_rank(0), -1);
  ASSERT_TRUE(agg.Add(0, Stats(3, {0}, {1.0}), t0, &o).ok());
  EXPECT_EQ(agg.Add(0, Stats(3, {0}, {1.0}), t0, &o).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(agg.Add(0, Stats(2, {0}, {1.0}), t0, &o).code(), StatusCode::kInvalidArgument);
  agg.ResetRank(0);  // re-registration: may resume from an earlier step
  EXPECT_TRUE(agg.Add(0, Stats(2, {0}, {1.0}), t0, &o).ok());
}

TEST_F(TwoRanks, TooManyOpenStepsForcesTheOldestClosed) {
  StepAggregator agg(&topo, {std::chrono::hours(1), 3});
  for (int64_t s = 0; s < 4; ++s) Add(agg, 0, Stats(s, {1}, {1.0}), t0);
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0, &c));
  EXPECT_EQ(c.step, 0);
  EXPECT_TRUE(c.by_deadline);
  EXPECT_FALSE(agg.PopReady(t0, &c));
}

// Issue 12 item 8: a silent rank kept up to 64 steps of every other rank's
// reports (~64 x ranks x units x 12 B); the bytes held are bounded too.
TEST_F(TwoRanks, TooManyOpenBytesForcesTheOldestClosed) {
  StepAggregator::Options options;
  options.deadline = std::chrono::hours(1);
  options.max_open_bytes = 50;  // a report of 2 units: 2 x (4 + 8) = 24 B
  StepAggregator agg(&topo, options);
  StepAggregator::ClosedStep c;
  Add(agg, 0, Stats(0, {0, 1}, {1.0, 1.0}), t0);
  Add(agg, 0, Stats(1, {0, 1}, {1.0, 1.0}), t0);
  EXPECT_EQ(agg.open_bytes(), 48u);
  EXPECT_FALSE(agg.PopReady(t0, &c));
  Add(agg, 0, Stats(2, {0, 1}, {1.0, 1.0}), t0);  // 72 B > 50
  ASSERT_TRUE(agg.PopReady(t0, &c));
  EXPECT_EQ(c.step, 0);
  EXPECT_TRUE(c.by_deadline);
  EXPECT_EQ(agg.open_bytes(), 48u);
  EXPECT_FALSE(agg.PopReady(t0, &c));
  // A report replaced (the rank registered again) counts once.
  agg.ResetRank(0);
  Add(agg, 0, Stats(2, {0, 1}, {2.0, 2.0}), t0);
  EXPECT_EQ(agg.open_bytes(), 48u);
  agg.StartOver(-1);
  EXPECT_EQ(agg.open_bytes(), 0u);
}

// A new generation: open steps are dropped, every rank's step history is
// forgotten and the last closed step may go backwards, so resumed steps
// after it are accepted again instead of being late.
TEST_F(TwoRanks, StartOverAcceptsResumedSteps) {
  StepAggregator agg(&topo, {});
  StepAggregator::ClosedStep c;
  for (int64_t s = 0; s < 10; ++s) {
    Add(agg, 0, Stats(s, {1}, {1.0}), t0);
    Add(agg, 1, Stats(s, {1}, {1.0}), t0);
    ASSERT_TRUE(agg.PopReady(t0, &c));
  }
  Add(agg, 0, Stats(10, {1}, {1.0}), t0);  // open, never closed
  EXPECT_EQ(Add(agg, 0, Stats(11, {1}, {1.0}), t0), StepAggregator::Outcome::kAccepted);

  agg.StartOver(4);  // e.g. an imported state whose last step is 4
  EXPECT_EQ(agg.open_steps(), 0u);
  EXPECT_EQ(agg.last_closed(), 4);
  EXPECT_EQ(agg.last_step_of_rank(0), -1);
  EXPECT_EQ(Add(agg, 1, Stats(4, {1}, {1.0}), t0), StepAggregator::Outcome::kLate);
  EXPECT_EQ(Add(agg, 0, Stats(5, {1}, {2.0}), t0), StepAggregator::Outcome::kAccepted);
  EXPECT_EQ(Add(agg, 1, Stats(5, {1}, {4.0}), t0), StepAggregator::Outcome::kAccepted);
  ASSERT_TRUE(agg.PopReady(t0, &c));
  EXPECT_EQ(c.step, 5);
  EXPECT_EQ(c.samples[0].sumsq, 3.0);                          // only the resumed reports
  EXPECT_FALSE(agg.PopReady(t0 + std::chrono::hours(1), &c));  // step 10 is gone

  agg.StartOver(-1);  // a restarted trainer: any step
  EXPECT_EQ(Add(agg, 0, Stats(0, {1}, {1.0}), t0), StepAggregator::Outcome::kAccepted);
}

// Issue 12, item 2: one rank reporting step 2^61 - 1 used to become the
// job's last closed step; every later report of every rank was then late.
TEST_F(TwoRanks, AStepMayNotJumpFarAheadOfTheLastClosedStep) {
  StepAggregator::Options options;
  options.max_step_jump = 1000;
  StepAggregator agg(&topo, options);
  StepAggregator::ClosedStep c;
  // The first report of a timeline may name any step (a trainer resumes
  // anywhere): no anchor yet.
  Add(agg, 0, Stats(5000, {1}, {1.0}), t0);
  StepAggregator::Outcome o;
  Status s = agg.Add(1, Stats(2305843009213693951, {1}, {1.0}), t0, &o);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();  // anchored at open 5000
  EXPECT_NE(s.message().find("max_step_jump (1000)"), std::string::npos) << s.message();
  EXPECT_EQ(agg.last_step_of_rank(1), -1);  // refused: nothing changed
  Add(agg, 1, Stats(5000, {1}, {1.0}), t0);
  ASSERT_TRUE(agg.PopReady(t0, &c));
  EXPECT_EQ(c.step, 5000);
  // Anchored at the last closed step: up to 1000 ahead is fine, beyond not.
  EXPECT_EQ(agg.Add(0, Stats(6001, {1}, {1.0}), t0, &o).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(Add(agg, 0, Stats(6000, {1}, {1.0}), t0), StepAggregator::Outcome::kAccepted);
  EXPECT_EQ(Add(agg, 1, Stats(5001, {1}, {1.0}), t0), StepAggregator::Outcome::kAccepted);
  ASSERT_TRUE(agg.PopReady(t0, &c));
  EXPECT_EQ(c.step, 5001);
  EXPECT_EQ(agg.last_closed(), 5001);
  // A new timeline starts unanchored again.
  agg.StartOver(-1);
  EXPECT_EQ(Add(agg, 0, Stats(9000000, {1}, {1.0}), t0), StepAggregator::Outcome::kAccepted);
}

// Adds forward columns to `s`, one (sumsq, saturated, zeros, numel) per
// listed unit.
void WithForward(v1::StepStats* s, std::vector<std::array<double, 4>> per_unit) {
  for (const auto& [sumsq, saturated, zeros, numel] : per_unit) {
    s->add_fwd_sumsq(sumsq);
    s->add_fwd_amax(std::sqrt(sumsq));
    s->add_fwd_saturated(static_cast<uint64_t>(saturated));
    s->add_fwd_zeros(static_cast<uint64_t>(zeros));
    s->add_fwd_numel(static_cast<uint64_t>(numel));
  }
}

TEST_F(TwoRanks, ForwardStatisticsCombineShardsAndReplicas) {
  StepAggregator agg(&topo, {});
  v1::StepStats r0 = Stats(0, {0, 1}, {4.0, 9.0});
  WithForward(&r0, {{{1.0, 2, 10, 100}}, {{8.0, 1, 0, 50}}});
  v1::StepStats r1 = Stats(0, {0, 1}, {5.0, 11.0});
  WithForward(&r1, {{{3.0, 4, 20, 100}}, {{4.0, 3, 5, 50}}});
  Add(agg, 0, r0, t0);
  Add(agg, 1, r1, t0);
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0, &c));
  ASSERT_EQ(c.samples.size(), 2u);
  // a: two shards, summed.
  EXPECT_EQ(c.samples[0].fwd_sumsq, 4.0);
  EXPECT_EQ(c.samples[0].fwd_saturated, 6u);
  EXPECT_EQ(c.samples[0].fwd_zeros, 30u);
  EXPECT_EQ(c.samples[0].fwd_numel, 200u);
  EXPECT_EQ(c.samples[0].fwd_amax, std::sqrt(3.0));
  // b: two replicas (different batches): sums averaged, counts and sizes
  // summed, so 4 of 100 elements saturated.
  EXPECT_EQ(c.samples[1].fwd_sumsq, 6.0);
  EXPECT_EQ(c.samples[1].fwd_saturated, 4u);
  EXPECT_EQ(c.samples[1].fwd_zeros, 5u);
  EXPECT_EQ(c.samples[1].fwd_numel, 100u);
}

TEST_F(TwoRanks, AUnitHasForwardStatisticsOnlyWhenEveryShardSentThem) {
  StepAggregator agg(&topo, {});
  v1::StepStats r0 = Stats(0, {0, 1}, {4.0, 9.0});
  WithForward(&r0, {{{1.0, 2, 10, 100}}, {{8.0, 1, 0, 50}}});
  Add(agg, 0, r0, t0);
  v1::StepStats r1 = Stats(0, {0, 1}, {5.0, 11.0});
  WithForward(&r1, {{{0.0, 0, 0, 0}}, {{4.0, 3, 5, 50}}});  // a's shard 1: none
  Add(agg, 1, r1, t0);
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0, &c));
  ASSERT_EQ(c.samples.size(), 2u);
  EXPECT_EQ(c.samples[0].fwd_numel, 0u);
  EXPECT_EQ(c.samples[0].fwd_sumsq, 0.0);
  EXPECT_EQ(c.samples[0].sumsq, 9.0);  // the gradient is unaffected
  // b: the replica without forward statistics is left out of them.
  EXPECT_EQ(c.samples[1].fwd_numel, 100u);
}

TEST_F(TwoRanks, ForwardCountsSaturateInsteadOfWrapping) {
  // Absurd but consistent counts from both replicas of b: their sums stay
  // counts of at most numel, as the controller requires.
  StepAggregator agg(&topo, {});
  const uint64_t huge = UINT64_MAX - 1;
  for (uint32_t r = 0; r < 2; ++r) {
    v1::StepStats s = Stats(0, {1}, {1.0});
    s.add_fwd_sumsq(1.0);
    s.add_fwd_amax(1.0);
    s.add_fwd_saturated(huge);
    s.add_fwd_zeros(1);
    s.add_fwd_numel(huge);
    Add(agg, r, s, t0);
  }
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0, &c));
  ASSERT_EQ(c.samples.size(), 1u);
  EXPECT_EQ(c.samples[0].fwd_numel, UINT64_MAX);
  EXPECT_EQ(c.samples[0].fwd_saturated, UINT64_MAX);
  EXPECT_EQ(c.samples[0].fwd_zeros, 2u);
}

TEST_F(TwoRanks, InconsistentForwardColumnsAreRefusedAndChangeNothing) {
  StepAggregator agg(&topo, {});
  StepAggregator::Outcome o;
  v1::StepStats short_column = Stats(0, {0, 1}, {4.0, 9.0});
  WithForward(&short_column, {{{1.0, 2, 10, 100}}});
  Status st = agg.Add(0, short_column, t0, &o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("forward columns"), std::string::npos) << st.message();
  v1::StepStats too_many = Stats(0, {0, 1}, {4.0, 9.0});
  WithForward(&too_many, {{{1.0, 101, 10, 100}}, {{8.0, 1, 0, 50}}});
  EXPECT_EQ(agg.Add(0, too_many, t0, &o).code(), StatusCode::kInvalidArgument);
  v1::StepStats negative = Stats(0, {0, 1}, {4.0, 9.0});
  WithForward(&negative, {{{-1.0, 1, 10, 100}}, {{8.0, 1, 0, 50}}});
  EXPECT_EQ(agg.Add(0, negative, t0, &o).code(), StatusCode::kInvalidArgument);
  // Nothing was taken: the step is still rank 0's to report.
  EXPECT_EQ(Add(agg, 0, Stats(0, {0, 1}, {4.0, 9.0}), t0), StepAggregator::Outcome::kAccepted);
}

// Rank `rank`'s step-0 report of units a and b with forward statistics and
// the forward positions `order_a`, `order_b` (0: none sent).
v1::StepStats OrderedReport(uint32_t rank, uint32_t order_a, uint32_t order_b) {
  v1::StepStats s = rank == 0 ? Stats(0, {0, 1}, {4.0, 9.0}) : Stats(0, {0, 1}, {5.0, 11.0});
  if (rank == 0) {
    WithForward(&s, {{{1.0, 2, 10, 100}}, {{8.0, 1, 0, 50}}});
  } else {
    WithForward(&s, {{{3.0, 4, 20, 100}}, {{4.0, 3, 5, 50}}});
  }
  s.add_fwd_order(order_a);
  s.add_fwd_order(order_b);
  return s;
}

// Block columns (docs/statistics.md, "Block columns"): summed over
// replicas and shards like the forward counts; a report without them (an
// older client, or no block-scaled tensor) adds none.
TEST_F(TwoRanks, BlockColumnsAreSummed) {
  StepAggregator agg(&topo, {});
  v1::StepStats r0 = OrderedReport(0, 1, 2);
  for (const uint64_t v : {10, 5}) r0.add_fwd_blocks(v);
  for (const uint64_t v : {1, 0}) r0.add_fwd_saturated_blocks(v);
  for (const uint64_t v : {0, 5}) r0.add_fwd_dead_blocks(v);
  for (const uint64_t v : {2, 1}) r0.add_fwd_scale_clamps(v);
  v1::StepStats r1 = OrderedReport(1, 1, 2);
  for (const uint64_t v : {10, 0}) r1.add_fwd_blocks(v);  // b's tensors not block-scaled
  for (const uint64_t v : {3, 0}) r1.add_fwd_saturated_blocks(v);
  for (const uint64_t v : {1, 0}) r1.add_fwd_dead_blocks(v);
  for (const uint64_t v : {0, 0}) r1.add_fwd_scale_clamps(v);
  Add(agg, 0, r0, t0);
  Add(agg, 1, r1, t0);
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0, &c));
  ASSERT_EQ(c.samples.size(), 2u);
  EXPECT_EQ(c.samples[0].fwd_blocks, 20u);
  EXPECT_EQ(c.samples[0].fwd_saturated_blocks, 4u);
  EXPECT_EQ(c.samples[0].fwd_dead_blocks, 1u);
  EXPECT_EQ(c.samples[0].fwd_scale_clamps, 2u);
  EXPECT_EQ(c.samples[1].fwd_blocks, 5u);
  EXPECT_EQ(c.samples[1].fwd_dead_blocks, 5u);
  EXPECT_EQ(c.samples[1].fwd_scale_clamps, 1u);

  // The next step, rank 1 without block columns: rank 0's alone.
  r0.set_step(1);
  r1 = OrderedReport(1, 1, 2);
  r1.set_step(1);
  Add(agg, 0, r0, t0);
  Add(agg, 1, r1, t0);
  ASSERT_TRUE(agg.PopReady(t0, &c));
  EXPECT_EQ(c.samples[0].fwd_blocks, 10u);
  EXPECT_EQ(c.samples[0].fwd_saturated_blocks, 1u);
  EXPECT_TRUE(ForwardCountsFit(c.samples[0]));
}

// Source columns (docs/statistics.md, "Source columns"): counts and sums
// added over replicas and shards (only their ratio is read); checked like
// the block columns, and a report without them adds none.
TEST_F(TwoRanks, SourceColumnsAreSummedAndChecked) {
  StepAggregator agg(&topo, {});
  auto with_source = [](v1::StepStats s, std::vector<uint64_t> numel, std::vector<uint64_t> under,
                        std::vector<double> error, std::vector<double> source) {
    for (size_t i = 0; i < numel.size(); ++i) {
      s.add_fwd_source_numel(numel[i]);
      s.add_fwd_underflow(under[i]);
      s.add_fwd_error_sumsq(error[i]);
      s.add_fwd_source_sumsq(source[i]);
    }
    return s;
  };
  const v1::StepStats r0 =
      with_source(OrderedReport(0, 1, 2), {100, 0}, {3, 0}, {0.5, 0.0}, {10.0, 0.0});
  StepAggregator::Outcome o;
  for (const auto& [bad, why] : std::vector<std::pair<v1::StepStats, std::string>>{
           {with_source(OrderedReport(0, 1, 2), {100}, {3}, {0.5}, {10.0}), "source columns"},
           {with_source(OrderedReport(0, 1, 2), {101, 0}, {3, 0}, {0.5, 0}, {10, 0}),
            "source figures are inconsistent"},
           {with_source(OrderedReport(0, 1, 2), {100, 0}, {101, 0}, {0.5, 0}, {10, 0}),
            "source figures are inconsistent"},
           {with_source(OrderedReport(0, 1, 2), {100, 0}, {3, 0}, {-0.5, 0}, {10, 0}),
            "source figures are inconsistent"},
           {with_source(OrderedReport(0, 1, 2), {100, 0}, {3, 0}, {0.5, 0},
                        {std::numeric_limits<double>::infinity(), 0}),
            "source figures are inconsistent"}}) {
    const Status st = agg.Add(0, bad, t0, &o);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << why;
    EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
  }
  Add(agg, 0, r0, t0);
  Add(agg, 1, with_source(OrderedReport(1, 1, 2), {100, 0}, {1, 0}, {0.25, 0.0}, {30.0, 0.0}), t0);
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0, &c));
  ASSERT_EQ(c.samples.size(), 2u);
  EXPECT_EQ(c.samples[0].fwd_source_numel, 200u);
  EXPECT_EQ(c.samples[0].fwd_underflow, 4u);
  EXPECT_EQ(c.samples[0].fwd_error_sumsq, 0.75);
  EXPECT_EQ(c.samples[0].fwd_source_sumsq, 40.0);
  EXPECT_EQ(c.samples[1].fwd_source_numel, 0u);
  EXPECT_TRUE(ForwardCountsFit(c.samples[0]) && SourceSumsValid(c.samples[0]));

  // The next step, rank 1 without source columns: rank 0's alone.
  v1::StepStats next = r0;
  next.set_step(1);
  v1::StepStats plain = OrderedReport(1, 1, 2);
  plain.set_step(1);
  Add(agg, 0, next, t0);
  Add(agg, 1, plain, t0);
  ASSERT_TRUE(agg.PopReady(t0, &c));
  EXPECT_EQ(c.samples[0].fwd_source_numel, 100u);
  EXPECT_EQ(c.samples[0].fwd_error_sumsq, 0.5);
}

// fwd_order (docs/controller.md, "Attribution"): the earliest position over
// replicas and shards; a unit's order is unknown only where no report
// gave one.
TEST_F(TwoRanks, ForwardOrderIsTheEarliestReportedAndChecked) {
  StepAggregator agg(&topo, {});
  const v1::StepStats r0 = OrderedReport(0, 2, 0);  // b: this rank's client sent no order for it
  const v1::StepStats r1 = OrderedReport(1, 1, 2);
  StepAggregator::Outcome o;
  v1::StepStats bad = r1;
  bad.set_fwd_order(0, 3);  // more than the report's 2 units
  Status st = agg.Add(1, bad, t0, &o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("fwd_order"), std::string::npos) << st.message();
  bad = r1;
  bad.add_fwd_order(1);  // longer than the forward columns
  EXPECT_EQ(agg.Add(1, bad, t0, &o).code(), StatusCode::kInvalidArgument);
  v1::StepStats no_forward = Stats(0, {0, 1}, {5.0, 11.0});
  no_forward.add_fwd_order(1);
  no_forward.add_fwd_order(2);  // an order without forward statistics
  EXPECT_EQ(agg.Add(1, no_forward, t0, &o).code(), StatusCode::kInvalidArgument);
  Add(agg, 0, r0, t0);
  Add(agg, 1, r1, t0);
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0, &c));
  ASSERT_EQ(c.samples.size(), 2u);
  EXPECT_EQ(c.samples[0].fwd_order, 1u);  // a: shards at 2 and 1
  EXPECT_EQ(c.samples[1].fwd_order, 2u);  // b: one replica said 2, the other nothing
}

// fwd_stage: orders compare by pipeline stage first, so stage 0's third
// unit runs before stage 1's first; a stage past 65535 is refused.
TEST_F(TwoRanks, ForwardOrderComparesThePipelineStageFirst) {
  StepAggregator agg(&topo, {});
  v1::StepStats r0 = OrderedReport(0, 2, 1);
  r0.set_fwd_stage(1);
  const v1::StepStats r1 = OrderedReport(1, 0, 2);
  StepAggregator::Outcome o;
  v1::StepStats bad = r1;
  bad.set_fwd_stage(kMaxPipelineStages);
  const Status st = agg.Add(1, bad, t0, &o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("fwd_stage must be < 65536, not 65536"), std::string::npos)
      << st.message();
  Add(agg, 0, r0, t0);
  Add(agg, 1, r1, t0);
  StepAggregator::ClosedStep c;
  ASSERT_TRUE(agg.PopReady(t0, &c));
  ASSERT_EQ(c.samples.size(), 2u);
  EXPECT_EQ(c.samples[0].fwd_order, (uint64_t{1} << 32) | 2);  // a: only stage 1 said
  EXPECT_EQ(c.samples[1].fwd_order, 2u);  // b: stage 0's position 2 before stage 1's 1
  EXPECT_EQ(ForwardOrderKey(7, 0), 0u);   // unknown in any stage
}

TEST(Topology, RejectsInconsistentRegistrations) {
  JobTopology topo;
  std::vector<uint32_t> ids;
  std::vector<std::string> added;
  ASSERT_TRUE(topo.RegisterRank(0, {{"a", 10, 0, 2}}, &ids, &added).ok());
  EXPECT_EQ(topo.RegisterRank(1, {{"a", 10, 1, 4}}, &ids, &added).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(topo.RegisterRank(1, {{"b", 10, 2, 2}}, &ids, &added).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(topo.RegisterRank(1, {{"b", 1, 0, 1}, {"b", 1, 0, 1}}, &ids, &added).code(),
            StatusCode::kInvalidArgument);
  // A shard's numel is the one registered for it first (0: not stated).
  EXPECT_EQ(topo.RegisterRank(1, {{"a", 11, 0, 2}}, &ids, &added).code(),
            StatusCode::kFailedPrecondition);
  // Checks of a later unit leave the earlier ones unapplied too.
  EXPECT_EQ(topo.RegisterRank(1, {{"n", 5, 0, 1}, {"a", 10, 0, 3}}, &ids, &added).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(topo.num_units(), 1u);  // nothing applied
  EXPECT_FALSE(topo.HasRank(1));
  ASSERT_TRUE(topo.RegisterRank(1, {{"a", 0, 0, 2}}, &ids, &added).ok());
  EXPECT_EQ(topo.unit(0).shard_numel[0], 10u);  // not overwritten by "not stated"
  const std::vector<RankUnitSpec> specs = topo.SpecsOfRank(0);
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].name, "a");
  EXPECT_EQ(specs[0].numel, 10u);
  EXPECT_EQ(specs[0].shard_count, 2u);
  ASSERT_TRUE(topo.RegisterRank(1, {{"a", 10, 1, 2}}, &ids, &added).ok());
  EXPECT_EQ(topo.SlotOf(0, 0, 0), 0);
  EXPECT_EQ(topo.SlotOf(0, 5, 0), 0);  // out of position: hash fallback
  EXPECT_EQ(topo.SlotOf(1, 0, 0), 1);
  EXPECT_EQ(topo.SlotOf(2, 0, 0), -1);
}

}  // namespace
}  // namespace gnmr
