// A relay's NodeSession stream against a real gnmrd over gRPC
// (docs/relay.md): the lanes of one stream attach as ranks, receive each
// decision in one delivery for the node, and a lane that misbehaves, is
// refused or is replaced ends alone while the node's other lanes go on.
#include "daemon/server/node_session.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "tests/daemon/raw_node.h"
#include "tests/daemon/raw_rank.h"
#include "tests/daemon/test_daemon.h"

namespace gnmr::testing {
namespace {

class NodeSessionTest : public DaemonTest {
 protected:
  // Ranks 0 and 1 of job "j" registered (world 2, units "a" and "b").
  void RegisterTwo(const std::string& token = "") {
    config_ = FastConfig();
    for (uint32_t r = 0; r < 2; ++r) {
      ranks_.push_back(std::make_unique<RawRank>(Tcp(), "j", r, 2, token));
      ASSERT_TRUE(ranks_[r]->Register({{"a"}, {"b"}}, nullptr, &config_).ok());
    }
  }
  v1::LaneUp HelloLane(uint32_t lane, uint32_t rank, const std::string& token = "") {
    return RawNode::Lane(lane, RawNode::Hello("j", rank, ranks_[rank]->session_id()), token);
  }
  v1::LaneUp StatsLane(uint32_t lane, uint32_t rank, int64_t step) {
    return RawNode::Lane(lane, RawNode::Stats(step, ranks_[rank]->unit_ids(), {4.0, 1.0}));
  }

  v1::ControllerConfig config_;
  std::vector<std::unique_ptr<RawRank>> ranks_;
};

TEST_F(NodeSessionTest, TwoLanesAttachAndEachDecisionCrossesTheStreamOnce) {
  StartDaemon();
  RegisterTwo();
  RawNode node(Tcp());
  ASSERT_TRUE(node.SendLanes({HelloLane(0, 0), HelloLane(1, 1)}));
  ASSERT_TRUE(node.WaitGenerationStart(0));
  ASSERT_TRUE(node.WaitGenerationStart(1));
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(node.SendLanes({StatsLane(0, 0, step), StatsLane(1, 1, step)}));
    v1::Decision d0, d1;
    std::vector<uint32_t> with;
    ASSERT_TRUE(node.WaitDecision(0, step, &d0, &with)) << "step " << step;
    ASSERT_TRUE(node.WaitDecision(1, step, &d1));
    EXPECT_EQ(d0.digest(), d1.digest());
    // One delivery for both lanes: the decision's bytes cross once.
    std::sort(with.begin(), with.end());
    EXPECT_EQ(with, (std::vector<uint32_t>{0, 1})) << "step " << step;
  }
  // Both ranks reported: no step waited for its deadline.
  EXPECT_EQ(listener_.by_deadline.load(), 0u);
  EXPECT_EQ(listener_.incomplete.load(), 0u);
}

TEST_F(NodeSessionTest, LanesAttachWhateverTheOrderOfTheirIds) {
  // A relay numbers a lane when its first message is queued, but gnmrd
  // does not rely on it: a lane id it has not seen is a new lane, whether
  // or not a higher one came first.
  StartDaemon();
  RegisterTwo();
  RawNode node(Tcp());
  ASSERT_TRUE(node.SendLanes({HelloLane(7, 1)}));
  ASSERT_TRUE(node.WaitGenerationStart(7));
  ASSERT_TRUE(node.SendLanes({HelloLane(3, 0)}));
  ASSERT_TRUE(node.WaitGenerationStart(3)) << "lane 3, after lane 7, was not attached";
  ASSERT_TRUE(node.SendLanes({StatsLane(3, 0, 0), StatsLane(7, 1, 0)}));
  v1::Decision d3, d7;
  ASSERT_TRUE(node.WaitDecision(3, 0, &d3));
  ASSERT_TRUE(node.WaitDecision(7, 0, &d7));
  EXPECT_EQ(d3.digest(), d7.digest());
  EXPECT_EQ(listener_.by_deadline.load(), 0u);
}

TEST_F(NodeSessionTest, TwoNodesWhoseLanesAreAlikeGetTheSameBytes) {
  // Each node carries one rank as its lane 0: a round's write is the same
  // for both, built once (round_cache.h) and sent to each.
  StartDaemon();
  RegisterTwo();
  RawNode a(Tcp()), b(Tcp());
  ASSERT_TRUE(a.SendLanes({HelloLane(0, 0)}));
  ASSERT_TRUE(b.SendLanes({HelloLane(0, 1)}));
  ASSERT_TRUE(a.WaitGenerationStart(0));
  ASSERT_TRUE(b.WaitGenerationStart(0));
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(a.SendLanes({StatsLane(0, 0, step)}));
    ASSERT_TRUE(b.SendLanes({StatsLane(0, 1, step)}));
    v1::Decision da, db;
    std::vector<uint32_t> with_a, with_b;
    ASSERT_TRUE(a.WaitDecision(0, step, &da, &with_a)) << "step " << step;
    ASSERT_TRUE(b.WaitDecision(0, step, &db, &with_b)) << "step " << step;
    EXPECT_EQ(da.SerializeAsString(), db.SerializeAsString());
    EXPECT_EQ(with_a, std::vector<uint32_t>{0});
    EXPECT_EQ(with_b, std::vector<uint32_t>{0});
  }
}

TEST_F(NodeSessionTest, ABadLaneMessageEndsThatLaneOnlyAndItsLateMessagesGoNowhere) {
  StartDaemon();
  RegisterTwo();
  RawNode node(Tcp());
  ASSERT_TRUE(node.SendLanes({HelloLane(0, 0), HelloLane(1, 1)}));
  ASSERT_TRUE(node.WaitGenerationStart(1));
  // Lane 0 says hello twice: its stream would end; here only its lane.
  ASSERT_TRUE(node.SendLanes({HelloLane(0, 0)}));
  v1::LaneEnd end;
  ASSERT_TRUE(node.WaitLaneEnd(0, &end));
  EXPECT_EQ(end.code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  EXPECT_NE(end.message().find("SessionHello sent twice"), std::string::npos) << end.message();
  // Bytes that are not a ClientMessage end lane 2 (a fresh id) the same way.
  v1::LaneUp junk;
  junk.set_lane(2);
  junk.set_message(std::string("\xff\xff\xff", 3));
  ASSERT_TRUE(node.SendLanes({junk}));
  ASSERT_TRUE(node.WaitLaneEnd(2, &end));
  EXPECT_EQ(end.code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  // A late message on lane 0 is not a new lane (ids only increase): no
  // second end, and the stream and lane 1 go on.
  ASSERT_TRUE(node.SendLanes({StatsLane(0, 0, 0), StatsLane(1, 1, 0)}));
  v1::Decision d;
  ASSERT_TRUE(node.WaitDecision(1, 0, &d, nullptr, std::chrono::seconds(10)));
  EXPECT_EQ(node.Ends(0).size(), 1u);
  EXPECT_FALSE(node.ended());
}

TEST_F(NodeSessionTest, LanesGnmrdEndedCountAgainstTheLaneBoundUntilTheRelayAnswers) {
  // gnmrd remembers each lane it ended until the relay's `end` for it, so
  // that the lane's late messages are not taken for a new lane; a relay
  // that never answers must not grow that memory without bound.
  StartDaemon();
  RegisterTwo();
  RawNode node(Tcp());
  const uint32_t bound = static_cast<uint32_t>(NodeSessionReactor::kMaxLanes);
  std::vector<v1::LaneUp> junk;
  for (uint32_t lane = 0; lane < bound; ++lane) {
    v1::LaneUp& up = junk.emplace_back();
    up.set_lane(lane);
    up.set_message(std::string("\xff", 1));  // not a ClientMessage: the lane ends
  }
  ASSERT_TRUE(node.SendLanes(junk));
  v1::LaneEnd end;
  ASSERT_TRUE(node.WaitLaneEnd(bound - 1, &end));
  ASSERT_TRUE(node.SendLanes({HelloLane(bound, 0)}));
  ASSERT_TRUE(node.WaitLaneEnd(bound, &end));
  EXPECT_EQ(end.code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED)) << end.message();
  // The relay answers one end: room for one lane again.
  v1::LaneUp answer;
  answer.set_lane(0);
  answer.set_end(true);
  ASSERT_TRUE(node.SendLanes({answer, HelloLane(bound + 1, 0)}));
  EXPECT_TRUE(node.WaitGenerationStart(bound + 1));
  EXPECT_FALSE(node.ended());
}

TEST_F(NodeSessionTest, ANodeMessageThatDoesNotParseEndsTheStreamNamingTheField) {
  // gnmrd reads a NodeClientMessage one LaneUp at a time (lane_reader.h):
  // a LaneUp that does not parse ends the stream as a whole parse did.
  StartDaemon();
  RegisterTwo();
  RawNode node(Tcp());
  v1::LaneUp bad = HelloLane(1, 1);
  bad.set_token(std::string("\xc3\x28", 2));  // not UTF-8
  ASSERT_TRUE(node.SendLanes({HelloLane(0, 0), bad}));
  const grpc::Status ended = node.WaitEnd();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << ended.error_message();
  EXPECT_NE(ended.error_message().find("gnmr.v1.LaneUp.token is not valid UTF-8"),
            std::string::npos)
      << ended.error_message();
  EXPECT_NE(ended.error_message().find("lane 1 of a NodeClientMessage"), std::string::npos)
      << ended.error_message();
}

TEST_F(NodeSessionTest, EachLaneShowsItsOwnToken) {
  StartDaemon();
  RegisterTwo("secret");  // the job's token, set by its first Register
  RawNode node(Tcp());
  ASSERT_TRUE(node.SendLanes({HelloLane(0, 0, "wrong"), HelloLane(1, 1, "secret")}));
  v1::LaneEnd end;
  ASSERT_TRUE(node.WaitLaneEnd(0, &end));
  EXPECT_EQ(end.code(), static_cast<int>(grpc::StatusCode::UNAUTHENTICATED)) << end.message();
  ASSERT_TRUE(node.WaitGenerationStart(1));
  EXPECT_EQ(node.GenerationStarts(0), 0);
}

TEST_F(NodeSessionTest, ALaneReplacedByTheRanksOwnStreamEndsAborted) {
  StartDaemon();
  RegisterTwo();
  RawNode node(Tcp());
  ASSERT_TRUE(node.SendLanes({HelloLane(0, 0), HelloLane(1, 1)}));
  ASSERT_TRUE(node.WaitGenerationStart(0));
  ranks_[0]->Open();  // rank 0 attaches directly: the lane is replaced
  v1::LaneEnd end;
  ASSERT_TRUE(node.WaitLaneEnd(0, &end));
  EXPECT_EQ(end.code(), static_cast<int>(grpc::StatusCode::ABORTED)) << end.message();
  // The relay says the lane is gone; rank 0's own stream and lane 1 go on.
  v1::LaneUp gone;
  gone.set_lane(0);
  gone.set_end(true);
  ASSERT_TRUE(node.SendLanes({gone, StatsLane(1, 1, 0)}));
  ASSERT_TRUE(ranks_[0]->SendStats(0, {4.0, 1.0}));
  v1::Decision direct, lane;
  ASSERT_TRUE(ranks_[0]->WaitDecision(0, &direct));
  ASSERT_TRUE(node.WaitDecision(1, 0, &lane));
  EXPECT_EQ(direct.digest(), lane.digest());
}

TEST_F(NodeSessionTest, WhenTheStreamEndsItsRanksAreDetached) {
  StartDaemon();
  RegisterTwo();
  auto node = std::make_unique<RawNode>(Tcp());
  ASSERT_TRUE(node->SendLanes({HelloLane(0, 0), HelloLane(1, 1)}));
  ASSERT_TRUE(node->WaitGenerationStart(1));
  std::shared_ptr<Job> job = daemon_->registry().Find("j").value();
  EXPECT_EQ(job->connected_sessions(), 2u);
  node.reset();  // the relay's stream is cancelled
  for (int i = 0; i < 100 && job->connected_sessions() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(job->connected_sessions(), 0u);
}

}  // namespace
}  // namespace gnmr::testing
