// Ranks without decisions over real gRPC (docs/safety.md, "A rank without
// decisions"): a rank that registered but gets no decisions (here: its
// stream never attaches, as when a relay lost its lane) is counted, named
// in an event and in ListJobs, and its recovery is said too. Before, the
// only trace was gnmr_ranks_connected one short, and a rank behind a relay
// whose lane was lost even showed as connected.
#include <string>

#include "tests/daemon/metrics_daemon_test.h"
#include "tests/testing/eventually.h"

namespace gnmr::testing {
namespace {

const std::vector<RawRank::Unit> kUnits = {{"x"}};

class RankWatchTest : public MetricsDaemonTest {
 protected:
  void SetUp() override {
    StartDaemonWithMetrics();
    config_ = FastConfig();
    config_.set_report(v1::REPORT_ONE_PER_SHARD);
    for (uint32_t r = 0; r < 3; ++r) {
      ranks_.push_back(std::make_unique<RawRank>(Tcp(), "j", r, 3));
      ranks_[r]->can_stand_by = true;
      ASSERT_TRUE(ranks_[r]->Register(kUnits, nullptr, &config_, 0xA0 + r).ok());
    }
    // Ranks 0 and 1 attach; rank 2 registered and never attaches.
    ranks_[0]->Open();
    ranks_[1]->Open();
    ASSERT_TRUE(ranks_[0]->WaitGeneration(1));
    ASSERT_TRUE(ranks_[1]->WaitGeneration(1));
  }
  void TearDown() override {
    ranks_.clear();
    DaemonTest::TearDown();
  }
  // Rank 0 (the reporter) reports `step`; the attached ranks ack its plan
  // (the decision that covers it, lag 1) once the decision came.
  void Step(int64_t step, const std::vector<uint32_t>& acking) {
    ASSERT_TRUE(ranks_[0]->SendStats(step, {1.0}));
    v1::Decision d;
    ASSERT_TRUE(ranks_[0]->WaitDecision(step, &d)) << step;
    for (uint32_t r : acking) ASSERT_TRUE(ranks_[r]->SendAck(step + 1, &d, 1));
  }
  double Gauge() { return Sample("gnmr_ranks_without_decisions{job_id=\"j\"}"); }
  v1::JobInfo Info() {
    grpc::ClientContext ctx;
    v1::ListJobsResponse resp;
    EXPECT_TRUE(v1::Admin::NewStub(Tcp())->ListJobs(&ctx, {}, &resp).ok());
    for (const v1::JobInfo& j : resp.jobs()) {
      if (j.job_id() == "j") return j;
    }
    return {};
  }

  v1::ControllerConfig config_;
  std::vector<std::unique_ptr<RawRank>> ranks_;
};

TEST_F(RankWatchTest, ARankThatNeverAttachesIsCountedNamedAndItsReturnSaid) {
  for (int64_t s = 0; s < 12; ++s) Step(s, {0, 1});
  EXPECT_EQ(listener_.ranks_without_decisions.load(), 0u);  // 12 steps: not yet
  for (int64_t s = 12; s < 28; ++s) Step(s, {0, 1});
  ASSERT_TRUE(Eventually([&] { return listener_.ranks_without_decisions.load() == 1u; }));
  EXPECT_EQ(Gauge(), 1.0);
  const std::vector<v1::Event> events = listener_.EventsOf("j", "rank_without_decisions");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].detail().find("rank 2 has had no decision for"), std::string::npos)
      << events[0].detail();
  EXPECT_NE(events[0].detail().find("its stream is not attached"), std::string::npos)
      << events[0].detail();
  v1::JobInfo info = Info();
  EXPECT_EQ(info.ranks_without_decisions(), 1u);
  ASSERT_EQ(info.ranks_size(), 3);
  EXPECT_LE(info.ranks(0).steps_without_decision(), 2);
  EXPECT_GT(info.ranks(2).steps_without_decision(), 20);
  EXPECT_FALSE(info.ranks(2).connected());

  // It attaches and plans with decisions again: said, and no longer counted.
  ranks_[2]->Open();
  ASSERT_TRUE(ranks_[2]->WaitGeneration(1));
  for (int64_t s = 28; s < 36; ++s) Step(s, {0, 1, 2});
  ASSERT_TRUE(Eventually([&] { return listener_.ranks_without_decisions.load() == 0u; }));
  EXPECT_EQ(Gauge(), 0.0);
  const std::vector<v1::Event> after = listener_.EventsOf("j", "rank_without_decisions");
  ASSERT_EQ(after.size(), 2u);
  EXPECT_NE(after[1].detail().find("rank 2 gets decisions again"), std::string::npos)
      << after[1].detail();
}

// A rank attached whose plans have no decision (acks without one) counts
// too: attached is not enough.
TEST_F(RankWatchTest, AnAttachedRankWhosePlansHaveNoDecisionCounts) {
  ranks_[2]->Open();
  ASSERT_TRUE(ranks_[2]->WaitGeneration(1));
  for (int64_t s = 0; s < 28; ++s) {
    Step(s, {0, 1});
    ASSERT_TRUE(ranks_[2]->SendAck(s + 1, nullptr, 1));  // no decision
  }
  ASSERT_TRUE(Eventually([&] { return listener_.ranks_without_decisions.load() == 1u; }));
  const std::vector<v1::Event> events = listener_.EventsOf("j", "rank_without_decisions");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].detail().find("rank 2"), std::string::npos);
  EXPECT_NE(events[0].detail().find("its stream is attached"), std::string::npos);
}

}  // namespace
}  // namespace gnmr::testing
