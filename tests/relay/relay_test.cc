// gnmr-relay between real ranks (raw gRPC clients) and a real gnmrd, all
// over Unix sockets (docs/relay.md): ranks behind the relay get the same
// decisions as ranks attached directly, Register and the checkpoint calls
// pass through unchanged, other calls are refused by name, and when gnmrd
// goes away the ranks' streams end and come back through a new stream.
#include "tests/relay/relay_harness.h"

namespace gnmr::testing {
namespace {

TEST_F(RelayTest, RanksBehindTheRelayGetTheSameDecisionsAsRanksAttachedDirectly) {
  RawRank* r0 = AddRank(0, 4, true);
  RawRank* r1 = AddRank(1, 4, true);
  RawRank* r2 = AddRank(2, 4, false);
  RawRank* r3 = AddRank(3, 4, false);
  ASSERT_TRUE(WaitConnected(4));
  for (int64_t step = 0; step < 4; ++step) {
    // A spike at step 3 so that some decision admits a unit.
    const double a = step == 3 ? 400.0 : 4.0;
    for (RawRank* r : {r0, r1, r2, r3}) ASSERT_TRUE(r->SendStats(step, {a, 1.0}));
    v1::Decision first;
    for (RawRank* r : {r0, r1, r2, r3}) {
      v1::Decision d;
      ASSERT_TRUE(r->WaitDecision(step, &d)) << "step " << step;
      if (r == r0) first = d;
      EXPECT_EQ(d.digest(), first.digest()) << "step " << step;
      EXPECT_EQ(d.sequence(), first.sequence());
    }
  }
  EXPECT_EQ(listener_.by_deadline.load(), 0u);   // every rank's report arrived
  EXPECT_EQ(relay_->node_streams_opened(), 1u);  // both relayed ranks on one stream
}

TEST_F(RelayTest, RegisterAndCheckpointCallsPassThroughAndOtherCallsAreRefusedByName) {
  // A bad Register: the same precise answer through the relay as directly.
  v1::RegisterRequest bad;
  bad.set_job_id("j");
  bad.set_rank(5);
  bad.set_world_size(2);
  RawRank via_relay(Relay(), "j", 5, 2), direct(Tcp(), "j", 5, 2);
  const grpc::Status relayed = via_relay.RegisterRaw(bad);
  const grpc::Status plain = direct.RegisterRaw(bad);
  EXPECT_EQ(relayed.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(relayed.error_code(), plain.error_code());
  EXPECT_EQ(relayed.error_message(), plain.error_message());

  AddRank(0, 1, true);
  grpc::ClientContext export_ctx;
  v1::ExportStateRequest req;
  req.set_job_id("j");
  v1::ExportStateResponse state;
  EXPECT_TRUE(v1::Admin::NewStub(Relay())->ExportState(&export_ctx, req, &state).ok());
  EXPECT_EQ(state.state().units_size(), 2);

  grpc::ClientContext list_ctx;
  v1::ListJobsResponse jobs;
  const grpc::Status refused = v1::Admin::NewStub(Relay())->ListJobs(&list_ctx, {}, &jobs);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_NE(refused.error_message().find("ask gnmrd"), std::string::npos)
      << refused.error_message();
}

TEST_F(RelayTest, TheRelayListensOnAUnixSocketOnly) {
  // Its upstream may be gnmrd's trusted Unix socket: a TCP listener would
  // pass that trust on to anyone who can reach the node.
  relay::RelayOptions options;
  options.listen = "127.0.0.1:0";
  options.upstream = "unix:" + gnmrd_socket_;
  auto refused = relay::RelayServer::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("Unix socket"), std::string::npos)
      << refused.status().ToString();
  // A second relay on the first one's socket is refused; the first goes on.
  options.listen = "unix:" + relay_socket_;
  auto second = relay::RelayServer::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("another process is listening"), std::string::npos)
      << second.status().ToString();
  AddRank(0, 1, true);
  EXPECT_TRUE(WaitConnected(1));
}

TEST_F(RelayTest, ARankThatLeavesTheRelayIsDetachedAtGnmrdAndTheOthersStay) {
  RawRank* r0 = AddRank(0, 2, true);
  RawRank* r1 = AddRank(1, 2, true);
  ASSERT_TRUE(WaitConnected(2));
  r0->Close();
  EXPECT_TRUE(WaitConnected(1));
  ASSERT_TRUE(r1->SendStats(0, {4.0, 1.0}));
  v1::Decision d;  // closed at its deadline without rank 0, still sent to rank 1
  EXPECT_TRUE(r1->WaitDecision(0, &d));
}

TEST_F(RelayTest, WhenGnmrdStopsTheRanksStreamsEndAndComeBackThroughANewStream) {
  RawRank* r0 = AddRank(0, 1, true);
  ASSERT_TRUE(WaitConnected(1));
  daemon_->Shutdown(std::chrono::milliseconds(100));
  const grpc::Status ended = r0->WaitEnd();
  EXPECT_FALSE(ended.ok());
  EXPECT_NE(ended.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << ended.error_message();

  StartGnmrd();  // a new gnmrd at the same address (no state: the job anew)
  ranks_.clear();
  RawRank* again = AddRank(0, 1, true);
  ASSERT_TRUE(WaitConnected(1));
  ASSERT_TRUE(again->SendStats(0, {4.0, 1.0}));
  v1::Decision d;
  EXPECT_TRUE(again->WaitDecision(0, &d));
  EXPECT_EQ(relay_->node_streams_opened(), 2u);
}

}  // namespace
}  // namespace gnmr::testing
