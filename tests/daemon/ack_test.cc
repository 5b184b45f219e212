// Acks compared step by step over real gRPC (docs/safety.md, "Plan
// validity"): every rank acks every planned step; ranks that applied
// different plans (generation, decision or none, digest, skipped step) at a
// step count one mismatch for it, in gnmrd's own metric, and an
// `ack_mismatch` event names the step, the ranks and their digests.
#include "tests/daemon/metrics_daemon_test.h"
#include "tests/testing/eventually.h"

namespace gnmr::testing {
namespace {

const std::vector<RawRank::Unit> kUnits = {{"x"}};

class AckTest : public MetricsDaemonTest {
 protected:
  void SetUp() override {
    StartDaemonWithMetrics();
    for (uint32_t r = 0; r < 2; ++r) {
      ranks_.push_back(std::make_unique<RawRank>(r ? Unix() : Tcp(), "j", r, 2));
      ASSERT_TRUE(ranks_[r]->Register(kUnits, nullptr, nullptr, 0xA0 + r).ok());
      ranks_[r]->Open();
    }
  }
  void TearDown() override {
    ranks_.clear();
    DaemonTest::TearDown();
  }
  // Both ranks report `step` and receive its decision: everything either
  // sent before is processed.
  v1::Decision RoundTrip(int64_t step) {
    for (auto& r : ranks_) EXPECT_TRUE(r->SendStats(step, {1.0}));
    v1::Decision d;
    for (auto& r : ranks_) EXPECT_TRUE(r->WaitDecision(step, &d)) << step;
    return d;
  }
  double MetricValue() { return Sample("gnmr_ack_mismatches_total{job_id=\"j\"}"); }

  std::vector<std::unique_ptr<RawRank>> ranks_;
};

TEST_F(AckTest, IdenticalAcksAreNoMismatch) {
  const v1::Decision d0 = RoundTrip(0);
  for (auto& r : ranks_) {
    ASSERT_TRUE(r->SendAck(1, &d0, 1));
    ASSERT_TRUE(r->SendAck(2, nullptr, 1, /*skip=*/true));  // no decision, alike
  }
  RoundTrip(1);
  EXPECT_EQ(listener_.ack_mismatches.load(), 0u);
  EXPECT_EQ(MetricValue(), 0.0);
  EXPECT_TRUE(listener_.EventsOf("j", "ack_mismatch").empty());
}

// A rank that ran a step before its registration finished acks it without a
// decision and with generation 0 (it knew none yet); a registered rank that
// missed the same step's decision applied the same (fallback) plan. Seen in
// scripts/demo.sh as a spurious "ranks applied different plans at step 0".
TEST_F(AckTest, NoDecisionBeforeAndAfterRegistrationIsTheSamePlan) {
  RoundTrip(0);
  ASSERT_TRUE(ranks_[0]->SendAck(1, nullptr, 0));
  ASSERT_TRUE(ranks_[1]->SendAck(1, nullptr, 1));
  // Still compared on what was applied: a skipped optimizer step differs.
  ASSERT_TRUE(ranks_[0]->SendAck(2, nullptr, 0));
  ASSERT_TRUE(ranks_[1]->SendAck(2, nullptr, 1, /*skip=*/true));
  RoundTrip(1);
  EXPECT_EQ(listener_.ack_mismatches.load(), 1u);
  const std::vector<v1::Event> events = listener_.EventsOf("j", "ack_mismatch");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].observed_step(), 2);
}

TEST_F(AckTest, DifferentPlansAtAStepAreOneMismatchNamingTheRanks) {
  const v1::Decision d0 = RoundTrip(0);
  const v1::Decision d1 = RoundTrip(1);
  // Rank 0's acks first (a round trip makes sure they are in), then rank
  // 1's, so the first ack of each step is rank 0's.
  ASSERT_TRUE(ranks_[0]->SendAck(2, &d1, 1));
  ASSERT_TRUE(ranks_[0]->SendAck(3, &d1, 1));
  ASSERT_TRUE(ranks_[0]->SendAck(4, &d1, 1));
  RoundTrip(2);
  EXPECT_EQ(listener_.ack_mismatches.load(), 0u);
  // Step 2: rank 1 had no decision.
  ASSERT_TRUE(ranks_[1]->SendAck(2, nullptr, 1));
  // Step 3: rank 1 applied an older decision; it acks again, also
  // differently: still one mismatch for the step.
  ASSERT_TRUE(ranks_[1]->SendAck(3, &d0, 1));
  ASSERT_TRUE(ranks_[1]->SendAck(3, nullptr, 1));
  // Step 4: the same decision, but rank 1 skipped the optimizer step.
  ASSERT_TRUE(ranks_[1]->SendAck(4, &d1, 1, /*skip=*/true));
  RoundTrip(3);
  EXPECT_EQ(listener_.ack_mismatches.load(), 3u);
  EXPECT_EQ(MetricValue(), 3.0);
  const std::vector<v1::Event> events = listener_.EventsOf("j", "ack_mismatch");
  ASSERT_EQ(events.size(), 3u);
  char digest[24];
  std::snprintf(digest, sizeof digest, "0x%016llx", static_cast<unsigned long long>(d1.digest()));
  EXPECT_EQ(events[0].observed_step(), 2);
  EXPECT_EQ(events[0].detail(), "step 2: rank 0 digest " + std::string(digest) + " (decision seq " +
                                    std::to_string(d1.sequence()) +
                                    ", generation 1), rank 1 no decision (generation 1)");
  EXPECT_NE(events[1].detail().find("step 3: rank 0 digest"), std::string::npos);
  EXPECT_NE(events[2].detail().find("rank 1 digest " + std::string(digest)), std::string::npos);
  EXPECT_NE(events[2].detail().find("optimizer step skipped"), std::string::npos);
}

// A single rank's ack of a decision is checked against what the daemon
// sent under that sequence.
TEST_F(AckTest, AnAckedDigestTheDaemonDidNotSendIsAMismatch) {
  const v1::Decision d0 = RoundTrip(0);
  v1::Decision tampered = d0;
  tampered.set_digest(d0.digest() ^ 1);
  ASSERT_TRUE(ranks_[0]->SendAck(1, &tampered, 1));
  RoundTrip(1);
  ASSERT_EQ(listener_.ack_mismatches.load(), 1u);
  const std::vector<v1::Event> events = listener_.EventsOf("j", "ack_mismatch");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(
      events[0].detail().find("but the daemon sent decision seq " + std::to_string(d0.sequence())),
      std::string::npos)
      << events[0].detail();
}

// An import while the ranks train, before the job decided anything, is a
// live switch too: a rank that observed a step before it and one that
// observes the step after must plan it alike (no decision, from the old
// generation), not one with the new generation's decision. Before, it
// voided at once (generation_property_test split at step 2 under ASan).
TEST_F(AckTest, ASwitchBeforeTheFirstDecisionIsLiveOnceRanksTrain) {
  v1::ControllerState empty;
  ASSERT_TRUE(ExportState("j", &empty).ok());
  ASSERT_TRUE(ranks_[0]->SendStats(0, {1.0}));  // rank 1 not yet: no decision
  ASSERT_TRUE(ranks_[0]->SendStats(1, {1.0}));
  // SendStats only writes to the stream: the import must come after the job
  // took both reports (counted under its lock), or it is no live switch.
  ASSERT_TRUE(
      gnmr::testing::Eventually([&] { return Sample("gnmr_reports_total{job_id=\"j\"}") >= 2; }));
  ASSERT_TRUE(ImportState("j", empty).ok());  // generation 2
  for (auto& r : ranks_) {
    ASSERT_TRUE(r->WaitGeneration(2));
    v1::GenerationStart start;
    for (const v1::ServerMessage& m : r->messages()) {
      if (m.has_generation() && m.generation().generation() == 2) start = m.generation();
    }
    EXPECT_TRUE(start.live());
    EXPECT_GT(start.from_step(), 1);  // past the steps rank 0 reported
  }
}

// An import while the ranks train is a live switch (docs/safety.md, rule
// 3): generation 1 still plans the steps before the switch's first step F,
// generation 2 plans F and later, and acks of both are compared step by
// step. Before, the old generation's acks were dropped as void, so a rank
// that planned with it while another had the new one was never flagged.
TEST_F(AckTest, AcksAcrossALiveSwitchAreComparedStepByStep) {
  RoundTrip(0);
  const v1::Decision d1 = RoundTrip(1);
  for (auto& r : ranks_) ASSERT_TRUE(r->SendAck(2, &d1, 1));
  RoundTrip(2);
  v1::ControllerState saved;
  ASSERT_TRUE(ExportState("j", &saved).ok());
  ASSERT_TRUE(ImportState("j", saved).ok());  // generation 2
  v1::GenerationStart start;
  for (auto& r : ranks_) {
    ASSERT_TRUE(r->WaitGeneration(2));
    for (const v1::ServerMessage& m : r->messages()) {
      if (m.has_generation() && m.generation().generation() == 2) start = m.generation();
    }
  }
  ASSERT_TRUE(start.live());
  const int64_t from = start.from_step();
  EXPECT_EQ(from, 4);  // the newest decision observed step 2, lag 1: step 3 is the last it covers
  v1::Decision d2;
  ASSERT_TRUE(ranks_[0]->WaitDecisionIn(2, 2, &d2));  // the rebuilt decision
  // Before F both plan with generation 1, from F with generation 2: alike.
  for (auto& r : ranks_) {
    ASSERT_TRUE(r->SendAck(from - 1, &d1, 1));
    ASSERT_TRUE(r->SendAck(from, &d2, 2));
  }
  RoundTrip(3);
  EXPECT_EQ(listener_.ack_mismatches.load(), 0u);
  // A rank that planned a step past F with generation 1 is flagged.
  ASSERT_TRUE(ranks_[0]->SendAck(from + 1, &d2, 2));
  ASSERT_TRUE(ranks_[1]->SendAck(from + 1, &d1, 1));
  RoundTrip(4);
  EXPECT_EQ(listener_.ack_mismatches.load(), 1u);
  EXPECT_EQ(MetricValue(), 1.0);
}

// A restart voids the old generation at once: a new incarnation's steps are
// planned anew, and an ack of the void generation is not compared.
TEST_F(AckTest, AcksOfAVoidGenerationAreNotCompared) {
  RoundTrip(0);
  const v1::Decision d1 = RoundTrip(1);
  for (auto& r : ranks_) ASSERT_TRUE(r->SendAck(1, &d1, 1));
  RoundTrip(2);
  for (auto& r : ranks_) r->Close();
  ranks_.clear();
  for (uint32_t r = 0; r < 2; ++r) {
    ranks_.push_back(std::make_unique<RawRank>(r ? Unix() : Tcp(), "j", r, 2));
    ASSERT_TRUE(ranks_[r]->Register(kUnits, nullptr, nullptr, 0xB0 + r).ok());
    ranks_[r]->Open();
  }
  for (auto& r : ranks_) ASSERT_TRUE(r->WaitGeneration(2));
  ASSERT_TRUE(ranks_[0]->SendAck(1, nullptr, 2));  // step 1 again, no decision yet
  ASSERT_TRUE(ranks_[1]->SendAck(1, &d1, 1));      // a void generation: not compared
  RoundTrip(1);
  EXPECT_EQ(listener_.ack_mismatches.load(), 0u);
  EXPECT_EQ(MetricValue(), 0.0);
}

}  // namespace
}  // namespace gnmr::testing
