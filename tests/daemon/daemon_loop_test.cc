// End-to-end over real gRPC (loopback TCP and a Unix socket): registration,
// aggregation across ranks, identical decisions, deadlines, late reports,
// session replacement and job isolation.
#include <cmath>

#include "tests/daemon/test_daemon.h"
#include "tests/testing/eventually.h"

namespace gnmr::testing {
namespace {

TEST_F(DaemonTest, EveryRankReceivesTheIdenticalDecision) {
  StartDaemon();
  const v1::ControllerConfig cfg = FastConfig();
  std::vector<std::unique_ptr<RawRank>> ranks;
  for (uint32_t r = 0; r < 4; ++r) {
    ranks.push_back(std::make_unique<RawRank>(r % 2 ? Unix() : Tcp(), "job", r, 4));
    std::vector<RawRank::Unit> units = {{"attn", r % 2, 2}, {"mlp", 0, 1}, {"head", 0, 1}};
    ASSERT_TRUE(ranks.back()->Register(units, nullptr, &cfg).ok());
    ranks.back()->Open();
  }
  EXPECT_EQ(ranks[0]->unit_ids(), ranks[3]->unit_ids());
  for (int64_t step = 0; step < 20; ++step) {
    const double spike = step == 12 ? 100.0 : 1.0;
    for (auto& r : ranks) ASSERT_TRUE(r->SendStats(step, {0.5, 1.0 * spike, 2.0}));
  }
  v1::Decision first;
  ASSERT_TRUE(ranks[0]->WaitDecision(19, &first));
  for (int64_t step = 0; step < 20; ++step) {
    v1::Decision d0;
    ASSERT_TRUE(ranks[0]->WaitDecision(step, &d0));
    for (auto& r : ranks) {
      v1::Decision d;
      ASSERT_TRUE(r->WaitDecision(step, &d)) << "step " << step;
      EXPECT_EQ(d.SerializeAsString(), d0.SerializeAsString()) << "step " << step;
    }
  }
  v1::Decision spike;
  ASSERT_TRUE(ranks[2]->WaitDecision(12, &spike));
  ASSERT_EQ(spike.admitted_size(), 1);
  EXPECT_EQ(spike.admitted(0), ranks[2]->unit_ids()[1]);  // "mlp"
  EXPECT_EQ(spike.apply_step(), 13);
  EXPECT_EQ(spike.recovery(0).until(), 18);
  EXPECT_EQ(listener_.by_deadline.load(), 0u);
  EXPECT_EQ(listener_.incomplete.load(), 0u);
}

TEST_F(DaemonTest, ShardedUnitsCombineExactly) {
  StartDaemon();
  RawRank a(Tcp(), "j", 0, 2), b(Tcp(), "j", 1, 2);
  ASSERT_TRUE(a.Register({{"w", 0, 2}}).ok());
  ASSERT_TRUE(b.Register({{"w", 1, 2}}).ok());
  a.Open();
  b.Open();
  ASSERT_TRUE(a.SendStats(0, {9.0}));
  ASSERT_TRUE(b.SendStats(0, {16.0}));
  v1::Decision d;
  ASSERT_TRUE(a.WaitDecision(0, &d));
  auto admin = v1::Admin::NewStub(Tcp());
  grpc::ClientContext ctx;
  v1::ListUnitsRequest req;
  req.set_job_id("j");
  v1::ListUnitsResponse resp;
  ASSERT_TRUE(admin->ListUnits(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.units_size(), 1);
  EXPECT_EQ(resp.units(0).norm(), 5.0);  // sqrt(9 + 16), exactly
  EXPECT_EQ(resp.units(0).shard_count(), 2u);
}

TEST_F(DaemonTest, MissingRankTakesTheDeadlinePathAndLateReportsAreDropped) {
  // The jobs read a clock the test moves: the deadline (300 ms) passes
  // when the test says so, not when a loaded machine gets round to it.
  ManualClock& clock = clock_;
  DaemonOptions opts;
  opts.clock = &clock;
  StartDaemon(opts);
  RawRank a(Tcp(), "j", 0, 2), b(Tcp(), "j", 1, 2);
  ASSERT_TRUE(a.Register({{"x"}, {"y", 0, 2}}).ok());
  ASSERT_TRUE(b.Register({{"x"}, {"y", 1, 2}}).ok());
  a.Open();
  b.Open();
  ASSERT_TRUE(a.SendStats(0, {1.0, 1.0}));
  // The step opens when the report arrives (at the clock's time then):
  // only after that does moving the clock mean anything.
  StatusOr<std::shared_ptr<Job>> job = daemon_->registry().Find("j");
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(Eventually([&] {
    const v1::JobInfo info = (*job)->Info(clock.Now());
    for (const v1::RankInfo& r : info.ranks()) {
      if (r.rank() == 0 && r.last_step() == 0) return true;
    }
    return false;
  }));
  v1::Decision d;
  // Before the deadline nothing closes the step, however long we wait:
  // 500 ms of real time (past the real deadline, so a job reading the
  // real clock fails here) and many ticks of the 20 ms ticker go by.
  clock.Advance(std::chrono::milliseconds(299));
  EXPECT_FALSE(a.WaitDecision(0, &d, std::chrono::milliseconds(500)));
  clock.Advance(std::chrono::milliseconds(2));
  ASSERT_TRUE(a.WaitDecision(0, &d));
  // The job sends the decision first and tells its listener after: wait
  // for the listener (it counts incomplete units before by_deadline)
  // before reading its counters.
  ASSERT_TRUE(Eventually([&] { return listener_.by_deadline.load() >= 1; }));
  EXPECT_EQ(listener_.by_deadline.load(), 1u);
  EXPECT_EQ(listener_.incomplete.load(), 1u);  // "y" lacked shard 1
  // Rank 1's report of the closed step: counted as late, stream stays open.
  ASSERT_TRUE(b.SendStats(0, {1.0, 1.0}));
  ASSERT_TRUE(a.SendStats(1, {1.0, 1.0}));
  ASSERT_TRUE(b.SendStats(1, {1.0, 1.0}));
  ASSERT_TRUE(b.WaitDecision(1, &d));
  EXPECT_EQ(listener_.late.load(), 1u);
  EXPECT_EQ(listener_.by_deadline.load(), 1u);  // step 1 closed complete
}

// Admin's uptime and a rank's age read the daemon's clock: moved by the
// test, they move by exactly as much, however long the machine took.
TEST_F(DaemonTest, UptimeAndRankAgesFollowTheDaemonsClock) {
  DaemonOptions opts;
  opts.clock = &clock_;
  StartDaemon(opts);
  auto admin = v1::Admin::NewStub(Tcp());
  const auto uptime = [&] {
    grpc::ClientContext ctx;
    v1::GetStatusResponse status;
    EXPECT_TRUE(admin->GetStatus(&ctx, {}, &status).ok());
    return status.uptime_seconds();
  };
  EXPECT_EQ(uptime(), 0.0);
  clock_.Advance(std::chrono::seconds(90));
  EXPECT_EQ(uptime(), 90.0);

  RawRank a(Tcp(), "j", 0, 1);
  ASSERT_TRUE(a.Register({{"x"}}).ok());
  a.Open();
  ASSERT_TRUE(a.SendStats(0, {1.0}));
  v1::Decision d;
  ASSERT_TRUE(a.WaitDecision(0, &d));  // the report was taken: the rank was last seen then
  clock_.Advance(std::chrono::seconds(30));
  grpc::ClientContext ctx;
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(admin->ListJobs(&ctx, {}, &jobs).ok());
  ASSERT_EQ(jobs.jobs_size(), 1);
  ASSERT_EQ(jobs.jobs(0).ranks_size(), 1);
  EXPECT_NEAR(jobs.jobs(0).ranks(0).last_seen_seconds_ago(), 30.0, 1e-9);
  EXPECT_EQ(uptime(), 120.0);
}

TEST_F(DaemonTest, ReRegisteringReplacesTheOldSession) {
  StartDaemon();
  RawRank first(Tcp(), "j", 0, 1);
  ASSERT_TRUE(first.Register({{"x"}}).ok());
  first.Open();
  ASSERT_TRUE(first.SendStats(0, {1.0}));
  v1::Decision d;
  ASSERT_TRUE(first.WaitDecision(0, &d));
  RawRank second(Tcp(), "j", 0, 1);
  ASSERT_TRUE(second.Register({{"x"}}).ok());
  EXPECT_EQ(first.WaitEnd().error_code(), grpc::StatusCode::ABORTED);
  second.Open();
  // The new stream gets the newest decision at once, before any report.
  v1::Decision current;
  ASSERT_TRUE(second.WaitDecision(0, &current));
  EXPECT_EQ(current.digest(), d.digest());
  // The new session may resume from an earlier step (restarted trainer).
  ASSERT_TRUE(second.SendStats(1, {1.0}));
  ASSERT_TRUE(second.WaitDecision(1, &d));
  // The old session id is no longer accepted.
  RawRank stale(Tcp(), "j", 0, 1);
  stale.Open(first.session_id());
  EXPECT_EQ(stale.WaitEnd().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

// A stream replaced by a second stream of the same session ends after the
// second one attached; its end must not detach the second one (it did: the
// job then sent nothing more to the rank). The step of the session count
// makes sure the first stream's end was processed.
TEST_F(DaemonTest, AReplacedStreamEndingLaterLeavesTheNewStreamAttached) {
  StartDaemon();
  RawRank first(Tcp(), "j", 0, 1);
  ASSERT_TRUE(first.Register({{"x"}}).ok());
  first.Open();
  ASSERT_TRUE(first.SendStats(0, {1.0}));
  v1::Decision d;
  ASSERT_TRUE(first.WaitDecision(0, &d));
  RawRank second(Tcp(), "j", 0, 1);
  second.Open(first.session_id());
  EXPECT_EQ(first.WaitEnd().error_code(), grpc::StatusCode::ABORTED);
  ASSERT_TRUE(Eventually([&] { return daemon_->stats().sessions_open.load() <= 1; }));
  ASSERT_EQ(daemon_->stats().sessions_open.load(), 1);
  v1::ClientMessage stats;  // `second` did not register: first's unit ids
  stats.mutable_stats()->set_step(1);
  stats.mutable_stats()->add_unit_id(first.unit_ids()[0]);
  stats.mutable_stats()->add_sumsq(1.0);
  ASSERT_TRUE(second.Send(stats));
  ASSERT_TRUE(second.WaitDecision(1, &d));
}

TEST_F(DaemonTest, TwoJobsStayIsolated) {
  StartDaemon();
  const v1::ControllerConfig cfg = FastConfig();
  RawRank a(Tcp(), "job-a", 0, 1, "ta"), b(Unix(), "job-b", 0, 1, "tb");
  ASSERT_TRUE(a.Register({{"x"}, {"y"}}, nullptr, &cfg).ok());
  ASSERT_TRUE(b.Register({{"y"}, {"x"}}, nullptr, &cfg).ok());
  a.Open();
  b.Open();
  for (int64_t s = 0; s < 10; ++s) {
    ASSERT_TRUE(a.SendStats(s, {1.0, s == 8 ? 400.0 : 1.0}));
    ASSERT_TRUE(b.SendStats(s, {1.0, 1.0}));
  }
  v1::Decision da, db;
  ASSERT_TRUE(a.WaitDecision(9, &da));
  ASSERT_TRUE(b.WaitDecision(9, &db));
  EXPECT_EQ(da.recovery_size(), 1);
  EXPECT_EQ(db.recovery_size(), 0);
  EXPECT_EQ(listener_.EventsOf("job-b").size(), 0u);
  ASSERT_FALSE(listener_.EventsOf("job-a").empty());
  EXPECT_EQ(listener_.EventsOf("job-a")[0].unit(), "y");
  // Job b's token does not open job a.
  RawRank intruder(Tcp(), "job-a", 0, 1, "tb");
  EXPECT_EQ(intruder.Register({{"x"}}).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(DaemonTest, AcksAreCheckedAgainstTheSentDigest) {
  StartDaemon();
  RawRank a(Tcp(), "j", 0, 1);
  ASSERT_TRUE(a.Register({{"x"}}).ok());
  a.Open();
  ASSERT_TRUE(a.SendStats(0, {1.0}));
  v1::Decision d;
  ASSERT_TRUE(a.WaitDecision(0, &d));
  v1::ClientMessage ack;
  ack.mutable_ack()->set_step(1);
  ack.mutable_ack()->set_sequence(d.sequence());
  ack.mutable_ack()->set_digest(d.digest());
  ASSERT_TRUE(a.Send(ack));
  ack.mutable_ack()->set_digest(d.digest() ^ 1);
  ASSERT_TRUE(a.Send(ack));
  ASSERT_TRUE(a.SendStats(1, {1.0}));  // a round trip: acks were processed
  ASSERT_TRUE(a.WaitDecision(1, &d));
  EXPECT_EQ(listener_.ack_mismatches.load(), 1u);
}

// A stream whose hello has not reached a job (here: never sent) is not one
// of any job's sessions; shutdown must end it too instead of waiting out
// the grace period for it (it did, under load, with a hello in flight).
TEST_F(DaemonTest, ShutdownEndsStreamsThatBelongToNoJobYet) {
  StartDaemon();
  RawRank silent(Unix(), "j", 0, 1);
  silent.Open(0, /*hello=*/false);
  // The server must have the stream before shutdown for this to test it.
  ASSERT_TRUE(Eventually([&] { return daemon_->stats().sessions_open.load() >= 1; }));
  ASSERT_EQ(daemon_->stats().sessions_open.load(), 1);
  const auto t0 = std::chrono::steady_clock::now();
  daemon_->Shutdown(std::chrono::milliseconds(10000));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 5.0);
  const grpc::StatusCode code = silent.WaitEnd().error_code();
  EXPECT_TRUE(code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::CANCELLED) << code;
}

}  // namespace
}  // namespace gnmr::testing

namespace gnmr::testing {
namespace {

TEST_F(DaemonTest, ShutdownEndsStreamsPromptlyWithUnavailable) {
  StartDaemon();
  RawRank open(Unix(), "j", 0, 2), closed(Tcp(), "j", 1, 2);
  ASSERT_TRUE(open.Register({{"x"}}).ok());
  ASSERT_TRUE(closed.Register({{"x"}}).ok());
  open.Open();
  closed.Open();
  ASSERT_TRUE(open.SendStats(0, {1.0}));
  closed.Close();
  const auto t0 = std::chrono::steady_clock::now();
  // Ending the streams ourselves means the server need not use its grace.
  daemon_->Shutdown(std::chrono::milliseconds(10000));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 5.0);
  // The daemon ends it with UNAVAILABLE; under load the transport can close
  // before the trailers arrive, which the client sees as CANCELLED. Either
  // way the client reconnects.
  const grpc::StatusCode code = open.WaitEnd().error_code();
  EXPECT_TRUE(code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::CANCELLED) << code;
}

}  // namespace
}  // namespace gnmr::testing
