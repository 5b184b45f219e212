// Job-level tests of issue 12's limits: one job cannot hold up the others'
// listing, how far a step may jump ahead, the operator's rewind.
#include <chrono>
#include <condition_variable>
#include <future>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/job/job.h"
#include "tests/testing/manual_clock.h"

namespace gnmr::testing {
namespace {

using Clock = Job::Clock;

// A listener that does nothing, except optionally hold a decision (called
// under the job's lock) until the test lets it go.
class HoldingListener : public JobListener {
 public:
  void OnJobStarted(const std::string&, uint32_t, const Controller&) override {}
  void OnReport(const std::string&, uint32_t, size_t, const v1::ClientOverhead&) override {}
  void OnLateReport(const std::string&, uint32_t) override { late++; }
  void OnDecision(const std::string&, const StepAggregator::ClosedStep& step, const Decision&,
                  const Controller&, const StepTiming&) override {
    std::unique_lock<std::mutex> lock(mu);
    decided.push_back(step.step);
    if (!hold) return;
    holding = true;
    cv.notify_all();
    cv.wait(lock, [this] { return !hold; });
    holding = false;
  }
  void OnEvents(const std::string&, const std::vector<v1::Event>& events) override {
    std::lock_guard<std::mutex> lock(mu);
    for (const v1::Event& e : events) this->events.push_back(e);
  }
  void OnControllerChanged(const std::string&, const Controller&) override {}
  void OnAckMismatch(const std::string&, const AckMismatch&) override {}
  void OnDecisionFailed(const std::string&) override {}
  void OnSessions(const std::string&, uint32_t) override {}
  void OnSnapshot(const std::string&, v1::ControllerState, const v1::JobMeta&) override {}

  void Release() {
    std::lock_guard<std::mutex> lock(mu);
    hold = false;
    cv.notify_all();
  }

  std::mutex mu;
  std::condition_variable cv;
  bool hold = false;
  bool holding = false;
  std::vector<int64_t> decided;
  std::vector<v1::Event> events;
  std::atomic<int> late{0};
};

v1::RegisterRequest RegisterOf(uint32_t rank, uint32_t world, int units) {
  v1::RegisterRequest req;
  req.set_job_id("job");
  req.set_rank(rank);
  req.set_world_size(world);
  req.set_client_version("test");
  for (int u = 0; u < units; ++u) {
    v1::UnitSpec* s = req.add_units();
    s->set_name("u" + std::to_string(u));
    s->set_numel(10);
  }
  return req;
}

v1::StepStats StatsOf(int64_t step, int units) {
  v1::StepStats s;
  s.set_step(step);
  for (int u = 0; u < units; ++u) {
    s.add_unit_id(static_cast<uint32_t>(u));
    s.add_sumsq(1.0);
  }
  return s;
}

std::unique_ptr<Job> MakeJob(JobListener* listener, uint32_t world = 1, JobOptions options = {}) {
  StatusOr<std::unique_ptr<Job>> job =
      Job::Create("job", world, "", ControllerConfig{}, options, listener);
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  return std::move(job).value();
}

TEST(JobInfo, ListingDoesNotWaitForALongDecision) {
  HoldingListener listener;
  std::unique_ptr<Job> job = MakeJob(&listener);
  StatusOr<RegisterResult> r = job->Register(RegisterOf(0, 1, 3));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(job->OnStats(0, r->session_id, StatsOf(0, 3), 0, Clock::now()).ok());
  EXPECT_EQ(job->Info(Clock::now()).last_step(), 0);  // a free job: current
  listener.hold = true;
  // Step 1 closes at once (one rank) and its decision is held, under the
  // job's lock, until Release().
  std::thread decider(
      [&] { EXPECT_TRUE(job->OnStats(0, r->session_id, StatsOf(1, 3), 0, Clock::now()).ok()); });
  {
    std::unique_lock<std::mutex> lock(listener.mu);
    listener.cv.wait(lock, [&] { return listener.holding; });
  }
  std::future<v1::JobInfo> info =
      std::async(std::launch::async, [&] { return job->Info(Clock::now()); });
  // Not a timing bound: a hang detector. Before the fix Info() waited for
  // the decision, i.e. forever here.
  const bool answered = info.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  listener.Release();
  decider.join();
  ASSERT_TRUE(answered) << "Info() waited for the job's decision";
  const v1::JobInfo view = info.get();
  EXPECT_EQ(view.job_id(), "job");
  EXPECT_EQ(view.units(), 3u);
  EXPECT_EQ(view.last_step(), 0);  // the last view, from before the held decision
  ASSERT_EQ(view.ranks_size(), 1);
  // Once the job is free again, Info() is current.
  EXPECT_EQ(job->Info(Clock::now()).last_step(), 1);
  // A listing's shared patience already spent: a free job is still asked
  // once (current), a busy one answers its last view at once.
  const auto spent = std::chrono::steady_clock::now();
  EXPECT_EQ(job->Info(Clock::now(), spent).last_step(), 1);
}

// Info()'s patience with a busy job runs on the job's clock, not on the
// machine's: while that clock stands still Info() waits for the lock,
// however long the machine takes; once the clock reaches the listing's
// `give_up` it answers the last view.
TEST(JobInfo, PatienceWithABusyJobRunsOnTheJobsClock) {
  ManualClock clock;
  JobOptions options;
  options.clock = &clock;
  HoldingListener listener;
  std::unique_ptr<Job> job = MakeJob(&listener, 1, options);
  StatusOr<RegisterResult> r = job->Register(RegisterOf(0, 1, 3));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(job->OnStats(0, r->session_id, StatsOf(0, 3), 0, clock.Now()).ok());
  EXPECT_EQ(job->Info(clock.Now()).last_step(), 0);  // free: current, and the view kept
  listener.hold = true;
  std::thread decider(
      [&] { EXPECT_TRUE(job->OnStats(0, r->session_id, StatsOf(1, 3), 0, clock.Now()).ok()); });
  {
    std::unique_lock<std::mutex> lock(listener.mu);
    listener.cv.wait(lock, [&] { return listener.holding; });
  }
  // The give_up is fixed here, so moving the clock below cannot race the
  // call's start.
  const Clock::time_point give_up = clock.Now() + Job::kInfoPatience;
  std::future<v1::JobInfo> info =
      std::async(std::launch::async, [&] { return job->Info(clock.Now(), give_up); });
  // Far past 50 ms of real time, but not of the job's: still waiting.
  EXPECT_EQ(info.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  clock.Advance(Job::kInfoPatience - std::chrono::nanoseconds(1));
  EXPECT_EQ(info.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  clock.Advance(std::chrono::nanoseconds(1));
  // Not a timing bound: a hang detector.
  const bool answered = info.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  listener.Release();
  decider.join();
  ASSERT_TRUE(answered) << "Info() kept waiting after the job's clock passed its patience";
  EXPECT_EQ(info.get().last_step(), 0);  // the last view, from before the held decision
  EXPECT_EQ(job->Info(clock.Now()).last_step(), 1);
}

// CI once saw ListJobs show a registered job with 0 units and 0 ranks: a
// tick held the lock, and the view was the one published when the job was
// created. A finished Register shows, however busy the job is afterwards.
TEST(JobInfo, AFinishedRegisterShowsWhileTheJobIsBusy) {
  HoldingListener listener;
  std::unique_ptr<Job> job = MakeJob(&listener);
  StatusOr<RegisterResult> r = job->Register(RegisterOf(0, 1, 3));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  listener.hold = true;
  // Step 0 closes at once (one rank); its decision is held under the job's
  // lock. Nothing called Info() since the Register.
  std::thread decider(
      [&] { EXPECT_TRUE(job->OnStats(0, r->session_id, StatsOf(0, 3), 0, Clock::now()).ok()); });
  {
    std::unique_lock<std::mutex> lock(listener.mu);
    listener.cv.wait(lock, [&] { return listener.holding; });
  }
  const v1::JobInfo view = job->Info(Clock::now());
  // The same with a listing's patience spent: no wait at all.
  const v1::JobInfo at_once = job->Info(Clock::now(), std::chrono::steady_clock::now());
  listener.Release();
  decider.join();
  EXPECT_EQ(view.units(), 3u);
  EXPECT_EQ(view.ranks_size(), 1);
  EXPECT_EQ(at_once.units(), 3u);
  EXPECT_EQ(at_once.ranks_size(), 1);
}

// A job with one rank and `units` units that decided steps [0, steps).
struct RunningJob {
  std::unique_ptr<Job> job;
  uint64_t session = 0;
  int units = 0;
  Status Report(int64_t step) {
    return job->OnStats(0, session, StatsOf(step, units), 0, Clock::now());
  }
};

RunningJob StartJob(JobListener* listener, int units, int64_t steps, JobOptions options = {}) {
  RunningJob r;
  r.job = MakeJob(listener, 1, options);
  r.units = units;
  StatusOr<RegisterResult> reg = r.job->Register(RegisterOf(0, 1, units));
  EXPECT_TRUE(reg.ok()) << reg.status().ToString();
  r.session = reg.ok() ? reg->session_id : 0;
  for (int64_t t = 0; t < steps; ++t) EXPECT_TRUE(r.Report(t).ok());
  return r;
}

// Issue 12, item 7: an imported state at the end of the step range used to
// be accepted; the job then dropped every report as late, for good.
TEST(JobImport, OutOfRangeStateIsRefusedAndTheJobKeepsDeciding) {
  HoldingListener listener;
  RunningJob r = StartJob(&listener, 3, 3);
  v1::ControllerState state = r.job->ExportState();
  state.set_last_step(std::numeric_limits<int64_t>::max());
  state.set_last_apply(std::numeric_limits<int64_t>::max());
  const Status s = r.job->ImportState(state);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("last_step"), std::string::npos) << s.message();
  ASSERT_TRUE(r.Report(3).ok());
  std::lock_guard<std::mutex> lock(listener.mu);
  EXPECT_EQ(listener.decided.back(), 3);
  EXPECT_EQ(listener.late, 0);
}

TEST(JobRestore, SnapshotWithALastClosedStepAtTheEndOfTheRangeIsRefused) {
  HoldingListener listener;
  RunningJob r = StartJob(&listener, 2, 2);
  v1::JobMeta meta;
  meta.set_job_id("job");
  meta.set_world_size(1);
  for (int u = 0; u < 2; ++u) {
    v1::UnitLayoutState* l = meta.add_units();
    l->set_name("u" + std::to_string(u));
    l->set_shard_count(1);
    l->add_shard_numel(10);
  }
  meta.set_generation(1);
  meta.set_last_closed_step(1);
  EXPECT_TRUE(Job::Restore(r.job->ExportState(), meta, {}, &listener).ok());
  meta.set_last_closed_step(std::numeric_limits<int64_t>::max());
  StatusOr<std::unique_ptr<Job>> bad = Job::Restore(r.job->ExportState(), meta, {}, &listener);
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss) << bad.status().ToString();
}

// ---- issue 12, item 8: what one Register (or SetConfig, ImportState) may
// allocate. Each refusal is RESOURCE_EXHAUSTED naming the key, and changes
// nothing.

void ExpectExhausted(const Status& s, const std::string& key) {
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find(key), std::string::npos) << s.ToString();
}

TEST(JobCaps, UnitsTimesWindowIsBounded) {
  HoldingListener listener;
  JobOptions options;
  options.caps.max_window_cells = 1000;
  ControllerConfig config;
  config.short_window = 100;
  StatusOr<std::unique_ptr<Job>> job = Job::Create("job", 1, "", config, options, &listener);
  ASSERT_TRUE(job.ok());
  ExpectExhausted((*job)->Register(RegisterOf(0, 1, 11)).status(), "max_window_cells_per_job");
  EXPECT_EQ((*job)->Info(Clock::now()).units(), 0u);  // nothing changed
  ASSERT_TRUE((*job)->Register(RegisterOf(0, 1, 10)).ok());
  config.short_window = 101;  // 10 units x 101 > 1000
  ExpectExhausted((*job)->SetConfig(config), "max_window_cells_per_job");
  EXPECT_EQ((*job)->config().short_window, 100);
}

TEST(JobCaps, MaxOIsBounded) {
  HoldingListener listener;
  JobOptions options;
  options.caps.max_o = 64;
  ControllerConfig config;
  config.max_o = 65;
  ExpectExhausted(Job::Create("job", 1, "", config, options, &listener).status(), "max_o_limit");
  config.max_o = 64;
  StatusOr<std::unique_ptr<Job>> job = Job::Create("job", 1, "", config, options, &listener);
  ASSERT_TRUE(job.ok());
  config.max_o = 1000000;
  ExpectExhausted((*job)->SetConfig(config), "max_o_limit");
  EXPECT_EQ((*job)->config().max_o, 64);
}

TEST(JobCaps, RanksTimesUnitsAndShardsAreBounded) {
  HoldingListener listener;
  JobOptions options;
  options.caps.max_rank_units = 26;
  options.caps.max_slots = 40;
  std::unique_ptr<Job> job = MakeJob(&listener, 4, options);
  ASSERT_TRUE(job->Register(RegisterOf(0, 4, 10)).ok());
  ASSERT_TRUE(job->Register(RegisterOf(1, 4, 10)).ok());
  ExpectExhausted(job->Register(RegisterOf(2, 4, 10)).status(), "max_rank_units_per_job");
  // Rank 2 was not registered by the refusal: a smaller set is not "a
  // different unit set" (FAILED_PRECONDITION), and fits (25 of 26).
  ASSERT_TRUE(job->Register(RegisterOf(2, 4, 5)).ok());
  // Shards: 10 units of 1 shard, then one unit of 31 shards is too many.
  v1::RegisterRequest sharded = RegisterOf(3, 4, 0);
  v1::UnitSpec* u = sharded.add_units();
  u->set_name("wide");
  u->set_shard_count(31);
  u->set_shard_index(3);
  ExpectExhausted(job->Register(sharded).status(), "max_slots_per_job");
  u->set_shard_count(30);
  EXPECT_TRUE(job->Register(sharded).ok());
  EXPECT_EQ(job->Info(Clock::now()).units(), 11u);
}

TEST(JobCaps, ImportedStateIsBoundedLikeARegister) {
  HoldingListener listener;
  JobOptions options;
  options.caps.max_window_cells = 40;
  RunningJob r = StartJob(&listener, 4, 2, options);  // 4 units x window 4
  v1::ControllerState state = r.job->ExportState();
  state.mutable_config()->set_short_window(11);
  ExpectExhausted(r.job->ImportState(state), "max_window_cells_per_job");
  EXPECT_EQ(r.job->config().short_window, 4);
}

TEST(MemoryBudget, JobsShareItAndGiveItBack) {
  HoldingListener listener;
  JobOptions options;
  options.budget = std::make_shared<MemoryBudget>(16u << 20);
  StatusOr<std::unique_ptr<Job>> a = Job::Create("a", 1, "", {}, options, &listener);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const uint64_t empty = options.budget->used();
  EXPECT_GT(empty, 0u);
  // 16 MiB hold a few thousand units (docs/limits.md), not 10,000.
  ExpectExhausted((*a)->Register(RegisterOf(0, 1, 10000)).status(), "memory_budget");
  EXPECT_EQ(options.budget->used(), empty);
  ASSERT_TRUE((*a)->Register(RegisterOf(0, 1, 1000)).ok());
  const uint64_t held = options.budget->used();
  EXPECT_GT(held, empty + 1000 * 1000);
  StatusOr<std::unique_ptr<Job>> b = Job::Create("b", 1, "", {}, options, &listener);
  ASSERT_TRUE(b.ok());
  // Not 2,000 more while a holds its 1,000 (~7 KB per unit with its open
  // steps' reports), but once a is gone.
  ExpectExhausted((*b)->Register(RegisterOf(0, 1, 2000)).status(), "memory_budget");
  a->reset();  // a deleted job gives its share back
  EXPECT_EQ(options.budget->used(), empty);
  EXPECT_TRUE((*b)->Register(RegisterOf(0, 1, 2000)).ok());
}

TEST(JobCaps, OpenStepsAreBoundedInBytes) {
  // Two ranks, one silent: every step stays open until the bytes of the
  // buffered reports pass max_open_bytes, then the oldest closes.
  HoldingListener listener;
  JobOptions options;
  options.aggregation.deadline = std::chrono::hours(1);
  options.aggregation.max_open_bytes = 4096;
  std::unique_ptr<Job> job = MakeJob(&listener, 2, options);
  StatusOr<RegisterResult> r0 = job->Register(RegisterOf(0, 2, 10));
  ASSERT_TRUE(job->Register(RegisterOf(1, 2, 10)).ok());
  ASSERT_TRUE(r0.ok());
  for (int64_t t = 0; t < 40; ++t) {
    ASSERT_TRUE(job->OnStats(0, r0->session_id, StatsOf(t, 10), 0, Clock::now()).ok());
  }
  // 10 units x 12 B = 120 B a report: 4096 B hold 34 steps.
  std::lock_guard<std::mutex> lock(listener.mu);
  ASSERT_FALSE(listener.decided.empty());
  EXPECT_EQ(listener.decided.front(), 0);
  EXPECT_EQ(listener.decided.size(), 40u - 34u);
}

// Above a few hundred ranks a registration no longer rebuilds the view at
// once (that made registering 16,384 ranks quadratic): the next operation
// after 100 ms does, so a busy job still lists every registered rank.
TEST(JobInfo, ManyRegistrationsShowWhileTheJobIsBusyAfterAMoment) {
  constexpr uint32_t kRanks = 300;
  ManualClock clock;  // the 100 ms pass when the test says so
  JobOptions options;
  options.clock = &clock;
  HoldingListener listener;
  std::unique_ptr<Job> job = MakeJob(&listener, kRanks, options);
  std::vector<uint64_t> session(kRanks);
  for (uint32_t r = 0; r < kRanks; ++r) {
    StatusOr<RegisterResult> reg = job->Register(RegisterOf(r, kRanks, 2));
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    session[r] = reg->session_id;
  }
  clock.Advance(std::chrono::milliseconds(150));
  for (uint32_t r = 0; r + 1 < kRanks; ++r) {
    ASSERT_TRUE(job->OnStats(r, session[r], StatsOf(0, 2), 0, clock.Now()).ok());
  }
  listener.hold = true;
  std::thread decider([&] {
    EXPECT_TRUE(job->OnStats(kRanks - 1, session[kRanks - 1], StatsOf(0, 2), 0, clock.Now()).ok());
  });
  {
    std::unique_lock<std::mutex> lock(listener.mu);
    listener.cv.wait(lock, [&] { return listener.holding; });
  }
  const v1::JobInfo at_once = job->Info(clock.Now(), clock.Now());
  listener.Release();
  decider.join();
  EXPECT_EQ(at_once.ranks_size(), static_cast<int>(kRanks));
}

// A standby reports nothing: its acks give its last step and last seen
// (gnmrctl jobs, top), bounded as a report's step is.
TEST(JobInfo, AcksGiveARankItsLastStep) {
  HoldingListener listener;
  JobOptions options;
  options.aggregation.max_step_jump = 100;
  std::unique_ptr<Job> job = MakeJob(&listener, 2, options);
  StatusOr<RegisterResult> r0 = job->Register(RegisterOf(0, 2, 2));
  StatusOr<RegisterResult> r1 = job->Register(RegisterOf(1, 2, 2));
  ASSERT_TRUE(r0.ok() && r1.ok());
  // Both report step 0 (it closes); then only rank 1 acks steps 1 and 2.
  ASSERT_TRUE(job->OnStats(0, r0->session_id, StatsOf(0, 2), 0, Clock::now()).ok());
  ASSERT_TRUE(job->OnStats(1, r1->session_id, StatsOf(0, 2), 0, Clock::now()).ok());
  v1::Ack ack;
  ack.set_has_decision(false);
  for (int64_t step : {1, 2}) {
    ack.set_step(step);
    ASSERT_TRUE(job->OnAck(1, r1->session_id, ack).ok());
  }
  // A step further ahead than a report may jump is not taken.
  ack.set_step(1000);
  ASSERT_TRUE(job->OnAck(1, r1->session_id, ack).ok());
  const v1::JobInfo info = job->Info(Clock::now());
  ASSERT_EQ(info.ranks_size(), 2);
  EXPECT_EQ(info.ranks(0).last_step(), 0);
  EXPECT_EQ(info.ranks(0).lag_steps(), 2);
  EXPECT_EQ(info.ranks(1).last_step(), 2);
  EXPECT_EQ(info.ranks(1).lag_steps(), 0);
  EXPECT_LT(info.ranks(1).last_seen_seconds_ago(), 5.0);
}

// A sink that only counts what it was sent and whether it was closed.
class CountingSink : public DecisionSink {
 public:
  void SendDecision(std::shared_ptr<const WireMessage>) override { ++sent; }
  void Close(const Status&) override { closed = true; }
  int sent = 0;
  bool closed = false;
};

// The job keeps its count of attached streams (it no longer counts them at
// each attach and detach): every way a stream comes or goes moves it.
TEST(JobSessions, ConnectedCountFollowsEveryWayAStreamComesAndGoes) {
  HoldingListener listener;
  std::unique_ptr<Job> job = MakeJob(&listener, 3);
  std::vector<uint64_t> session(3);
  std::vector<std::shared_ptr<CountingSink>> sink(3);
  for (uint32_t r = 0; r < 3; ++r) {
    StatusOr<RegisterResult> reg = job->Register(RegisterOf(r, 3, 2));
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    session[r] = reg->session_id;
    sink[r] = std::make_shared<CountingSink>();
    ASSERT_TRUE(job->Attach(r, session[r], sink[r]).ok());
  }
  EXPECT_EQ(job->connected_sessions(), 3u);
  EXPECT_EQ(job->Info(Clock::now()).ranks_size(), 3);
  // A second stream of rank 0 replaces the first: still 3.
  auto again = std::make_shared<CountingSink>();
  ASSERT_TRUE(job->Attach(0, session[0], again).ok());
  EXPECT_TRUE(sink[0]->closed);
  EXPECT_EQ(job->connected_sessions(), 3u);
  // The replaced stream's detach changes nothing; the current one's does.
  job->Detach(0, session[0], sink[0].get());
  EXPECT_EQ(job->connected_sessions(), 3u);
  job->Detach(0, session[0], again.get());
  EXPECT_EQ(job->connected_sessions(), 2u);
  // Registering again closes the rank's stream (a new session).
  ASSERT_TRUE(job->Register(RegisterOf(1, 3, 2)).ok());
  EXPECT_TRUE(sink[1]->closed);
  EXPECT_EQ(job->connected_sessions(), 1u);
  // Closing the job ends the last one.
  EXPECT_EQ(job->Close(Status::Ok()), 1u);
  EXPECT_EQ(job->connected_sessions(), 0u);
}

}  // namespace
}  // namespace gnmr::testing
