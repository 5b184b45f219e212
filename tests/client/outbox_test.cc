// The bounded report/ack queues between the training and I/O threads.
#include "client/src/outbox.h"

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace gnmr {
namespace {

void Put(Outbox& box, int64_t step) {
  Report* r = box.Acquire();
  ASSERT_NE(r, nullptr);
  r->step = step;
  box.Publish(r);
}

TEST(Outbox, DropsOldestReportAndCounts) {
  Outbox box(4, 3);
  Report* first = box.Acquire();
  EXPECT_EQ(first->sumsq.size(), 3u);  // one row per unit, preallocated
  EXPECT_EQ(first->zeros.size(), 3u);
  EXPECT_EQ(first->saturated.size(), 3u);
  box.Abandon(first);
  for (int64_t s = 0; s < 10; ++s) Put(box, s);  // never runs out of slots
  EXPECT_EQ(box.queued_reports(), 4u);
  EXPECT_EQ(box.reports_dropped(), 6u);
  Report* r = box.PopReport();
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->step, 6);              // the newest four survive
  EXPECT_EQ(r->dropped_reports, 3u);  // stamped when it was queued
  box.Release(r, /*sent=*/true);
  r = box.PopReport();
  box.Release(r, /*sent=*/false);  // lost with its stream
  EXPECT_EQ(box.reports_dropped(), 7u);
}

TEST(Outbox, SlotsSurviveAProducerRacingTheConsumer) {
  Outbox box(2, 1);
  Report* in_flight = nullptr;
  for (int64_t s = 0; s < 100; ++s) {
    Put(box, s);
    if (in_flight == nullptr) in_flight = box.PopReport();  // held by the sender
  }
  box.Release(in_flight, true);
  EXPECT_EQ(box.queued_reports(), 2u);
}

TEST(Outbox, DropUpToAndAbandon) {
  Outbox box(8, 1);
  for (int64_t s = 0; s < 5; ++s) Put(box, s);
  EXPECT_EQ(box.DropUpTo(2), 3u);
  EXPECT_EQ(box.PopReport()->step, 3);
  Report* r = box.Acquire();
  box.Abandon(r);
  EXPECT_EQ(box.reports_dropped(), 3u);
}

TEST(Outbox, AcksAreBoundedToo) {
  Outbox box(1, 1, /*ack_capacity=*/3);
  for (int64_t s = 0; s < 5; ++s) box.PushAck({s, static_cast<uint64_t>(s), 0});
  EXPECT_EQ(box.acks_dropped(), 2u);
  AckItem a;
  ASSERT_TRUE(box.PopAck(&a));
  EXPECT_EQ(a.step, 2);
  box.Clear();
  EXPECT_FALSE(box.WaitEmpty(std::chrono::milliseconds(1)));  // one in flight
  box.AckDone();
  EXPECT_TRUE(box.WaitEmpty(std::chrono::milliseconds(1)));
}

TEST(Outbox, WaitWakesOnWorkAndOnWake) {
  Outbox box(4, 1);
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    box.Wake();
  });
  const auto t0 = std::chrono::steady_clock::now();
  box.Wait(std::chrono::seconds(5));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  t.join();
  EXPECT_TRUE(box.WaitEmpty(std::chrono::milliseconds(1)));
  Put(box, 1);
  EXPECT_FALSE(box.WaitEmpty(std::chrono::milliseconds(1)));
  box.Clear();
  EXPECT_TRUE(box.WaitEmpty(std::chrono::milliseconds(1)));
}

}  // namespace
}  // namespace gnmr
