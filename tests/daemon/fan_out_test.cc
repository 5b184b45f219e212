// FanOut (daemon/job/fan_out.h) and a job's broadcast through it.
#include "daemon/job/fan_out.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/job/job.h"
#include "tests/daemon/quiet_listener.h"

namespace gnmr {
namespace {

TEST(FanOut, EveryItemIsDoneOnceInRangesOfTheGrain) {
  FanOut pool(3);
  EXPECT_EQ(pool.helpers(), 3);
  for (size_t n : {0u, 1u, 7u, 256u, 1000u, 4099u}) {
    std::vector<std::atomic<int>> done(n);
    std::atomic<bool> bad_range{false};
    pool.Run(n, 64, [&](size_t begin, size_t end) {
      if (begin % 64 != 0 || end - begin > 64 || end > n) bad_range = true;
      for (size_t i = begin; i < end; ++i) done[i]++;
    });
    EXPECT_FALSE(bad_range) << n;
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(done[i].load(), 1) << "item " << i << " of " << n;
  }
  EXPECT_EQ(pool.exceptions(), 0u);
}

// The caller blocks in its first range until another thread takes the
// second: only a helper can, so this fails (after the hang detector's 30 s)
// if the helpers never share the work.
TEST(FanOut, HelpersTakeRangesWhileTheCallerWorks) {
  FanOut pool(1);
  std::mutex mu;
  std::condition_variable cv;
  bool second_taken = false;
  bool timed_out = false;
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> helper_ran{false};
  pool.Run(2, 1, [&](size_t begin, size_t) {
    if (std::this_thread::get_id() != caller) helper_ran = true;
    std::unique_lock<std::mutex> lock(mu);
    if (begin == 1) {
      second_taken = true;
      cv.notify_all();
      return;
    }
    timed_out = !cv.wait_for(lock, std::chrono::seconds(30), [&] { return second_taken; });
  });
  EXPECT_FALSE(timed_out);
  EXPECT_TRUE(helper_ran);
  EXPECT_GE(pool.ranges_by_helpers(), 1u);
}

TEST(FanOut, WithoutHelpersTheCallerDoesItAll) {
  FanOut pool(0);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> elsewhere{0};
  std::atomic<size_t> items{0};
  pool.Run(1000, 10, [&](size_t begin, size_t end) {
    if (std::this_thread::get_id() != caller) elsewhere++;
    items += end - begin;
  });
  EXPECT_EQ(items.load(), 1000u);
  EXPECT_EQ(elsewhere.load(), 0);
}

// A range that throws is counted (and logged) instead of ending gnmrd;
// the pool keeps working.
TEST(FanOut, AThrowingRangeIsCountedAndThePoolGoesOn) {
  FanOut pool(2);
  pool.Run(100, 10, [](size_t begin, size_t) {
    if (begin == 50) throw std::runtime_error("boom");
  });
  EXPECT_EQ(pool.exceptions(), 1u);
  std::atomic<size_t> items{0};
  pool.Run(100, 10, [&](size_t begin, size_t end) { items += end - begin; });
  EXPECT_EQ(items.load(), 100u);
}

// Two broadcasts at once (two jobs deciding on two threads): the second
// does its own work while the first holds the helpers; both complete.
TEST(FanOut, ConcurrentCallersBothComplete) {
  FanOut pool(2);
  std::atomic<size_t> a{0}, b{0};
  std::thread other([&] {
    for (int i = 0; i < 200; ++i) pool.Run(512, 16, [&](size_t s, size_t e) { a += e - s; });
  });
  for (int i = 0; i < 200; ++i) pool.Run(512, 16, [&](size_t s, size_t e) { b += e - s; });
  other.join();
  EXPECT_EQ(a.load(), 200u * 512);
  EXPECT_EQ(b.load(), 200u * 512);
}

// Counts what it is sent and flushed; a flush sees every message sent
// before it (what a relay stream's write relies on).
class CountingSink : public DecisionSink {
 public:
  void SendDecision(std::shared_ptr<const WireMessage>) override { ++sent; }
  void Flush() override {
    ++flushes;
    if (flushes.load() > sent.load()) flushed_before_sent = true;
  }
  void Close(const Status&) override {}
  std::atomic<int> sent{0};
  std::atomic<int> flushes{0};
  std::atomic<bool> flushed_before_sent{false};
};

// A job with more streams than RankSessions::kFanOutAtSinks broadcasts each
// decision through its FanOut: every stream gets each decision once, then a
// flush.
TEST(FanOut, AJobsBroadcastToManyStreamsReachesEachStreamOnce) {
  constexpr uint32_t kRanks = 1200;  // > RankSessions::kFanOutAtSinks
  testing::QuietListener listener;
  JobOptions options;
  options.fan_out = std::make_shared<FanOut>(2);
  StatusOr<std::unique_ptr<Job>> created =
      Job::Create("job", kRanks, "", ControllerConfig{}, options, &listener);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Job& job = **created;
  std::vector<uint64_t> session(kRanks);
  std::vector<std::shared_ptr<CountingSink>> sinks(kRanks);
  for (uint32_t r = 0; r < kRanks; ++r) {
    v1::RegisterRequest req;
    req.set_job_id("job");
    req.set_rank(r);
    req.set_world_size(kRanks);
    v1::UnitSpec* u = req.add_units();
    u->set_name("w");
    u->set_numel(10);
    StatusOr<RegisterResult> reg = job.Register(req);
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    session[r] = reg->session_id;
    sinks[r] = std::make_shared<CountingSink>();
    ASSERT_TRUE(job.Attach(r, session[r], sinks[r]).ok());
  }
  // What attaching sent (a generation's start) is not counted.
  std::vector<int> sent_before(kRanks), flushes_before(kRanks);
  for (uint32_t r = 0; r < kRanks; ++r) {
    sent_before[r] = sinks[r]->sent.load();
    flushes_before[r] = sinks[r]->flushes.load();
  }
  for (int64_t step = 0; step < 3; ++step) {
    for (uint32_t r = 0; r < kRanks; ++r) {  // none can stand by: all report
      v1::StepStats s;
      s.set_step(step);
      s.add_unit_id(0);
      s.add_sumsq(1.0);
      ASSERT_TRUE(job.OnStats(r, session[r], s, 0, Job::Clock::now()).ok());
    }
  }
  for (uint32_t r = 0; r < kRanks; ++r) {
    ASSERT_EQ(sinks[r]->sent.load() - sent_before[r], 3) << "rank " << r;
    ASSERT_EQ(sinks[r]->flushes.load() - flushes_before[r], 3) << "rank " << r;
    ASSERT_FALSE(sinks[r]->flushed_before_sent.load()) << "rank " << r;
  }
  EXPECT_EQ(options.fan_out->runs(), 3u);  // the three decisions, not the attaches
  EXPECT_EQ(options.fan_out->exceptions(), 0u);
}

}  // namespace
}  // namespace gnmr
