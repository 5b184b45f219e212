// The real gnmrd binary: kill -9 mid-run and restart from the state dir. The
// job is restored from its snapshot, ranks re-register with the same unit
// ids, held locks survive and max_o is never exceeded across the restart;
// after a restart the job's newest decision is rebuilt from its state. Every
// restart starts a new generation, snapshotted at once: a second crash
// right after a restart cannot start the same generation again.
#include <map>

#include <gtest/gtest.h>

#include "daemon/store/snapshot_store.h"
#include "tests/daemon/gnmrd_process.h"
#include "tests/daemon/raw_rank.h"
#include "tests/daemon/test_daemon.h"
#include "tests/testing/eventually.h"

namespace gnmr::testing {
namespace {

std::vector<RawRank::Unit> Units() { return {{"a"}, {"b"}, {"c"}, {"d"}}; }

TEST(GnmrdRestart, KillNineRestoresJobLocksAndBudget) {
  GnmrdProcess gnmrd;
  ASSERT_TRUE(gnmrd.Start({"--snapshot-every", "1000"}));
  v1::ControllerConfig cfg = FastConfig(/*max_o=*/2);
  cfg.set_lock_steps(30);
  auto run_steps = [&](std::vector<std::unique_ptr<RawRank>>& ranks, int64_t from, int64_t to,
                       const std::map<int64_t, int>& spikes) {
    for (int64_t s = from; s < to; ++s) {
      std::vector<double> v(4, 1.0);
      auto it = spikes.find(s);
      if (it != spikes.end()) v[it->second] = 900.0;
      for (auto& r : ranks) ASSERT_TRUE(r->SendStats(s, v));
    }
  };
  std::vector<std::unique_ptr<RawRank>> ranks;
  for (uint32_t r = 0; r < 2; ++r) {
    ranks.push_back(std::make_unique<RawRank>(gnmrd.Channel(), "job", r, 2, "tok"));
    v1::RegisterResponse resp;
    ASSERT_TRUE(ranks[r]->Register(Units(), &resp, &cfg).ok());
    EXPECT_EQ(resp.generation(), 1u);
    ranks[r]->Open();
  }
  const std::vector<uint32_t> ids = ranks[0]->unit_ids();
  run_steps(ranks, 0, 12, {{8, 0}, {9, 1}});  // a and b admitted, locked 30 steps
  v1::Decision before;
  ASSERT_TRUE(ranks[0]->WaitDecision(11, &before));
  ASSERT_EQ(before.recovery_size(), 2);

  // A snapshot is requested whenever the set changes (not only every 1000
  // steps) and written in the background: wait until the one holding both
  // admissions is on disk, then kill -9.
  store::SnapshotStore on_disk(gnmrd.state_dir());
  ASSERT_TRUE(Eventually([&] {
    auto loaded = on_disk.Load("job");
    return loaded.ok() && loaded->state.recovery_size() == 2;
  }));
  gnmrd.Kill(SIGKILL);
  for (auto& r : ranks) r->WaitEnd();
  ranks.clear();
  ASSERT_TRUE(gnmrd.Start({"--snapshot-every", "1000"}));

  for (uint32_t r = 0; r < 2; ++r) {
    ranks.push_back(std::make_unique<RawRank>(gnmrd.Channel(), "job", r, 2, "tok"));
    v1::RegisterResponse resp;
    ASSERT_TRUE(ranks[r]->Register(Units(), &resp).ok());
    EXPECT_EQ(ranks[r]->unit_ids(), ids);
    EXPECT_GE(resp.last_step(), 9);  // at least the last set change survived
    EXPECT_EQ(resp.config().max_o(), 2);
    EXPECT_EQ(resp.generation(), 2u);  // decisions of generation 1 are void
    ranks[r]->Open();
  }
  // c and d spike while a and b still hold the budget: both denied.
  run_steps(ranks, 12, 20, {{14, 2}, {15, 3}});
  v1::Decision last;
  for (int64_t s = 12; s < 20; ++s) {
    v1::Decision d;
    ASSERT_TRUE(ranks[1]->WaitDecision(s, &d)) << s;
    EXPECT_EQ(d.generation(), 2u);
    last = d;
    EXPECT_LE(d.recovery_size(), 2) << "max_o exceeded at step " << s;
    ASSERT_EQ(d.recovery_size(), 2);
    for (int k = 0; k < 2; ++k) {  // the held locks, unchanged
      EXPECT_EQ(d.recovery(k).unit_id(), before.recovery(k).unit_id());
      EXPECT_EQ(d.recovery(k).until(), before.recovery(k).until());
    }
  }
  // A graceful stop flushes a final snapshot: the next start resumes at 19.
  for (auto& r : ranks) r->Close();
  EXPECT_EQ(gnmrd.Kill(SIGTERM), 0);
  ASSERT_TRUE(gnmrd.Start());
  RawRank again(gnmrd.Channel(), "job", 0, 2, "tok");
  v1::RegisterResponse resp;
  grpc::Status st = again.Register(Units(), &resp);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  EXPECT_EQ(resp.last_step(), 19);
  EXPECT_EQ(resp.generation(), 3u);
  // The newest decision is rebuilt from the snapshot: a rank attaching after
  // the restart gets it at once (after the GenerationStart), before any new
  // step is reported.
  again.Open();
  v1::Decision rebuilt;
  ASSERT_TRUE(again.WaitDecision(19, &rebuilt));
  EXPECT_EQ(rebuilt.observed_step(), 19);
  EXPECT_EQ(rebuilt.apply_step(), last.apply_step());
  EXPECT_EQ(rebuilt.sequence(), last.sequence());
  EXPECT_EQ(rebuilt.digest(), last.digest());
  EXPECT_EQ(rebuilt.next_lag(), last.next_lag());
  EXPECT_EQ(rebuilt.generation(), 3u);
  EXPECT_EQ(rebuilt.recovery_size(), 2);
  ASSERT_TRUE(again.messages()[0].has_generation());
  EXPECT_EQ(again.messages()[0].generation().generation(), 3u);
  again.Close();

  // Generation 3 is on disk without any new step: a kill -9 now restarts
  // into generation 4, never a second generation 3.
  ASSERT_TRUE(Eventually([&] {
    auto loaded = on_disk.Load("job");
    v1::JobMeta meta;
    return loaded.ok() && meta.ParseFromString(loaded->job_meta) && meta.generation() == 3;
  }));
  gnmrd.Kill(SIGKILL);
  ASSERT_TRUE(gnmrd.Start());
  RawRank after(gnmrd.Channel(), "job", 0, 2, "tok");
  ASSERT_TRUE(after.Register(Units(), &resp).ok());
  EXPECT_EQ(resp.generation(), 4u);
  // The old token is still bound to the restored job.
  RawRank intruder(gnmrd.Channel(), "job", 1, 2, "other");
  EXPECT_EQ(intruder.Register(Units()).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace gnmr::testing
