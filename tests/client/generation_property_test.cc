// Property: honest ranks plan every step alike whatever happens to the
// job's generations meanwhile (docs/safety.md, rule 3). Two honest ranks
// train in lockstep (a barrier per step, as collectives make them) against
// a real gnmrd core over a Unix socket, while an "operator" thread, at
// random times, makes a third rank restart as a new instance (a crash
// loop), imports an earlier state (gnmrctl import: a live switch) or
// rewinds the job. Every plan of both honest ranks is recorded, and at
// every step they must agree on (has_decision, generation, digest).
//
// Before the live switches and the crash-loop rule, a run of this kind
// split the honest ranks' plans on a large share of its steps: a
// generation started by the crash-looping rank or by an import voided
// the decisions one rank planned with while the other had planned already.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "daemon/server/daemon.h"
#include "gnmr/client.h"
#include "gnmr/v1/gnmr.grpc.pb.h"
#include "tests/testing/eventually.h"

namespace gnmr {
namespace {

constexpr uint32_t kWorld = 3;  // ranks 0 and 1 honest, rank 2 in a crash loop
constexpr int64_t kSteps = 400;

// A reusable barrier for the two honest ranks (C++17 has none).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t phase = phase_;
    if (++waiting_ == n_) {
      waiting_ = 0;
      ++phase_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return phase_ != phase; });
  }

 private:
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  uint64_t phase_ = 0;
};

struct PlanRecord {
  bool has_decision = false;
  uint64_t generation = 0;
  uint64_t digest = 0;
  bool operator==(const PlanRecord& o) const {
    // A plan without a decision is the same fallback in every generation.
    if (!has_decision || !o.has_decision) return has_decision == o.has_decision;
    return generation == o.generation && digest == o.digest;
  }
};

// One rank's client over a replicated unit whose gradient spikes now and
// then (so that admissions change the digests).
struct Rank {
  std::vector<float> grad = std::vector<float>(512);
  std::unique_ptr<Client> client;

  void Fill(int64_t step) {
    const float spike = step % 23 == 17 ? 40.0f : 1.0f;
    for (size_t i = 0; i < grad.size(); ++i) {
      grad[i] =
          spike * 0.01f * static_cast<float>((i * 7 + static_cast<size_t>(step) * 13) % 19 + 1);
    }
  }
};

class GenerationPropertyTest : public ::testing::TestWithParam<uint32_t> {
 protected:
  void SetUp() override {
    path_ = "/tmp/gnmr_genprop_" + std::to_string(getpid()) + ".sock";
    DaemonOptions d;
    d.listen = {"unix:" + path_};
    d.registry.job.aggregation.deadline = std::chrono::milliseconds(300);
    StatusOr<std::unique_ptr<Daemon>> s = Daemon::Start(d, nullptr, AdminContext());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    daemon_ = std::move(s).value();
    admin_ = v1::Admin::NewStub(
        grpc::CreateChannel("unix:" + path_, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    for (auto& r : ranks_) r.reset();
    if (daemon_) daemon_->Shutdown(std::chrono::milliseconds(200));
  }

  std::unique_ptr<Rank> StartRank(uint32_t rank) {
    // The crash-looping rank must not hold the honest rank 0's thread.
    auto r = std::make_unique<Rank>();
    ClientOptions o;
    o.target = "unix:" + path_;
    o.job_id = "job";
    o.rank = rank;
    o.world_size = kWorld;
    o.decision_wait = rank == 2 ? std::chrono::milliseconds(50) : std::chrono::seconds(5);
    ControllerConfig c;
    c.warmup = 5;
    c.ema_decay = 0.9;
    c.lock_steps = 6;
    c.max_o = 2;
    c.lag = 1;
    c.report = ReportMode::kAll;
    o.config = c;
    auto made = Client::Create(o);
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    if (!made.ok()) return nullptr;
    r->client = std::move(made).value();
    TensorRef t;
    t.data = r->grad.data();
    t.numel = r->grad.size();
    EXPECT_TRUE(r->client->AddUnit("mlp", {t}).ok());
    EXPECT_TRUE(r->client->Start().ok());
    return r;
  }

  bool Export(v1::ControllerState* out) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ExportStateRequest req;
    req.set_job_id("job");
    v1::ExportStateResponse resp;
    if (!admin_->ExportState(&ctx, req, &resp).ok()) return false;
    *out = resp.state();
    return true;
  }
  bool Import(const v1::ControllerState& state) {  // an operator's: live
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ImportStateRequest req;
    req.set_job_id("job");
    *req.mutable_state() = state;
    v1::ImportStateResponse resp;
    return admin_->ImportState(&ctx, req, &resp).ok();
  }
  bool Rewind() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::RewindJobRequest req;
    req.set_job_id("job");
    v1::RewindJobResponse resp;
    return admin_->RewindJob(&ctx, req, &resp).ok();
  }

  std::string path_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<v1::Admin::Stub> admin_;
  std::unique_ptr<Rank> ranks_[kWorld];
};

TEST_P(GenerationPropertyTest, HonestRanksPlanEveryStepAlike) {
  std::mt19937 rng(GetParam());
  for (uint32_t r = 0; r < kWorld; ++r) {
    ranks_[r] = StartRank(r);
    ASSERT_NE(ranks_[r], nullptr);
  }
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(testing::Eventually([&] { return ranks_[r]->client->Counters().connected; }));
  }

  // The crash-looping rank steps with the others (on the operator thread's
  // side), so that steps close without waiting for their deadline.
  std::atomic<int64_t> frontier{-1};
  std::atomic<bool> done{false};
  std::mutex loop_mu;  // guards ranks_[2]
  std::atomic<int> restarts{0}, imports{0}, rewinds{0};
  std::thread operator_thread([&] {
    std::mt19937 orng(GetParam() * 7919u + 1);
    v1::ControllerState early;
    bool have_early = false;
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(3 + orng() % 20));
      if (done.load()) break;
      const int64_t at = frontier.load();
      if (!have_early && at > 20) have_early = Export(&early);
      switch (orng() % 3) {
        case 0: {  // rank 2 dies and comes back as a new instance
          std::lock_guard<std::mutex> lock(loop_mu);
          ranks_[2].reset();
          ranks_[2] = StartRank(2);
          ++restarts;
          break;
        }
        case 1:
          if (have_early && Import(early)) ++imports;
          break;
        default:
          if (Rewind()) ++rewinds;
          break;
      }
    }
  });

  std::vector<PlanRecord> plans[2];
  plans[0].resize(kSteps);
  plans[1].resize(kSteps);
  Barrier barrier(2);
  auto honest = [&](uint32_t r) {
    std::mt19937 jitter(GetParam() + r);
    for (int64_t step = 0; step < kSteps; ++step) {
      barrier.Wait();
      Rank& rank = *ranks_[r];
      rank.Fill(step);
      if (r == 0) {  // rank 2 keeps up, when it is there
        frontier.store(step);
        std::lock_guard<std::mutex> lock(loop_mu);
        if (ranks_[2]) {
          ranks_[2]->Fill(step);
          (void)ranks_[2]->client->Observe(step);
          ranks_[2]->client->PlanFor(step);
        }
      }
      // Skew the two ranks inside the step, as real ranks are.
      std::this_thread::sleep_for(std::chrono::microseconds(jitter() % 3000));
      EXPECT_TRUE(rank.client->Observe(step).ok());
      const Plan p = rank.client->PlanFor(step);
      EXPECT_TRUE(rank.client->Ack(p).ok());
      plans[r][step] = {p.has_decision, p.generation, p.digest};
    }
  };
  std::thread t0(honest, 0), t1(honest, 1);
  t0.join();
  t1.join();
  done.store(true);
  operator_thread.join();

  int differ = 0, decided = 0;
  for (int64_t s = 0; s < kSteps; ++s) {
    decided += plans[0][s].has_decision ? 1 : 0;
    if (!(plans[0][s] == plans[1][s])) {
      ++differ;
      ADD_FAILURE() << "step " << s << ": rank 0 " << plans[0][s].has_decision << "/g"
                    << plans[0][s].generation << "/" << std::hex << plans[0][s].digest
                    << ", rank 1 " << std::dec << plans[1][s].has_decision << "/g"
                    << plans[1][s].generation << "/" << std::hex << plans[1][s].digest;
    }
  }
  std::printf(
      "seed %u: %d restarts, %d imports, %d rewinds; %d of %lld steps planned with a "
      "decision, %d differ\n",
      GetParam(), restarts.load(), imports.load(), rewinds.load(), decided,
      static_cast<long long>(kSteps), differ);
  EXPECT_EQ(differ, 0);
  EXPECT_GT(restarts.load() + imports.load() + rewinds.load(), 10);
  // Control never stopped for long: most steps have a decision.
  EXPECT_GT(decided, kSteps / 2);
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks_[r]->client->Counters().decisions_rejected, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, GenerationPropertyTest, ::testing::Values(1u, 2u, 3u));

}  // namespace
}  // namespace gnmr
