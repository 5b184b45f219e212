// The client library against the real gnmrd binary: the daemon is absent
// when training starts (fail-open, then the client connects when it
// appears), is killed with -9 mid-run while a unit is locked, and comes back
// from its state dir. Training never stops, the client reconnects within
// 2 s, the lock survives and no plan ever has more than max_o units in force.
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "daemon/store/snapshot_store.h"
#include "gnmr/client.h"
#include "tests/daemon/gnmrd_process.h"
#include "tests/testing/eventually.h"

namespace gnmr {
namespace {

using testing::Eventually;

using Clock = std::chrono::steady_clock;

class Trainer {
 public:
  explicit Trainer(const std::string& target) : grads_(4, std::vector<float>(1000)) {
    ClientOptions o;
    o.target = target;
    o.job_id = "job";
    o.token = "tok";
    // Waited only while connected (never with the daemon absent or after
    // a wait timed out): long enough for a gnmrd built with ThreadSanitizer
    // on a loaded machine, where 300 ms missed the spike's decision.
    o.decision_wait = std::chrono::milliseconds(3000);
    ControllerConfig c;
    c.warmup = 5;
    c.max_o = 1;
    c.lock_steps = 40;
    c.lag = 1;
    o.config = c;
    client_ = std::move(Client::Create(o)).value();
    for (int u = 0; u < 4; ++u) {
      TensorRef t;
      t.data = grads_[u].data();
      t.numel = grads_[u].size();
      EXPECT_TRUE(client_->AddUnit("unit" + std::to_string(u), {t}).ok());
    }
    EXPECT_TRUE(client_->Start().ok());
  }

  // One training step; `spike` multiplies that unit's gradient.
  Plan Step(int64_t step, int spike = -1) {
    for (int u = 0; u < 4; ++u) {
      for (size_t i = 0; i < grads_[u].size(); ++i) {
        grads_[u][i] = (u == spike ? 40.0f : 1.0f) * 0.01f *
                       static_cast<float>((i * 7 + static_cast<size_t>(step) * 3) % 17 + 1);
      }
    }
    EXPECT_TRUE(client_->Observe(step).ok());
    Plan p = client_->PlanFor(step);
    int in_force = 0;
    for (const PlanEntry& e : p.entries) in_force += e.since <= step && step < e.until;
    max_in_force_ = std::max(max_in_force_, in_force);
    if (p.has_decision) {
      EXPECT_TRUE(client_->Ack(p).ok());
    }
    return p;
  }

  Client& client() { return *client_; }
  int max_in_force() const { return max_in_force_; }

 private:
  std::vector<std::vector<float>> grads_;
  std::unique_ptr<Client> client_;
  int max_in_force_ = 0;
};

TEST(ClientWithGnmrd, AbsentAtStartThenKilledAndRestarted) {
  testing::GnmrdProcess gnmrd;
  Trainer t(gnmrd.target());
  int64_t step = 0;
  const Clock::time_point t0 = Clock::now();
  for (; step < 10; ++step) EXPECT_FALSE(t.Step(step).has_decision);
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(500)) << "waited without a daemon";

  ASSERT_TRUE(gnmrd.Start());
  ASSERT_TRUE(Eventually([&] { return t.client().Counters().connected; }, std::chrono::seconds(3)));
  bool locked = false;
  int64_t until = 0;
  for (; step < 40; ++step) {
    Plan p = t.Step(step, step == 30 ? 0 : -1);
    if (const PlanEntry* e = p.Find(0); e != nullptr && !locked) {
      locked = true;
      until = e->until;
    }
  }
  ASSERT_TRUE(locked) << "the spike at step 30 was not admitted";

  // Wait until the admission's snapshot is durable, then kill -9.
  store::SnapshotStore disk(gnmrd.state_dir());
  ASSERT_TRUE(Eventually(
      [&] {
        auto s = disk.Load("job");
        return s.ok() && s->state.recovery_size() == 1;
      },
      std::chrono::seconds(5)));
  gnmrd.Kill(SIGKILL);
  for (int i = 0; i < 5; ++i, ++step) t.Step(step);  // training goes on

  ASSERT_TRUE(gnmrd.Start());
  const Clock::time_point back = Clock::now();
  ASSERT_TRUE(Eventually([&] { return t.client().Counters().connected; }, std::chrono::seconds(3)));
  EXPECT_LT(Clock::now() - back, std::chrono::seconds(2));
  // Unit 1 spikes while unit 0's restored lock holds the only slot.
  bool still_locked = false;
  for (; step < 60; ++step) {
    Plan p = t.Step(step, step == 50 ? 1 : -1);
    if (p.has_decision && step < until) {
      const PlanEntry* e = p.Find(0);
      still_locked = e != nullptr && e->until == until;
      EXPECT_EQ(p.Find(1), nullptr) << "unit 1 admitted beyond max_o at step " << step;
    }
  }
  EXPECT_TRUE(still_locked);
  EXPECT_LE(t.max_in_force(), 1);
  const ClientCounters k = t.client().Counters();
  EXPECT_GE(k.reconnects, 1u);
  EXPECT_EQ(k.decisions_rejected, 0u);
  // gnmrd attaches every stream at once (its GenerationStart is the first
  // message): connected, and not one attach given up.
  EXPECT_TRUE(k.connected);
  EXPECT_EQ(k.attach_failures, 0u);
  EXPECT_EQ(k.registrations, k.reconnects + 1);
  t.client().Stop();
}

// An operator deletes the job under a running trainer (gnmrctl job
// delete): the client is told, registers again, and follows the new job,
// whose generation is newer than the deleted one's, so none of the old
// job's decisions is mixed into its plans.
TEST(ClientWithGnmrd, DeletedJobIsStartedAnewAndItsPlansApply) {
  testing::GnmrdProcess gnmrd;
  ASSERT_TRUE(gnmrd.Start());
  Trainer t(gnmrd.target());
  ASSERT_TRUE(Eventually([&] { return t.client().Counters().connected; }, std::chrono::seconds(5)));
  int64_t step = 0;
  for (; step < 20; ++step) t.Step(step);
  const ClientCounters before = t.client().Counters();
  ASSERT_GT(before.decisions_received, 0u);

  auto admin = v1::Admin::NewStub(gnmrd.Channel());
  grpc::ClientContext ctx;
  v1::DeleteJobRequest req;
  req.set_job_id("job");
  v1::DeleteJobResponse resp;
  ASSERT_TRUE(admin->DeleteJob(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.streams_closed(), 1u);

  // Training goes on; the client registers the job anew.
  ASSERT_TRUE(Eventually(
      [&] {
        t.Step(step++);
        const ClientCounters k = t.client().Counters();
        return k.connected && k.reconnects >= 1 && k.generation > before.generation;
      },
      std::chrono::seconds(10)));
  // The client says why its stream ended (not just "cancelled").
  bool told = false;
  for (const Problem& p : t.client().TakeProblems()) {
    told = told ||
           p.message.find("Session: job 'job' was deleted by an operator") != std::string::npos;
  }
  EXPECT_TRUE(told);
  // Past the new job's warmup a spike is admitted, and the plans apply it.
  const int64_t spike = step + 10;
  bool applied = false;
  for (const int64_t end = step + 25; step < end; ++step) {
    const Plan p = t.Step(step, step == spike ? 2 : -1);
    applied = applied || (p.has_decision && p.Find(2) != nullptr);
  }
  EXPECT_TRUE(applied) << "the new job's admission never reached a plan";
  const ClientCounters k = t.client().Counters();
  EXPECT_EQ(k.decisions_rejected, 0u) << k.last_error;
  t.client().Stop();
}

}  // namespace
}  // namespace gnmr
