// The client against an in-process gnmrd core over a Unix socket: decisions
// reach every rank identically and validated, lag 0 waits for the step's
// own decision, a restarted daemon is reconnected within 2 s, a wrong token
// is counted, never fatal.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client/src/io_loop.h"
#include "daemon/server/daemon.h"
#include "gnmr/client.h"
#include "tests/testing/eventually.h"

namespace gnmr {
namespace {

using Clock = std::chrono::steady_clock;

ControllerConfig Fast(int lag) {
  ControllerConfig c;
  c.warmup = 5;
  c.ema_decay = 0.9;
  c.lock_steps = 5;
  c.max_o = 2;
  c.lag = lag;
  return c;
}

// One rank: a replicated "mlp" unit and an "attn" unit sharded over 2.
struct Rank {
  std::vector<float> mlp = std::vector<float>(2000);
  std::vector<float> attn = std::vector<float>(1000);
  std::unique_ptr<Client> client;
  UnitHandle mlp_unit = 0;

  // Same data on every rank for a replica; the shard's own for a shard.
  void Fill(int64_t step, uint32_t rank, float mlp_factor) {
    for (size_t i = 0; i < mlp.size(); ++i) {
      mlp[i] = mlp_factor * 0.01f * static_cast<float>((i * 7 + step * 13) % 19 + 1);
    }
    for (size_t i = 0; i < attn.size(); ++i) {
      attn[i] = 0.02f * static_cast<float>((i + rank * 5 + step) % 11 + 1);
    }
  }
};

class ClientDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override { path_ = "/tmp/gnmr_client_test_" + std::to_string(getpid()) + ".sock"; }
  void TearDown() override {
    ranks_.clear();
    if (daemon_) daemon_->Shutdown(std::chrono::milliseconds(200));
  }

  void StartDaemon(const std::map<std::string, std::string>& tokens = {}) {
    DaemonOptions d;
    d.listen = {"unix:" + path_};
    d.registry.job_tokens = tokens;
    StatusOr<std::unique_ptr<Daemon>> s = Daemon::Start(d, nullptr, AdminContext());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    daemon_ = std::move(s).value();
  }

  Rank* AddRank(uint32_t rank, uint32_t world, int lag, std::chrono::milliseconds wait,
                const std::string& token = "") {
    auto r = std::make_unique<Rank>();
    ClientOptions o;
    o.target = "unix:" + path_;
    o.job_id = "job";
    o.rank = rank;
    o.world_size = world;
    o.token = token;
    o.decision_wait = wait;
    o.config = Fast(lag);
    auto c = Client::Create(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    r->client = std::move(c).value();
    TensorRef m;
    m.data = r->mlp.data();
    m.numel = r->mlp.size();
    TensorRef a;
    a.data = r->attn.data();
    a.numel = r->attn.size();
    r->mlp_unit = *r->client->AddUnit("layers.0.mlp", {m});
    EXPECT_TRUE(r->client->AddUnit("layers.0.attn", {a}, rank % 2, world % 2 == 0 ? 2 : 1).ok());
    EXPECT_TRUE(r->client->Start().ok());
    ranks_.push_back(std::move(r));
    return ranks_.back().get();
  }

  static bool WaitConnected(Client* c, std::chrono::milliseconds limit) {
    return gnmr::testing::Eventually([c] { return c->Counters().connected; }, limit);
  }

  std::string path_;
  std::unique_ptr<Daemon> daemon_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

TEST_F(ClientDaemonTest, RanksApplyIdenticalValidatedDecisions) {
  StartDaemon();
  Rank* r0 = AddRank(0, 2, /*lag=*/1, std::chrono::seconds(3));
  Rank* r1 = AddRank(1, 2, 1, std::chrono::seconds(3));
  ASSERT_TRUE(WaitConnected(r0->client.get(), std::chrono::seconds(5)));
  ASSERT_TRUE(WaitConnected(r1->client.get(), std::chrono::seconds(5)));
  const int64_t kSpike = 12;
  bool promoted = false;
  for (int64_t step = 0; step < 25; ++step) {
    Plan plans[2];
    for (uint32_t k = 0; k < 2; ++k) {
      Rank* r = ranks_[k].get();
      r->Fill(step, k, step == kSpike ? 20.0f : 1.0f);
      ASSERT_TRUE(r->client->Observe(step).ok());
      r->client->PlanFor(step, &plans[k]);
      ASSERT_TRUE(r->client->Ack(plans[k]).ok());
    }
    if (step == 0) continue;  // the first decision applies at step 1
    ASSERT_TRUE(plans[0].has_decision) << "step " << step;
    EXPECT_EQ(plans[0].apply_step, step);
    EXPECT_EQ(plans[0].digest, plans[1].digest) << "step " << step;
    EXPECT_EQ(plans[0].entries.size(), plans[1].entries.size());
    if (step == kSpike + 1) {
      const PlanEntry* e = plans[0].Find(r0->mlp_unit);
      ASSERT_NE(e, nullptr);
      EXPECT_EQ(e->action, Action::kPromote);
      EXPECT_TRUE(e->first_step);
      EXPECT_EQ(e->until, kSpike + 1 + 5);
      promoted = true;
    }
  }
  EXPECT_TRUE(promoted);
  for (auto& r : ranks_) {
    EXPECT_TRUE(r->client->Flush(std::chrono::seconds(2)));
    const ClientCounters k = r->client->Counters();
    EXPECT_EQ(k.missed_decisions, 0u);
    EXPECT_EQ(k.decisions_rejected, 0u);
    EXPECT_GE(k.decisions_received, 24u);
    EXPECT_EQ(k.reports_sent, 25u);
    EXPECT_EQ(k.reports_dropped, 0u);
    EXPECT_EQ(k.acks_sent, 25u);  // every plan, also step 0's without decision
    EXPECT_EQ(k.registrations, 1u);
  }
}

TEST_F(ClientDaemonTest, LagZeroWaitsForTheStepsOwnDecisionAndScalesTheEntry) {
  StartDaemon();
  Rank* r = AddRank(0, 1, /*lag=*/0, std::chrono::seconds(3));
  ASSERT_TRUE(WaitConnected(r->client.get(), std::chrono::seconds(5)));
  const int64_t kSpike = 10;
  for (int64_t step = 0; step < 14; ++step) {
    r->Fill(step, 0, step == kSpike ? 30.0f : 1.0f);
    ASSERT_TRUE(r->client->Observe(step).ok());
    const Plan p = r->client->PlanFor(step);
    ASSERT_TRUE(p.has_decision) << "step " << step;
    EXPECT_EQ(p.apply_step, step);
    EXPECT_EQ(p.observed_step, step);
    if (step == kSpike) {
      const PlanEntry* e = p.Find(r->mlp_unit);
      ASSERT_NE(e, nullptr);
      EXPECT_TRUE(e->first_step);
      EXPECT_EQ(e->entry, EntryTreatment::kClip);
      EXPECT_GT(e->norm, 0.0);
      EXPECT_GT(e->ref_norm, 0.0);
      EXPECT_LT(e->scale, 0.2);  // a 30x spike is clipped back towards the mean
      EXPECT_GE(e->scale, e->clip_min_scale);
    }
  }
  EXPECT_EQ(r->client->Counters().missed_decisions, 0u);
}

TEST_F(ClientDaemonTest, TrainingGoesOnWhileTheDaemonRestarts) {
  StartDaemon();
  Rank* r = AddRank(0, 1, 1, std::chrono::milliseconds(200));
  ASSERT_TRUE(WaitConnected(r->client.get(), std::chrono::seconds(5)));
  int64_t step = 0;
  for (; step < 5; ++step) {
    r->Fill(step, 0, 1.0f);
    ASSERT_TRUE(r->client->Observe(step).ok());
    r->client->PlanFor(step);
  }
  daemon_->Shutdown(std::chrono::milliseconds(0));
  daemon_.reset();
  ASSERT_TRUE(gnmr::testing::Eventually([&] { return !r->client->Counters().connected; }));
  // Disconnected: steps never wait, whatever decision_wait says.
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 20; ++i, ++step) {
    ASSERT_TRUE(r->client->Observe(step).ok());
    r->client->PlanFor(step);
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(150));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // backoff grows to its cap

  const Clock::time_point back = Clock::now();
  StartDaemon();
  ASSERT_TRUE(WaitConnected(r->client.get(), std::chrono::seconds(5)));
  const double seconds = std::chrono::duration<double>(Clock::now() - back).count();
  EXPECT_LT(seconds, 2.0) << "reconnect took " << seconds << " s";
  std::printf("reconnected %.3f s after the daemon came back\n", seconds);
  for (int i = 0; i < 5; ++i, ++step) {
    ASSERT_TRUE(r->client->Observe(step).ok());
    r->client->PlanFor(step);
  }
  EXPECT_TRUE(r->client->Flush(std::chrono::seconds(2)));
  const ClientCounters k = r->client->Counters();
  EXPECT_EQ(k.reconnects, 1u);
  EXPECT_GE(k.connect_failures, 1u);
  // Reports queued while the daemon was away are sent after the reconnect
  // (the new daemon has not decided them); none is lost silently.
  EXPECT_EQ(k.reports_sent + k.reports_dropped, static_cast<uint64_t>(step));
  EXPECT_GE(k.decisions_received, 4u);
}

TEST_F(ClientDaemonTest, WrongTokenIsCountedNotFatal) {
  StartDaemon({{"job", "right"}});
  Rank* bad = AddRank(0, 1, 1, std::chrono::seconds(1), "wrong");
  gnmr::testing::Eventually([&] { return bad->client->Counters().connect_failures != 0; });
  ClientCounters k = bad->client->Counters();
  EXPECT_FALSE(k.connected);
  EXPECT_NE(k.last_error.find("UNAUTHENTICATED"), std::string::npos) << k.last_error;
  ASSERT_TRUE(bad->client->Observe(0).ok());
  EXPECT_FALSE(bad->client->PlanFor(0).has_decision);
  ranks_.clear();
  Rank* good = AddRank(0, 1, 1, std::chrono::seconds(1), "right");
  EXPECT_TRUE(WaitConnected(good->client.get(), std::chrono::seconds(5)));
}

}  // namespace
}  // namespace gnmr

namespace gnmr {
namespace {

// An exception on the I/O thread's write path (bad_alloc, a gRPC bug) used
// to propagate out of the session with its reader thread still joinable:
// std::terminate inside the trainer, and the RPC pointer Stop() cancels
// left dangling. Now the session ends, the client reconnects, and Stop() is
// clean.
TEST_F(ClientDaemonTest, AnExceptionOnTheIoThreadEndsTheSessionNotTheTrainer) {
  StartDaemon();
  std::atomic<int> thrown{0};
  SetReportWriteHookForTesting([&] {
    if (thrown.fetch_add(1) < 2) throw std::runtime_error("injected write failure");
  });
  Rank* r = AddRank(0, 1, /*lag=*/1, std::chrono::milliseconds(0));
  ASSERT_TRUE(r->client->WaitConnected(std::chrono::seconds(5)).ok());
  for (int64_t step = 0; step < 40; ++step) {
    r->Fill(step, 0, 1.0f);
    ASSERT_TRUE(r->client->Observe(step).ok());
    EXPECT_TRUE(r->client->Ack(r->client->PlanFor(step)).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(thrown.load(), 2);
  const ClientCounters k = r->client->Counters();
  EXPECT_GE(k.registrations, 2u);  // the session ended, the client came back
  EXPECT_NE(k.last_error.find("injected write failure"), std::string::npos) << k.last_error;
  r->client->Stop();
  SetReportWriteHookForTesting(nullptr);
}

}  // namespace
}  // namespace gnmr
