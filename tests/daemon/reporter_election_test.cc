// Reporter election without a daemon (docs/scale.md, "Reporter election"):
// replica groups in the topology, the election's choices, and what the
// step aggregator waits for.
#include "daemon/job/reporter_election.h"

#include <gtest/gtest.h>

#include "daemon/aggregator/step_aggregator.h"
#include "daemon/topology/topology.h"

namespace gnmr {
namespace {

using Changes = ReporterElection::Changes;

// TP 2 x DP 3: rank r holds shard r % 2 of "w" and all of "b".
struct Election : ::testing::Test {
  void SetUp() override {
    for (uint32_t r = 0; r < 6; ++r) Register(r, r % 2);
  }
  void Register(uint32_t rank, uint32_t shard) {
    std::vector<uint32_t> ids;
    std::vector<std::string> added;
    ASSERT_TRUE(topo.RegisterRank(rank, {{"w", 8, shard, 2}, {"b", 4, 0, 1}}, &ids, &added).ok());
  }
  // Registers every rank with the election (all can stand by) and attaches
  // its stream.
  void RegisterAll(ReporterElection& e, bool can_stand_by = true) {
    Changes c;
    for (uint32_t r = 0; r < 6; ++r) {
      e.OnRegistered(r, can_stand_by, &c);
      e.SetLive(r, true, &c);
    }
  }
  JobTopology topo;
};

TEST_F(Election, ReplicasOfAShardFormOneGroup) {
  ASSERT_EQ(topo.num_groups(), 2u);
  EXPECT_EQ(topo.group_members(topo.group_of(0)), (std::vector<uint32_t>{0, 2, 4}));
  EXPECT_EQ(topo.group_members(topo.group_of(1)), (std::vector<uint32_t>{1, 3, 5}));
  EXPECT_EQ(topo.group_of(7), JobTopology::kNoGroup);
  // Registering again with the same slots keeps the group; with other slots
  // (here: only "b") the rank forms a group of its own.
  Register(4, 0);
  EXPECT_EQ(topo.group_of(4), topo.group_of(0));
  std::vector<uint32_t> ids;
  std::vector<std::string> added;
  ASSERT_TRUE(topo.RegisterRank(4, {{"b", 4, 0, 1}}, &ids, &added).ok());
  EXPECT_EQ(topo.num_groups(), 3u);
  EXPECT_EQ(topo.group_members(topo.group_of(0)), (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(topo.group_members(topo.group_of(4)), (std::vector<uint32_t>{4}));
}

TEST_F(Election, ReplicasShareOneLayoutWhenTheyRegisterInTheSameOrder) {
  // Six ranks, two groups: one layout per group, two entries each.
  EXPECT_EQ(topo.distinct_layouts(), 2u);
  EXPECT_EQ(topo.distinct_layout_entries(), 4u);
  // The same slots in another order: same group, a layout of its own, and
  // reports in either order still resolve to the rank's slots.
  std::vector<uint32_t> ids;
  std::vector<std::string> added;
  ASSERT_TRUE(topo.RegisterRank(2, {{"b", 4, 0, 1}, {"w", 8, 0, 2}}, &ids, &added).ok());
  EXPECT_EQ(topo.group_of(2), topo.group_of(0));
  EXPECT_EQ(topo.distinct_layouts(), 3u);
  EXPECT_EQ(topo.UnitsOfRank(2), (std::vector<uint32_t>{1, 0}));
  EXPECT_EQ(topo.UnitsOfRank(0), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(topo.SlotOf(2, 0, 1), topo.SlotOf(0, 1, 1));
  EXPECT_EQ(topo.SlotOf(2, 1, 0), topo.SlotOf(0, 0, 0));
  // A rank that leaves its group for other slots leaves the shared layout
  // untouched for the others.
  ASSERT_TRUE(topo.RegisterRank(4, {{"b", 4, 0, 1}}, &ids, &added).ok());
  EXPECT_EQ(topo.UnitsOfRank(4), (std::vector<uint32_t>{1}));
  EXPECT_EQ(topo.UnitsOfRank(0), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(topo.SpecsOfRank(0).size(), 2u);
  EXPECT_EQ(topo.rank_units(), 11u);
  // Back in the original order: shares rank 0's layout again.
  Register(2, 0);
  EXPECT_EQ(topo.distinct_layouts(), 3u);  // groups {0,2}, {1,3,5}, {4}
  EXPECT_EQ(topo.distinct_layout_entries(), 5u);
}

TEST_F(Election, AllModeEveryRankReports) {
  ReporterElection e(&topo);
  RegisterAll(e);
  EXPECT_EQ(e.reporters(), (std::vector<uint32_t>{0, 1, 2, 3, 4, 5}));
  for (uint32_t r = 0; r < 6; ++r) EXPECT_FALSE(e.standby(r));
}

TEST_F(Election, OnePerShardElectsTheLowestLiveRankOfEachGroup) {
  ReporterElection e(&topo);
  RegisterAll(e);
  Changes c;
  e.SetMode(ReportMode::kOnePerShard, &c);
  EXPECT_EQ(e.reporters(), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(c.size(), 4u);  // ranks 2..5 now stand by
  for (const auto& ch : c) EXPECT_TRUE(ch.standby) << ch.rank;

  // The reporter's stream ends: the next replica takes over at once.
  c.clear();
  e.SetLive(0, false, &c);
  EXPECT_EQ(e.reporters(), (std::vector<uint32_t>{1, 2}));
  ASSERT_EQ(c.size(), 2u);
  EXPECT_TRUE(e.standby(0));
  EXPECT_FALSE(e.standby(2));

  // It comes back (registers again, attaches): the lowest rank reports
  // again.
  c.clear();
  e.OnRegistered(0, true, &c);
  EXPECT_EQ(e.reporters(), (std::vector<uint32_t>{1, 2}));  // registered is not attached
  e.SetLive(0, true, &c);
  EXPECT_EQ(e.reporters(), (std::vector<uint32_t>{0, 1}));
  EXPECT_TRUE(e.standby(2));

  // Back to `all`: every standby is told to report.
  c.clear();
  e.SetMode(ReportMode::kAll, &c);
  EXPECT_EQ(c.size(), 4u);
  EXPECT_EQ(e.reporters().size(), 6u);
}

TEST_F(Election, PassedOverReportersAreReplacedThenForgiven) {
  ReporterElection e(&topo);
  RegisterAll(e);
  Changes c;
  e.SetMode(ReportMode::kOnePerShard, &c);
  c.clear();
  EXPECT_TRUE(e.PassOver(1, &c));
  EXPECT_EQ(e.reporters(), (std::vector<uint32_t>{0, 3}));
  EXPECT_TRUE(e.PassOver(3, &c));
  EXPECT_EQ(e.reporters(), (std::vector<uint32_t>{0, 5}));
  // Every live replica was passed over: forgiven, the lowest reports again.
  EXPECT_TRUE(e.PassOver(5, &c));
  EXPECT_EQ(e.reporters(), (std::vector<uint32_t>{0, 1}));
  // A group whose other replicas are gone cannot replace its reporter.
  c.clear();
  e.SetLive(2, false, &c);
  e.SetLive(4, false, &c);
  EXPECT_FALSE(e.PassOver(0, &c));
  EXPECT_FALSE(e.standby(0));
}

TEST_F(Election, AGroupWithNoLiveRankKeepsOneReporterToWaitFor) {
  ReporterElection e(&topo);
  RegisterAll(e);
  Changes c;
  e.SetMode(ReportMode::kOnePerShard, &c);
  for (uint32_t r : {0u, 2u, 4u}) e.SetLive(r, false, &c);
  // The step still waits (until its deadline) for one rank of the shard,
  // as `report: all` waits for every rank.
  ASSERT_EQ(e.reporters().size(), 2u);
  EXPECT_EQ(e.reporters()[0], 1u);
  EXPECT_EQ(topo.group_of(e.reporters()[1]), topo.group_of(0));
}

TEST_F(Election, RanksThatCannotStandByAlwaysReport) {
  ReporterElection e(&topo);
  Changes c;
  e.SetMode(ReportMode::kOnePerShard, &c);
  for (uint32_t r = 0; r < 6; ++r) {
    e.OnRegistered(r, /*can_stand_by=*/r != 2, &c);
    e.SetLive(r, true, &c);
  }
  // Rank 2 (an old client) reports for its group; 0 and 4 stand by.
  EXPECT_EQ(e.reporters(), (std::vector<uint32_t>{1, 2}));
  EXPECT_FALSE(e.can_stand_by(2));
  EXPECT_FALSE(e.standby(2));
  EXPECT_TRUE(e.standby(0));
  // Once it is gone, a replica that can stand by reports.
  e.SetLive(2, false, &c);
  EXPECT_FALSE(e.standby(0));
  EXPECT_EQ(e.reporters(), (std::vector<uint32_t>{0, 1}));
}

// Before: an old client registered counted as live at once, so one that
// never attached held its group: no replica reported for it and every step
// waited for its deadline (1 decision in 80 steps, docs/scale.md).
TEST_F(Election, AnOldClientThatNeverAttachesHoldsNothing) {
  ReporterElection e(&topo);
  Changes c;
  e.SetMode(ReportMode::kOnePerShard, &c);
  for (uint32_t r = 0; r < 6; ++r) {
    e.OnRegistered(r, /*can_stand_by=*/r != 0, &c);
    if (r != 0) e.SetLive(r, true, &c);  // rank 0 registers and never attaches
  }
  EXPECT_EQ(e.reporters(), (std::vector<uint32_t>{1, 2}));
  EXPECT_FALSE(e.standby(2));
  EXPECT_TRUE(e.standby(4));
  // Attached, it reports for its group and the replica stands by again.
  e.SetLive(0, true, &c);
  EXPECT_EQ(e.reporters(), (std::vector<uint32_t>{0, 1}));
  EXPECT_TRUE(e.standby(2));
}

// An old client that stays attached but sends nothing is passed over like
// a reporter that can stand by: a replica reports, the old client's
// reports are no longer waited for.
TEST_F(Election, ASilentOldClientIsPassedOver) {
  ReporterElection e(&topo);
  Changes c;
  e.SetMode(ReportMode::kOnePerShard, &c);
  for (uint32_t r = 0; r < 6; ++r) {
    e.OnRegistered(r, /*can_stand_by=*/r != 0, &c);
    e.SetLive(r, true, &c);
  }
  ASSERT_EQ(e.reporters(), (std::vector<uint32_t>{0, 1}));
  c.clear();
  const std::optional<uint32_t> next = e.PassOver(0, &c);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(*next, 2u);
  EXPECT_EQ(e.reporters(), (std::vector<uint32_t>{1, 2}));
  EXPECT_FALSE(e.standby(0));  // an old client is never told to stand by
  // Its group's only other replicas gone: it is forgiven and waited for.
  e.SetLive(2, false, &c);
  e.SetLive(4, false, &c);
  EXPECT_EQ(e.reporters(), (std::vector<uint32_t>{0, 1}));
}

// The aggregator waits for the reporters only, and an overdue step can get
// one more deadline while a replica reports for a missing reporter.
TEST_F(Election, AggregatorWaitsForReportersAndExtendsOnce) {
  ReporterElection e(&topo);
  RegisterAll(e);
  Changes c;
  e.SetMode(ReportMode::kOnePerShard, &c);
  using Clock = StepAggregator::Clock;
  StepAggregator::Options o;
  o.deadline = std::chrono::seconds(2);
  StepAggregator agg(&topo, o);
  agg.SetReporters(&e.reporters());
  const Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);
  auto report = [&](uint32_t rank, int64_t step, Clock::time_point at) {
    v1::StepStats s;
    s.set_step(step);
    for (uint32_t id : {0u, 1u}) {
      s.add_unit_id(id);
      s.add_sumsq(1.0);
    }
    StepAggregator::Outcome out;
    return agg.Add(rank, s, at, &out);
  };
  ASSERT_TRUE(report(0, 0, t0).ok());
  ASSERT_TRUE(report(1, 0, t0).ok());
  StepAggregator::ClosedStep closed;
  ASSERT_TRUE(agg.PopReady(t0, &closed));  // complete: both reporters
  EXPECT_FALSE(closed.by_deadline);
  EXPECT_EQ(closed.ranks_expected, 2u);
  EXPECT_EQ(closed.samples.size(), 2u);

  // Step 1: rank 1 never reports.
  ASSERT_TRUE(report(0, 1, t0).ok());
  EXPECT_FALSE(agg.Overdue(t0 + std::chrono::seconds(1)));
  const auto late = t0 + std::chrono::seconds(2);
  ASSERT_EQ(agg.Overdue(late), 1);
  EXPECT_EQ(agg.Missing(1), (std::vector<uint32_t>{1}));
  ASSERT_TRUE(e.PassOver(1, &c));
  agg.ReportersChanged();
  agg.Extend(1, true);
  EXPECT_FALSE(agg.Overdue(late));
  EXPECT_FALSE(agg.PopReady(late, &closed));  // one more deadline
  ASSERT_TRUE(report(3, 1, late).ok());       // the new reporter sends step 1
  ASSERT_TRUE(agg.PopReady(late, &closed));
  EXPECT_EQ(closed.step, 1);
  EXPECT_FALSE(closed.by_deadline);
  EXPECT_EQ(closed.incomplete_units, 0u);

  // Step 2: nobody replaces the missing reporter: closes at the (single)
  // deadline with the shard's unit incomplete.
  ASSERT_TRUE(report(0, 2, late).ok());
  agg.Extend(2, false);
  EXPECT_FALSE(agg.PopReady(late + std::chrono::seconds(1), &closed));
  ASSERT_TRUE(agg.PopReady(late + std::chrono::seconds(2), &closed));
  EXPECT_TRUE(closed.by_deadline);
  EXPECT_EQ(closed.incomplete_units, 1u);  // "w": shard 1 missing
}

}  // namespace
}  // namespace gnmr
