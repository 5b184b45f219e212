// A job restored from its snapshot decides nothing until its ranks are
// back, then decides past every step they reached (restore_hold.h,
// docs/safety.md "A restore holds until the ranks are back"). Driven on a
// Job alone with an injected clock: deterministic, no sleeping.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "controller/types/plan_coverage.h"
#include "daemon/job/job.h"
#include "tests/daemon/quiet_listener.h"
#include "tests/testing/manual_clock.h"

namespace gnmr::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kWorld = 2;
constexpr int kUnits = 2;

// Keeps the last snapshot and the events.
class SnapshotListener : public QuietListener {
 public:
  void OnSnapshot(const std::string&, v1::ControllerState state, const v1::JobMeta& meta) override {
    this->state = std::move(state);
    this->meta = meta;
  }
  void OnEvents(const std::string&, const std::vector<v1::Event>& events) override {
    for (const v1::Event& e : events) this->events.push_back(e);
  }
  v1::ControllerState state;
  v1::JobMeta meta;
  std::vector<v1::Event> events;
};

// What one rank's stream received.
class RecordingSink : public DecisionSink {
 public:
  void SendDecision(std::shared_ptr<const WireMessage> msg) override {
    if (msg->message->has_decision()) decisions.push_back(msg->message->decision());
  }
  void Close(const Status&) override {}
  std::vector<v1::Decision> decisions;
};

v1::RegisterRequest RegisterOf(uint32_t rank) {
  v1::RegisterRequest req;
  req.set_job_id("job");
  req.set_rank(rank);
  req.set_world_size(kWorld);
  req.set_client_version("test");
  for (int u = 0; u < kUnits; ++u) {
    v1::UnitSpec* s = req.add_units();
    s->set_name("u" + std::to_string(u));
    s->set_numel(10);
  }
  return req;
}

v1::StepStats StatsOf(int64_t step, double sumsq = 1.0) {
  v1::StepStats s;
  s.set_step(step);
  for (int u = 0; u < kUnits; ++u) {
    s.add_unit_id(static_cast<uint32_t>(u));
    s.add_sumsq(u == 1 ? sumsq : 1.0);
  }
  return s;
}

class RestoreHoldTest : public ::testing::Test {
 protected:
  RestoreHoldTest() {
    options_.clock = &clock_;
    options_.aggregation.deadline = 1s;
    options_.incarnation_silence = 10s;
    options_.snapshot_every_steps = 1000000;  // only when the test asks
  }

  struct Rank {
    uint64_t session = 0;
    std::shared_ptr<RecordingSink> sink;
  };

  // `held_through`: what the rank says it planned, or can plan, with the
  // decisions it holds (nullopt: an old client that does not say).
  Rank Join(Job& job, uint32_t rank, std::optional<int64_t> held_through = std::nullopt) {
    Rank r;
    v1::RegisterRequest req = RegisterOf(rank);
    if (held_through) {
      req.set_held_through(*held_through);
      req.set_says_held_through(true);
    }
    StatusOr<RegisterResult> reg = job.Register(req);
    EXPECT_TRUE(reg.ok()) << reg.status().ToString();
    if (!reg.ok()) return r;
    r.session = reg->session_id;
    r.sink = std::make_shared<RecordingSink>();
    EXPECT_TRUE(job.Attach(rank, r.session, r.sink).ok());
    return r;
  }

  void Report(Job& job, uint32_t rank, const Rank& r, int64_t step, double sumsq = 1.0) {
    const Status s = job.OnStats(rank, r.session, StatsOf(step, sumsq), 0, clock_.Now());
    EXPECT_TRUE(s.ok()) << "rank " << rank << " step " << step << ": " << s.ToString();
  }

  // Lets every open step reach its deadline.
  void PassDeadline(Job& job) {
    clock_.Advance(1500ms);
    job.Tick(clock_.Now());
  }

  // The old daemon: both ranks train to step 9, the job is snapshotted,
  // then rank 0 trains on to step 19 (a spike at 15 admits unit 1) while
  // rank 1 stops at step 12; steps 13-19 close by their deadlines. Returns
  // the newest step rank 0 can plan with the decisions it received.
  int64_t RunOldDaemon() {
    ControllerConfig config;
    config.warmup = 5;  // the spike at step 15 is judged
    std::unique_ptr<Job> job =
        std::move(Job::Create("job", kWorld, "", config, options_, &old_listener_)).value();
    Rank r0 = Join(*job, 0), r1 = Join(*job, 1);
    old_sinks_ = {r0.sink, r1.sink};
    for (int64_t step = 0; step <= 9; ++step) {
      Report(*job, 0, r0, step);
      Report(*job, 1, r1, step);
      clock_.Advance(10ms);
    }
    job->SnapshotNow();
    snapshot_state_ = old_listener_.state;
    snapshot_meta_ = old_listener_.meta;
    EXPECT_EQ(snapshot_meta_.last_closed_step(), 9);
    for (int64_t step = 10; step <= 19; ++step) {
      Report(*job, 0, r0, step, step == 15 ? 1e8 : 1.0);
      if (step <= 12) Report(*job, 1, r1, step);
      PassDeadline(*job);
    }
    int64_t planned = -1;
    bool admitted = false;
    for (const v1::Decision& d : r0.sink->decisions) {
      planned = std::max(planned, d.apply_step());
      admitted = admitted || d.recovery_size() > 0;
    }
    EXPECT_TRUE(admitted) << "the spike at step 15 should admit unit 1 before the crash";
    return planned;
  }

  // What the client library says for a sink's decisions
  // (DecisionCache::HeldThrough): the newest covers up to where the next
  // one would apply.
  static int64_t HeldThrough(const RecordingSink& sink) {
    int64_t through = -1;
    for (const v1::Decision& d : sink.decisions) {
      through =
          std::max(through, LastPlannableStep(d.observed_step(), d.apply_step(), d.next_lag()));
    }
    return through;
  }

  std::unique_ptr<Job> RestoreJob() {
    StatusOr<std::unique_ptr<Job>> job =
        Job::Restore(snapshot_state_, snapshot_meta_, options_, &listener_);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? std::move(job).value() : nullptr;
  }

  // The decisions of generation `generation` made after the restore (the
  // rebuilt one observed the snapshot's last step).
  static std::vector<v1::Decision> NewDecisions(const RecordingSink& sink, int64_t snapshot_step) {
    std::vector<v1::Decision> out;
    for (const v1::Decision& d : sink.decisions) {
      if (d.observed_step() > snapshot_step) out.push_back(d);
    }
    return out;
  }

  bool SaidHoldOver(const std::string& what) const {
    for (const v1::Event& e : listener_.events) {
      if (e.detail().find("restore hold over") != std::string::npos &&
          e.detail().find(what) != std::string::npos) {
        return true;
      }
    }
    return false;
  }

  ManualClock clock_;  // the jobs' time (options_.clock)
  JobOptions options_;
  SnapshotListener old_listener_;
  std::vector<std::shared_ptr<RecordingSink>> old_sinks_;  // the ranks' streams before the crash
  SnapshotListener listener_;
  v1::ControllerState snapshot_state_;
  v1::JobMeta snapshot_meta_;
};

// A restored job is idle since its snapshot's last activity, which goes to
// the snapshot as wall time and comes back through the same clock: moved by
// the test, a restored job's age (and so its idle expiry) needs no waiting.
TEST_F(RestoreHoldTest, ARestoredJobIsIdleSinceItsSnapshotOnTheJobsClock) {
  RunOldDaemon();  // snapshotted with both streams attached: active then
  clock_.Advance(30min);
  std::unique_ptr<Job> job = RestoreJob();
  ASSERT_NE(job, nullptr);
  // 30 min, and the ten deadlines (1.5 s each) the old daemon ran on after
  // its snapshot.
  const double idle = std::chrono::duration<double>(job->IdleFor(clock_.Now())).count();
  EXPECT_NEAR(idle, 30 * 60 + 10 * 1.5, 1e-3);
}

// relay_soak_short's split (issue 37), step by step: the stopped rank comes
// back first and catches up alone while its peer is still reconnecting.
// Both say what they hold (the client library does): the restored job
// decides from the first step past it.
TEST_F(RestoreHoldTest, ALaggingRankBackFirstGetsNoDecisionForStepsItsPeerPlanned) {
  RunOldDaemon();
  const int64_t held0 = HeldThrough(*old_sinks_[0]);
  const int64_t held1 = HeldThrough(*old_sinks_[1]);
  ASSERT_EQ(held0, 20);  // observed 19, next lag 1
  std::unique_ptr<Job> job = RestoreJob();
  ASSERT_NE(job, nullptr);
  Rank r1 = Join(*job, 1, held1);
  for (int64_t step = 13; step <= 25; ++step) {
    Report(*job, 1, r1, step);
    clock_.Advance(10ms);
    job->Tick(clock_.Now());
  }
  PassDeadline(*job);  // each of those steps has waited a whole deadline
  // Held: the steps rank 1 reported alone close by no deadline. (Before the
  // fix: decisions for steps 14-26 with an empty recovery set, while rank 0
  // had planned 16-20 with unit 1 in recovery.)
  EXPECT_TRUE(NewDecisions(*r1.sink, 9).empty());
  EXPECT_FALSE(SaidHoldOver(""));

  // Rank 0 is back: every rank known, the hold is over. Its first step is 20.
  Rank r0 = Join(*job, 0, held0);
  ASSERT_TRUE(SaidHoldOver("2 of 2 ranks known"));
  EXPECT_TRUE(SaidHoldOver("decides from step 20"));
  for (int64_t step = 20; step <= 28; ++step) {
    Report(*job, 0, r0, step);
    if (step > 25) Report(*job, 1, r1, step);  // rank 1's 20-25 were kept
    clock_.Advance(10ms);
    job->Tick(clock_.Now());
  }
  const std::vector<v1::Decision> after = NewDecisions(*r0.sink, 9);
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after.front().observed_step(), 20);
  EXPECT_EQ(after.size(), 9u);  // 20-28, each from both ranks' reports
  // The rebuilt decision (observed 9) covers no step of the gap: the first
  // decision after it skips a sequence number (client_plan.cc).
  const v1::Decision& rebuilt = r0.sink->decisions.front();
  ASSERT_EQ(rebuilt.observed_step(), 9);
  EXPECT_EQ(after.front().sequence(), rebuilt.sequence() + 2);
  EXPECT_EQ(after[1].sequence(), after.front().sequence() + 1);
  for (const v1::Decision& d : after) {
    EXPECT_GT(d.apply_step(), held0) << "a new decision for a step rank 0 planned";
  }
  const std::vector<v1::Decision> at1 = NewDecisions(*r1.sink, 9);
  ASSERT_EQ(at1.size(), after.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(at1[i].digest(), after[i].digest());
}

// Old clients do not say: a rank counts once heard from, and the job
// decides from past its step plus the lag and RestoreHold::kMargin.
TEST_F(RestoreHoldTest, OldClientsCountOnceHeardFromWithAMargin) {
  RunOldDaemon();
  std::unique_ptr<Job> job = RestoreJob();
  ASSERT_NE(job, nullptr);
  Rank r1 = Join(*job, 1);
  for (int64_t step = 13; step <= 25; ++step) {
    Report(*job, 1, r1, step);
    clock_.Advance(10ms);
    job->Tick(clock_.Now());
  }
  PassDeadline(*job);
  EXPECT_TRUE(NewDecisions(*r1.sink, 9).empty());
  Rank r0 = Join(*job, 0);
  EXPECT_FALSE(SaidHoldOver("")) << "registered, not heard from yet";
  Report(*job, 0, r0, 21);
  ASSERT_TRUE(SaidHoldOver("2 of 2 ranks known"));
  const int64_t first = 25 + RestoreHold::kMargin + 1;
  EXPECT_TRUE(SaidHoldOver("decides from step " + std::to_string(first)));
  for (int64_t step = 26; step <= first + 3; ++step) {
    Report(*job, 0, r0, step);
    Report(*job, 1, r1, step);
    clock_.Advance(10ms);
    job->Tick(clock_.Now());
  }
  const std::vector<v1::Decision> after = NewDecisions(*r0.sink, 9);
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after.front().observed_step(), first);
}

// A rank that never comes back does not hold the job for good: after the
// grace it decides from past the ranks that did.
TEST_F(RestoreHoldTest, TheHoldEndsAfterTheGraceWithTheRanksThatCameBack) {
  RunOldDaemon();
  std::unique_ptr<Job> job = RestoreJob();
  ASSERT_NE(job, nullptr);
  Rank r1 = Join(*job, 1, 20);
  for (int64_t step = 13; step <= 15; ++step) Report(*job, 1, r1, step);
  clock_.Advance(9s);
  job->Tick(clock_.Now());
  EXPECT_FALSE(SaidHoldOver(""));
  clock_.Advance(2s);  // past max(incarnation_silence, 5 deadlines) = 10 s
  job->Tick(clock_.Now());
  ASSERT_TRUE(SaidHoldOver("1 of 2 ranks known"));
  ASSERT_TRUE(SaidHoldOver("decides from step 20"));
  for (int64_t step = 16; step <= 22; ++step) {
    Report(*job, 1, r1, step);
    PassDeadline(*job);  // rank 0 is gone: every step closes by its deadline
  }
  const std::vector<v1::Decision> after = NewDecisions(*r1.sink, 9);
  ASSERT_EQ(after.size(), 3u);
  EXPECT_EQ(after.front().observed_step(), 20);
}

// Acks count as being heard from (a standby reports nothing); a job whose
// ranks never come back ends its hold with the snapshot's steps; a rank
// that held nothing says -1; a held_through out of reach is refused.
TEST_F(RestoreHoldTest, AcksNoRankBackAndTheBoundsOfHeldThrough) {
  RunOldDaemon();
  {
    std::unique_ptr<Job> job = RestoreJob();
    ASSERT_NE(job, nullptr);
    Rank r0 = Join(*job, 0), r1 = Join(*job, 1);
    v1::Ack ack;
    ack.set_step(19);
    ASSERT_TRUE(job->OnAck(0, r0.session, ack).ok());
    EXPECT_FALSE(SaidHoldOver(""));
    ack.set_step(12);
    ASSERT_TRUE(job->OnAck(1, r1.session, ack).ok());
    EXPECT_TRUE(SaidHoldOver("decides from step " + std::to_string(19 + RestoreHold::kMargin + 1)));
  }
  listener_.events.clear();
  {
    std::unique_ptr<Job> job = RestoreJob();
    ASSERT_NE(job, nullptr);
    v1::RegisterRequest far = RegisterOf(0);
    far.set_says_held_through(true);
    far.set_held_through(9 + JobOptions{}.aggregation.max_step_jump + 1);
    EXPECT_EQ(job->Register(far).status().code(), StatusCode::kOutOfRange);
    far.set_held_through(-2);
    EXPECT_EQ(job->Register(far).status().code(), StatusCode::kOutOfRange);
    Join(*job, 0, -1);
    Join(*job, 1, -1);  // both held nothing: decided from the snapshot's next step
    ASSERT_TRUE(SaidHoldOver("2 of 2 ranks known"));
    EXPECT_TRUE(SaidHoldOver("decides from step 10"));
  }
  listener_.events.clear();
  std::unique_ptr<Job> job = RestoreJob();
  ASSERT_NE(job, nullptr);
  clock_.Advance(11s);
  job->Tick(clock_.Now());
  ASSERT_TRUE(SaidHoldOver("0 of 2 ranks known"));
  Rank r0 = Join(*job, 0), r1 = Join(*job, 1);
  Report(*job, 0, r0, 10);
  Report(*job, 1, r1, 10);
  const std::vector<v1::Decision> after = NewDecisions(*r0.sink, 9);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after.front().observed_step(), 10);
  // No step left undecided: the rebuilt decision's successor, consecutive.
  EXPECT_EQ(after.front().sequence(), r0.sink->decisions.front().sequence() + 1);
}

// While holding, the open steps stay within max_open_steps: the oldest is
// dropped undecided, and the job decides past it.
TEST_F(RestoreHoldTest, AHoldDropsTheOldestOpenStepsPastTheBound) {
  options_.aggregation.max_open_steps = 4;
  RunOldDaemon();
  std::unique_ptr<Job> job = RestoreJob();
  ASSERT_NE(job, nullptr);
  Rank r1 = Join(*job, 1, 13);
  for (int64_t step = 14; step <= 40; ++step) {
    Report(*job, 1, r1, step);
    clock_.Advance(10ms);
    job->Tick(clock_.Now());
  }
  EXPECT_TRUE(NewDecisions(*r1.sink, 9).empty());
  Rank r0 = Join(*job, 0, 13);
  ASSERT_TRUE(SaidHoldOver("2 of 2 ranks known"));
  EXPECT_TRUE(SaidHoldOver("decides from step 37")) << "40 reported, 4 steps kept open";
}

}  // namespace
}  // namespace gnmr::testing
