// How the relay numbers its lanes, against a real gnmrd (docs/relay.md,
// "Lane ids"): a rank is attached whatever the order in which the ranks of
// a node open their streams and say hello.
#include "tests/relay/relay_harness.h"
#include "tests/testing/eventually.h"

namespace gnmr::testing {
namespace {

TEST_F(RelayTest, ARankThatSaysHelloAfterALaterOpenedRankIsAttached) {
  RawRank* a = RegisterRank(0, 2, true);
  RawRank* b = RegisterRank(1, 2, true);
  // A's stream opens first, B's second; B says hello first. The relay used
  // to number A's lane when its stream opened, and gnmrd, having seen B's
  // higher id first, dropped A's hello as a late message of an ended lane:
  // A was never attached, and nobody said so.
  a->Open(0, /*hello=*/false);
  ASSERT_TRUE(Eventually([&] { return relay_->sessions_opened() == 1; }));  // A's first
  b->Open(0, /*hello=*/false);
  ASSERT_TRUE(Eventually([&] { return relay_->sessions_opened() == 2; }));
  ASSERT_TRUE(b->SendHello());
  ASSERT_TRUE(b->WaitMessages(1)) << "B got no GenerationStart";
  ASSERT_TRUE(a->SendHello());
  EXPECT_TRUE(a->WaitMessages(1)) << "A got no GenerationStart";
  ASSERT_TRUE(WaitConnected(2)) << Connected() << " of 2 ranks attached";
  for (int64_t step = 0; step < 2; ++step) {
    for (RawRank* r : {a, b}) ASSERT_TRUE(r->SendStats(step, {4.0, 1.0}));
    v1::Decision da, db;
    ASSERT_TRUE(a->WaitDecision(step, &da)) << "step " << step;
    ASSERT_TRUE(b->WaitDecision(step, &db)) << "step " << step;
    EXPECT_EQ(da.digest(), db.digest());
  }
  EXPECT_EQ(listener_.by_deadline.load(), 0u);  // A's reports arrived too
}

TEST_F(RelayTest, AStreamThatEndsBeforeItsFirstMessageSendsNothingUp) {
  // Opened and closed without a word: gnmrd never hears of the lane, and
  // the ranks that come after it are attached as usual.
  RawRank* silent = RegisterRank(0, 2, true);
  silent->Open(0, /*hello=*/false);
  ASSERT_TRUE(Eventually([&] { return relay_->sessions_opened() == 1; }));
  silent->Close();
  RawRank* r1 = AddRank(1, 2, true);
  RawRank* r0 = AddRank(0, 2, true);
  ASSERT_TRUE(WaitConnected(2));
  for (RawRank* r : {r0, r1}) ASSERT_TRUE(r->SendStats(0, {4.0, 1.0}));
  v1::Decision d;
  EXPECT_TRUE(r0->WaitDecision(0, &d));
  EXPECT_TRUE(r1->WaitDecision(0, &d));
}

}  // namespace
}  // namespace gnmr::testing
