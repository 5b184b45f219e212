// Reporter election through a real daemon over gRPC (docs/scale.md,
// "Reporter election"): TP 2 x DP 2, `report: one_per_shard`. One replica
// per shard reports, every rank receives every decision, and a step whose
// reporter disconnects or misses the deadline is not lost: the replica
// that takes over sends it.
#include <gtest/gtest.h>

#include "proto/report_fingerprint.h"
#include "tests/daemon/test_daemon.h"

namespace gnmr::testing {
namespace {

class ReporterTest : public DaemonTest {
 protected:
  void SetUp() override {
    // 1 s, not the tests' usual 300 ms: a replica that takes over must
    // send within one deadline, also on a loaded machine (ASan, CI).
    DaemonOptions opts;
    opts.registry.job.aggregation.deadline = std::chrono::seconds(1);
    StartDaemon(opts);
    config_ = FastConfig();
    config_.set_report(v1::REPORT_ONE_PER_SHARD);
    for (uint32_t r = 0; r < 4; ++r) {
      ranks_.push_back(std::make_unique<RawRank>(Tcp(), "j", r, 4));
      ranks_[r]->can_stand_by = true;
      // Rank r holds shard r % 2 of "w" and all of "b": ranks 0 and 2 are
      // replicas of shard 0, ranks 1 and 3 of shard 1.
      ASSERT_TRUE(
          ranks_[r]->Register({{"w", r % 2, 2}, {"b", 0, 1}}, nullptr, &config_, 7000 + r).ok());
      ranks_[r]->Open();
    }
  }
  bool Send(uint32_t rank, int64_t step) { return ranks_[rank]->SendStats(step, {4.0, 1.0}); }
  // Every rank receives the decision of `step`, the same one.
  void ExpectDecisionEverywhere(int64_t step) {
    v1::Decision first;
    for (uint32_t r = 0; r < 4; ++r) {
      v1::Decision d;
      ASSERT_TRUE(ranks_[r]->WaitDecision(step, &d)) << "rank " << r << " step " << step;
      if (r == 0) first = d;
      EXPECT_EQ(d.digest(), first.digest());
      EXPECT_EQ(d.sequence(), first.sequence());
    }
  }

  // Steps 0 decided (ranks 0 and 1 report), then standby rank 2 acks with
  // a note: it held back a report of step 0 with `sumsq`.
  void StepZeroThenNote(const std::vector<double>& sumsq) {
    ASSERT_TRUE(ranks_[2]->WaitRole(true));
    ASSERT_TRUE(ranks_[3]->WaitRole(true));
    ASSERT_TRUE(Send(0, 0));
    ASSERT_TRUE(Send(1, 0));
    ExpectDecisionEverywhere(0);
    v1::ClientMessage ack;
    ack.mutable_ack()->set_step(1);
    v1::StandbyNote* note = ack.mutable_ack()->mutable_standby();
    note->set_step(0);
    note->set_fingerprint(ReportFingerprint(ranks_[2]->Stats(0, sumsq)));
    note->mutable_overhead()->set_overhead_ratio(0.01);
    ASSERT_TRUE(ranks_[2]->Send(ack));
  }

  v1::ControllerConfig config_;
  std::vector<std::unique_ptr<RawRank>> ranks_;
};

TEST_F(ReporterTest, OneReplicaPerShardReportsAndEveryRankGetsTheDecision) {
  EXPECT_TRUE(ranks_[0]->WaitRole(false));
  EXPECT_TRUE(ranks_[1]->WaitRole(false));
  EXPECT_TRUE(ranks_[2]->WaitRole(true));
  EXPECT_TRUE(ranks_[3]->WaitRole(true));
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(Send(0, step));
    ASSERT_TRUE(Send(1, step));
    ExpectDecisionEverywhere(step);
  }
  // Complete without the standbys: no step waited for its deadline.
  EXPECT_EQ(listener_.by_deadline.load(), 0u);
  EXPECT_EQ(listener_.incomplete.load(), 0u);
}

TEST_F(ReporterTest, AReporterThatDisconnectsIsReplacedWithoutLosingTheStep) {
  ASSERT_TRUE(ranks_[2]->WaitRole(true));
  ASSERT_TRUE(Send(0, 0));
  ASSERT_TRUE(Send(1, 0));
  ExpectDecisionEverywhere(0);
  // Rank 1 reports step 1; rank 0 dies before it does.
  ASSERT_TRUE(Send(1, 1));
  ranks_[0]->Close();
  int64_t from = -1;
  ASSERT_TRUE(ranks_[2]->WaitRole(false, &from));
  EXPECT_EQ(from, 1);  // the first step the job still needs
  ASSERT_TRUE(Send(2, 1));
  for (uint32_t r = 1; r < 4; ++r) {
    v1::Decision d;
    EXPECT_TRUE(ranks_[r]->WaitDecision(1, &d)) << "rank " << r;
  }
  EXPECT_EQ(listener_.by_deadline.load(), 0u);
  EXPECT_EQ(listener_.incomplete.load(), 0u);
}

TEST_F(ReporterTest, AReporterThatMissesTheDeadlineIsPassedOver) {
  ASSERT_TRUE(ranks_[3]->WaitRole(true));
  ASSERT_TRUE(Send(0, 0));
  ASSERT_TRUE(Send(1, 0));
  ExpectDecisionEverywhere(0);
  // Rank 1 stays connected but does not report step 1: at the deadline
  // (1 s here) rank 3 is elected in its place and sends the step.
  ASSERT_TRUE(Send(0, 1));
  int64_t from = -1;
  ASSERT_TRUE(ranks_[3]->WaitRole(false, &from, std::chrono::seconds(3)));
  EXPECT_EQ(from, 1);
  EXPECT_TRUE(ranks_[1]->WaitRole(true));
  ASSERT_TRUE(Send(3, 1));
  ExpectDecisionEverywhere(1);
  // The step closed complete, within its second deadline.
  EXPECT_EQ(listener_.by_deadline.load(), 0u);
  EXPECT_EQ(listener_.incomplete.load(), 0u);
}

TEST_F(ReporterTest, ConfigBackToAllMakesEveryRankReport) {
  ASSERT_TRUE(ranks_[2]->WaitRole(true));
  v1::ControllerConfig all = config_;
  all.set_report(v1::REPORT_ALL);
  ASSERT_TRUE(SetConfig("j", all).ok());
  EXPECT_TRUE(ranks_[2]->WaitRole(false));
  EXPECT_TRUE(ranks_[3]->WaitRole(false));
  // Now a step waits for all four ranks.
  for (uint32_t r = 0; r < 3; ++r) ASSERT_TRUE(Send(r, 0));
  v1::Decision d;
  EXPECT_FALSE(ranks_[0]->WaitDecision(0, &d, std::chrono::milliseconds(100)));
  ASSERT_TRUE(Send(3, 0));
  ExpectDecisionEverywhere(0);
  EXPECT_EQ(listener_.by_deadline.load(), 0u);
}

// Replica check (docs/scale.md): a standby's ack carries the fingerprint
// of the report it held back; equal to its reporter's, nothing changes.
TEST_F(ReporterTest, AStandbyThatHeldBackTheSameReportKeepsStandingBy) {
  StepZeroThenNote({4.0, 1.0});
  for (int i = 0; i < 200 && listener_.replica_checks.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(listener_.standby_notes.load(), 1u);
  EXPECT_EQ(listener_.replica_checks.load(), 1u);
  EXPECT_EQ(listener_.replica_mismatches.load(), 0u);
  // Still one reporter per shard: step 1 needs ranks 0 and 1 only.
  ASSERT_TRUE(Send(0, 1));
  ASSERT_TRUE(Send(1, 1));
  ExpectDecisionEverywhere(1);
  EXPECT_TRUE(listener_.EventsOf("j", "replicas_differ").empty());
  EXPECT_EQ(listener_.by_deadline.load(), 0u);
}

// A standby whose held report differs (the ranks are not replicas, e.g.
// shards registered as whole units): the job goes back to every rank
// reporting, says why, and no step is lost.
TEST_F(ReporterTest, AStandbyThatHeldBackAnotherReportMakesEveryRankReport) {
  StepZeroThenNote({9.0, 1.0});
  EXPECT_TRUE(ranks_[2]->WaitRole(false));
  EXPECT_TRUE(ranks_[3]->WaitRole(false));
  EXPECT_EQ(listener_.replica_mismatches.load(), 1u);  // counted before the roles changed
  const std::vector<v1::Event> differ = listener_.EventsOf("j", "replicas_differ");
  ASSERT_EQ(differ.size(), 1u);
  EXPECT_EQ(differ[0].observed_step(), 0);
  EXPECT_NE(differ[0].detail().find("rank 2"), std::string::npos) << differ[0].detail();
  EXPECT_NE(differ[0].detail().find("report: all"), std::string::npos) << differ[0].detail();
  v1::ControllerConfig now;
  ASSERT_TRUE(GetConfig("j", &now).ok());
  EXPECT_EQ(now.report(), v1::REPORT_ALL);
  // Step 1 now waits for all four ranks.
  for (uint32_t r = 0; r < 3; ++r) ASSERT_TRUE(Send(r, 1));
  v1::Decision d;
  EXPECT_FALSE(ranks_[0]->WaitDecision(1, &d, std::chrono::milliseconds(100)));
  ASSERT_TRUE(Send(3, 1));
  ExpectDecisionEverywhere(1);
}

// A trainer restarted from a checkpoint sends step numbers it sent before,
// with other statistics: the check must compare within the new timeline
// only, not with what it kept of the old one.
TEST_F(ReporterTest, AfterARestartTheCheckComparesOnlyTheNewTimeline) {
  StepZeroThenNote({4.0, 1.0});
  ASSERT_TRUE(Send(0, 1));
  ASSERT_TRUE(Send(1, 1));
  ExpectDecisionEverywhere(1);
  for (auto& r : ranks_) r->Close();
  std::vector<std::unique_ptr<RawRank>> again;
  for (uint32_t r = 0; r < 4; ++r) {  // a new incarnation: a new generation, steps from 0
    again.push_back(std::make_unique<RawRank>(Tcp(), "j", r, 4));
    again[r]->can_stand_by = true;
    ASSERT_TRUE(
        again[r]->Register({{"w", r % 2, 2}, {"b", 0, 1}}, nullptr, &config_, 8000 + r).ok());
    again[r]->Open();
  }
  ASSERT_TRUE(again[2]->WaitRole(true));
  ASSERT_TRUE(again[0]->SendStats(0, {6.0, 1.0}));
  ASSERT_TRUE(again[1]->SendStats(0, {6.0, 1.0}));
  v1::Decision d;
  ASSERT_TRUE(again[2]->WaitDecision(0, &d));
  v1::ClientMessage ack;
  ack.mutable_ack()->set_step(1);
  ack.mutable_ack()->mutable_standby()->set_step(0);
  ack.mutable_ack()->mutable_standby()->set_fingerprint(
      ReportFingerprint(again[2]->Stats(0, {6.0, 1.0})));
  const uint64_t checks = listener_.replica_checks.load();
  ASSERT_TRUE(again[2]->Send(ack));
  for (int i = 0; i < 200 && listener_.replica_checks.load() == checks; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(listener_.replica_checks.load(), checks + 1);
  EXPECT_EQ(listener_.replica_mismatches.load(), 0u);
  EXPECT_TRUE(listener_.EventsOf("j", "replicas_differ").empty());
}

// Pure data parallelism: one replica group, so the elected reporter is the
// only rank that reports, and a reporter that stays attached but sends
// nothing (a stopped process) opened no step: no deadline ran and it was
// never passed over (before: 1 decision against 39 with `report: all` while
// rank 0 was stopped for 20 s). The standbys' acks open the step now.
TEST_F(ReporterTest, ASilentReporterOfTheOnlyGroupIsPassedOverOnTheStandbysAcks) {
  std::vector<std::unique_ptr<RawRank>> dp;
  for (uint32_t r = 0; r < 3; ++r) {
    dp.push_back(std::make_unique<RawRank>(Tcp(), "dp", r, 3));
    dp[r]->can_stand_by = true;
    ASSERT_TRUE(dp[r]->Register({{"b", 0, 1}}, nullptr, &config_, 9000 + r).ok());
    dp[r]->Open();
  }
  ASSERT_TRUE(dp[0]->WaitRole(false));
  ASSERT_TRUE(dp[1]->WaitRole(true));
  ASSERT_TRUE(dp[2]->WaitRole(true));
  ASSERT_TRUE(dp[0]->SendStats(0, {1.0}));
  v1::Decision d;
  ASSERT_TRUE(dp[1]->WaitDecision(0, &d));
  // Rank 0 stops. The standbys go on: each acks step 1 with the note of
  // the report of step 1 it held back.
  for (uint32_t r : {1u, 2u}) {
    v1::ClientMessage ack;
    ack.mutable_ack()->set_step(1);
    ack.mutable_ack()->set_has_decision(true);
    ack.mutable_ack()->set_sequence(d.sequence());
    ack.mutable_ack()->set_digest(d.digest());
    ack.mutable_ack()->set_generation(d.generation());
    ack.mutable_ack()->mutable_standby()->set_step(1);
    ack.mutable_ack()->mutable_standby()->set_fingerprint(
        ReportFingerprint(dp[r]->Stats(1, {1.0})));
    ASSERT_TRUE(dp[r]->Send(ack));
  }
  // At the step's deadline (1 s here) rank 1 is elected and sends it.
  int64_t from = -1;
  ASSERT_TRUE(dp[1]->WaitRole(false, &from, std::chrono::seconds(4)));
  EXPECT_EQ(from, 1);
  ASSERT_TRUE(dp[1]->SendStats(1, {1.0}));
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_TRUE(dp[r]->WaitDecision(1, &d)) << "rank " << r;
  }
}

TEST_F(ReporterTest, RanksThatCannotStandByAreNeverToldTo) {
  // A fifth job whose ranks are old clients: no role messages, every rank
  // reports as before.
  std::vector<std::unique_ptr<RawRank>> old;
  for (uint32_t r = 0; r < 2; ++r) {
    old.push_back(std::make_unique<RawRank>(Tcp(), "old", r, 2));
    ASSERT_TRUE(old[r]->Register({{"b", 0, 1}}, nullptr, &config_).ok());
    old[r]->Open();
  }
  // Both attached (a registered rank that is not attached holds nothing).
  for (auto& r : old) ASSERT_TRUE(r->WaitGeneration(1));
  ASSERT_TRUE(old[0]->SendStats(0, {1.0}));
  v1::Decision d;
  EXPECT_FALSE(old[0]->WaitDecision(0, &d, std::chrono::milliseconds(100)));
  ASSERT_TRUE(old[1]->SendStats(0, {1.0}));
  EXPECT_TRUE(old[0]->WaitDecision(0, &d));
  EXPECT_EQ(old[0]->roles_received(), 0u);
  EXPECT_EQ(old[1]->roles_received(), 0u);
}

}  // namespace
}  // namespace gnmr::testing
