// LogLimiter: one line per key and interval, the rest counted; a bounded
// table that a peer inventing keys cannot grow or use to escape the limit.
#include "common/log_limiter.h"

#include <string>

#include <gtest/gtest.h>

namespace gnmr {
namespace {

using std::chrono::seconds;

TEST(LogLimiterTest, OneLinePerKeyAndIntervalThenTheCountHeldBack) {
  LogLimiter limiter(seconds(10));
  const LogLimiter::Clock::time_point t0{};
  uint64_t held = 99;
  ASSERT_TRUE(limiter.Allow("job-a|UNAUTHENTICATED", t0, &held));
  EXPECT_EQ(held, 0u);
  for (int i = 1; i <= 500; ++i) {
    EXPECT_FALSE(limiter.Allow("job-a|UNAUTHENTICATED", t0 + std::chrono::milliseconds(i), &held));
  }
  // Another key is independent.
  EXPECT_TRUE(limiter.Allow("job-b|UNAUTHENTICATED", t0 + seconds(1), &held));
  EXPECT_EQ(held, 0u);
  ASSERT_TRUE(limiter.Allow("job-a|UNAUTHENTICATED", t0 + seconds(10), &held));
  EXPECT_EQ(held, 500u);
  EXPECT_FALSE(limiter.Allow("job-a|UNAUTHENTICATED", t0 + seconds(11), &held));
  ASSERT_TRUE(limiter.Allow("job-a|UNAUTHENTICATED", t0 + seconds(25), &held));
  EXPECT_EQ(held, 1u);
}

TEST(LogLimiterTest, InventedKeysShareOneOverflowEntry) {
  LogLimiter limiter(seconds(10), /*max_keys=*/4);
  const LogLimiter::Clock::time_point t0{};
  uint64_t held = 0;
  int allowed = 0;
  for (int i = 0; i < 1000; ++i) {
    if (limiter.Allow("junk-" + std::to_string(i), t0, &held)) allowed++;
  }
  // Four keys of their own, then one line for all the others together.
  EXPECT_EQ(allowed, 5);
  // Once the interval passed, held-back-free keys make room again.
  EXPECT_TRUE(limiter.Allow("fresh", t0 + seconds(10), &held));
  EXPECT_EQ(held, 0u);
}

}  // namespace
}  // namespace gnmr
