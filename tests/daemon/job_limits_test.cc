// Job-level tests of issue 12's limits: one job cannot hold up the others'
// listing, how far a step may jump ahead, the operator's rewind.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <limits>
#include <mutex>
#include <string>
#include <thread>

#include "daemon/job/job.h"

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
  void OnSnapshot(const std::string&, const v1::ControllerState&, const v1::JobMeta&) override {}

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
}  // namespace
}  // namespace gnmr::testing
