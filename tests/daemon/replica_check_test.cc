// ReplicaCheck (daemon/job/replica_check.h): a standby's fingerprint meets
// its reporter's, in either order, within the ring of recent steps.
#include "daemon/job/replica_check.h"

#include <gtest/gtest.h>

namespace gnmr {
namespace {

TEST(ReplicaCheckTest, ANoteAfterTheReportIsComparedOnArrival) {
  ReplicaCheck c;
  bool compared = true;
  EXPECT_FALSE(c.Reported(3, 0, 11, 0x111, &compared));
  EXPECT_FALSE(compared);
  EXPECT_FALSE(c.Noted(3, 4, 11, 0x111, &compared));
  EXPECT_TRUE(compared);
  std::optional<ReplicaCheck::Mismatch> m = c.Noted(3, 5, 11, 0x222, &compared);
  ASSERT_TRUE(m);
  EXPECT_TRUE(compared);
  EXPECT_EQ(m->group, 3u);
  EXPECT_EQ(m->step, 11);
  EXPECT_EQ(m->reporter, 0u);
  EXPECT_EQ(m->other, 5u);
}

TEST(ReplicaCheckTest, ANoteBeforeTheReportWaitsForIt) {
  ReplicaCheck c;
  bool compared = true;
  EXPECT_FALSE(c.Noted(0, 2, 5, 0x1, &compared));
  EXPECT_FALSE(compared);
  std::optional<ReplicaCheck::Mismatch> m = c.Reported(0, 1, 5, 0x9, &compared);
  EXPECT_TRUE(compared);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->reporter, 1u);
  EXPECT_EQ(m->other, 2u);
  // Once compared, the note is used up; a second report of the step (a
  // takeover) is compared with the first.
  m = c.Reported(0, 2, 5, 0x9, &compared);
  EXPECT_TRUE(compared);
  EXPECT_FALSE(m);
}

TEST(ReplicaCheckTest, StepsOlderThanTheRingAreIgnored) {
  ReplicaCheck c;
  bool compared = true;
  EXPECT_FALSE(c.Noted(0, 2, 100, 0x1, &compared));
  // Step 100 - kSteps shares the slot and is older: ignored, not compared.
  const int64_t old = 100 - static_cast<int64_t>(ReplicaCheck::kSteps);
  EXPECT_FALSE(c.Reported(0, 1, old, 0x5, &compared));
  EXPECT_FALSE(compared);
  EXPECT_FALSE(c.Noted(0, 2, old, 0x6, &compared));
  EXPECT_FALSE(compared);
  EXPECT_FALSE(c.Noted(0, 2, -1, 0x6, &compared));
  EXPECT_FALSE(compared);
  // A newer step takes the slot over.
  EXPECT_FALSE(c.Reported(0, 1, 100 + ReplicaCheck::kSteps, 0x7, &compared));
  EXPECT_FALSE(compared);
  EXPECT_FALSE(c.Noted(0, 2, 100 + ReplicaCheck::kSteps, 0x7, &compared));
  EXPECT_TRUE(compared);
}

TEST(ReplicaCheckTest, PausedChecksNothingUntilCleared) {
  ReplicaCheck c;
  bool compared = true;
  c.Pause();
  EXPECT_FALSE(c.Noted(0, 2, 1, 0x1, &compared));
  EXPECT_FALSE(c.Reported(0, 1, 1, 0x2, &compared));
  EXPECT_FALSE(compared);
  c.Clear();
  EXPECT_FALSE(c.Noted(0, 2, 1, 0x1, &compared));
  EXPECT_TRUE(c.Reported(0, 1, 1, 0x2, &compared));
  EXPECT_TRUE(compared);
}

}  // namespace
}  // namespace gnmr
