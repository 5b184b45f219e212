// Job lifecycle in the daemon core (real gRPC, in-process daemon): Admin
// DeleteJob and its access rules, live ranks that are told and start the
// job anew (a newer generation), no Register racing the cleanup, reports in
// flight that cannot bring the deleted job's files or series back, the job
// cap that deletion and idle expiry free again.
#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <thread>

#include <gtest/gtest.h>

#include "daemon/metrics/daemon_metrics.h"
#include "daemon/store/event_log.h"
#include "daemon/store/job_dir.h"
#include "daemon/store/snapshot_store.h"
#include "daemon/store/snapshot_writer.h"
#include "programs/gnmrd/side_effects.h"
#include "tests/daemon/test_daemon.h"
#include "tests/metrics/metrics_scrape.h"
#include "tests/store/scratch_dir.h"

namespace gnmr::testing {
namespace {

const std::vector<RawRank::Unit>& Units() {
  static const std::vector<RawRank::Unit> units = {{"a"}, {"b"}};
  return units;
}

class JobDeleteTest : public DaemonTest {
 protected:
  grpc::Status Delete(const std::string& job, const std::string& token, bool over_unix = false,
                      v1::DeleteJobResponse* out = nullptr) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("x-gnmr-admin-token", token);
    v1::DeleteJobRequest req;
    req.set_job_id(job);
    v1::DeleteJobResponse resp;
    grpc::Status s = v1::Admin::NewStub(over_unix ? Unix() : Tcp())->DeleteJob(&ctx, req, &resp);
    if (out) *out = resp;
    return s;
  }
  std::vector<std::string> JobIds() { return ListJobIds(Tcp()); }
  // A rank of a one-rank job, registered (not attached).
  grpc::Status RegisterJob(const std::string& job) {
    RawRank r(Tcp(), job, 0, 1);
    return r.Register(Units());
  }
  // Steps [from, to) on every rank, each to its decision.
  static void Run(std::vector<std::unique_ptr<RawRank>>& ranks, int64_t from, int64_t to) {
    for (int64_t s = from; s < to; ++s) {
      for (auto& r : ranks) ASSERT_TRUE(r->SendStats(s, {1.0, 1.0}));
      for (auto& r : ranks) {
        v1::Decision d;
        ASSERT_TRUE(r->WaitDecision(s, &d)) << "step " << s;
      }
    }
  }
};

TEST_F(JobDeleteTest, DeleteNeedsTheAdminToken) {
  StartDaemon();
  ASSERT_TRUE(RegisterJob("j").ok());
  grpc::Status s = Delete("j", "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  s = Delete("j", "wrong");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  // With an admin token configured, the Unix socket needs it too.
  s = Delete("j", "", /*over_unix=*/true);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_EQ(JobIds(), std::vector<std::string>{"j"});
  EXPECT_TRUE(listener_.Removed().empty());

  v1::DeleteJobResponse resp;
  s = Delete("j", admin_token_, false, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.streams_closed(), 0u);
  EXPECT_TRUE(JobIds().empty());
  EXPECT_EQ(listener_.Removed(), std::vector<std::string>{"j"});
  s = Delete("j", admin_token_);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "unknown job 'j'");
}

TEST_F(JobDeleteTest, WithoutAnAdminTokenOnlyTheUnixSocketDeletes) {
  admin_token_ = "";
  StartDaemon();
  ASSERT_TRUE(RegisterJob("j").ok());
  grpc::Status s = Delete("j", "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  ASSERT_TRUE(Delete("j", "", /*over_unix=*/true).ok());
  EXPECT_TRUE(JobIds().empty());
}

TEST_F(JobDeleteTest, LiveRanksAreToldAndStartTheJobAnewInANewerGeneration) {
  StartDaemon();
  const v1::ControllerConfig cfg = FastConfig();
  std::vector<std::unique_ptr<RawRank>> ranks;
  uint64_t generation = 0;
  for (uint32_t r = 0; r < 2; ++r) {
    ranks.push_back(std::make_unique<RawRank>(Tcp(), "job", r, 2));
    v1::RegisterResponse resp;
    ASSERT_TRUE(ranks[r]->Register(Units(), &resp, &cfg).ok());
    generation = resp.generation();
    ranks[r]->Open();
  }
  Run(ranks, 0, 8);

  v1::DeleteJobResponse resp;
  ASSERT_TRUE(Delete("job", admin_token_, false, &resp).ok());
  EXPECT_EQ(resp.streams_closed(), 2u);
  for (auto& r : ranks) {
    const grpc::Status ended = r->WaitEnd();
    EXPECT_EQ(ended.error_code(), grpc::StatusCode::ABORTED);
    EXPECT_EQ(ended.error_message(),
              "job 'job' was deleted by an operator; a rank still running registers it again "
              "as a new job");
  }

  // Registering again starts a new job: nothing decided yet, and a newer
  // generation, so a client drops the decisions of the old job it holds.
  ranks.clear();
  for (uint32_t r = 0; r < 2; ++r) {
    ranks.push_back(std::make_unique<RawRank>(Tcp(), "job", r, 2));
    v1::RegisterResponse again;
    ASSERT_TRUE(ranks[r]->Register(Units(), &again, &cfg).ok());
    EXPECT_EQ(again.last_step(), -1);
    EXPECT_EQ(again.generation(), generation + 1);
    ranks[r]->Open();
  }
  Run(ranks, 0, 3);  // the old job's steps are not "late" for the new one
  v1::Decision d;
  ASSERT_TRUE(ranks[0]->WaitDecision(0, &d));
  EXPECT_EQ(d.generation(), generation + 1);
  EXPECT_EQ(d.sequence(), 1u);
}

// Blocks OnJobRemoved until released, to look at the daemon mid-removal.
class GatedRemoval : public RecordingListener {
 public:
  Status OnJobRemoved(const std::string& job) override {
    std::unique_lock<std::mutex> lock(gate_mu);
    entered = true;
    gate_cv.notify_all();
    gate_cv.wait(lock, [&] { return open; });
    return RecordingListener::OnJobRemoved(job);
  }
  void Open() {
    std::lock_guard<std::mutex> lock(gate_mu);
    open = true;
    gate_cv.notify_all();
  }
  bool WaitEntered() {
    std::unique_lock<std::mutex> lock(gate_mu);
    return gate_cv.wait_for(lock, std::chrono::seconds(10), [&] { return entered; });
  }
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool entered = false, open = false;
};

TEST_F(JobDeleteTest, RegisterDuringTheCleanupIsToldToRetry) {
  GatedRemoval gate;
  listener_.forward = &gate;
  StartDaemon();
  ASSERT_TRUE(RegisterJob("j").ok());
  grpc::Status deleted;
  std::thread deleter([&] { deleted = Delete("j", admin_token_); });
  ASSERT_TRUE(gate.WaitEntered());
  const grpc::Status during = RegisterJob("j");
  EXPECT_EQ(during.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(during.error_message(), "job 'j' is being deleted; register again in a moment");
  EXPECT_EQ(Delete("j", admin_token_).error_code(), grpc::StatusCode::UNAVAILABLE);
  gate.Open();
  deleter.join();
  ASSERT_TRUE(deleted.ok()) << deleted.error_message();
  EXPECT_TRUE(RegisterJob("j").ok());
  EXPECT_EQ(JobIds(), std::vector<std::string>{"j"});
  daemon_->Shutdown(std::chrono::milliseconds(100));  // before `gate` goes
}

TEST_F(JobDeleteTest, ReportsInFlightCannotBringTheFilesOrSeriesBack) {
  testing_util::ScratchDir dir;
  store::SnapshotStore snapshots(dir.path());
  store::SnapshotWriter writer(&snapshots);
  store::EventLog events(dir.path());
  metrics::MetricsOptions mo;
  mo.listen = "";
  std::unique_ptr<metrics::DaemonMetrics> metrics =
      std::move(metrics::DaemonMetrics::Start(mo)).value();
  DaemonSideEffects effects(&writer, &events, metrics.get(), dir.path());
  listener_.forward = &effects;
  DaemonOptions opts;
  opts.registry.job.snapshot_every_steps = 1;  // a snapshot request every step
  StartDaemon(opts);

  RawRank rank(Tcp(), "job", 0, 1);
  v1::ControllerConfig cfg = FastConfig();
  ASSERT_TRUE(rank.Register(Units(), nullptr, &cfg).ok());
  rank.Open();
  // Reports stream in (spikes: admissions, events, snapshots) while the job
  // is deleted under them.
  std::atomic<bool> stop{false};
  std::thread sender([&] {
    for (int64_t s = 0; !stop.load(); ++s) {
      if (!rank.SendStats(s, {s % 7 == 6 ? 500.0 : 1.0, 1.0})) break;
    }
  });
  // Twenty decisions or more, whichever steps: the sender floods, and a
  // reader that falls 256 messages behind (a loaded machine) gets the newest
  // decisions only (decision_queue.h), so waiting for one given step could
  // wait forever.
  if (!rank.WaitMessages(21, std::chrono::seconds(20))) {
    stop = true;
    sender.join();  // not left running into std::terminate
    const std::vector<v1::Decision> got = rank.decisions();
    FAIL() << "20 decisions did not come in 20 s: " << got.size() << " came, the newest for step "
           << (got.empty() ? -1 : got.back().observed_step());
  }
  const std::string job_dir = store::JobDir(dir.path(), "job");
  struct stat st;
  ASSERT_TRUE(writer.Flush().ok());
  ASSERT_EQ(::stat(job_dir.c_str(), &st), 0) << "the job had files before";
  ASSERT_GT(testing_util::CountSeries(testing_util::ParseSamples(metrics->Render()),
                                      "gnmr_last_step{job_id=\"job\""),
            0u);

  ASSERT_TRUE(Delete("job", admin_token_).ok());
  stop = true;
  sender.join();
  EXPECT_EQ(rank.WaitEnd().error_code(), grpc::StatusCode::ABORTED);
  ASSERT_TRUE(writer.Flush().ok());
  ASSERT_TRUE(events.Flush().ok());
  EXPECT_NE(::stat(job_dir.c_str(), &st), 0) << "files of the deleted job came back";
  const std::string text = metrics->Render();
  EXPECT_EQ(text.find("job_id=\"job\""), std::string::npos) << text;
  EXPECT_TRUE(events.List("job", 0, 0).empty());
  StatusOr<std::vector<std::string>> listed = snapshots.ListJobs();
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
  daemon_->Shutdown(std::chrono::milliseconds(100));  // before the store goes
}

TEST_F(JobDeleteTest, TheJobCapIsFreedByDeletionAndByIdleExpiry) {
  DaemonOptions opts;
  opts.registry.max_jobs = 1024;
  opts.registry.idle_expiry = std::chrono::minutes(1);
  // No ticker: expiry is driven below with a chosen "now", so the test
  // does not depend on how fast 1024 registrations go.
  opts.tick_interval = std::chrono::hours(1);
  StartDaemon(opts);
  RawRank busy(Tcp(), "busy", 0, 1);
  ASSERT_TRUE(busy.Register(Units()).ok());
  busy.Open();
  ASSERT_TRUE(busy.WaitMessages(1));  // attached: its GenerationStart came
  for (int i = 0; i < 1023; ++i) {
    ASSERT_TRUE(RegisterJob("junk-" + std::to_string(i)).ok()) << i;
  }
  grpc::Status full = RegisterJob("new");
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << full.error_message();

  ASSERT_TRUE(Delete("junk-0", admin_token_).ok());
  ASSERT_TRUE(RegisterJob("new").ok());
  EXPECT_EQ(RegisterJob("another").error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  const auto now = Job::Clock::now();
  EXPECT_TRUE(daemon_->registry().ExpireIdle(now + std::chrono::seconds(30)).empty());
  const std::vector<std::string> expired =
      daemon_->registry().ExpireIdle(now + std::chrono::minutes(2));
  EXPECT_EQ(expired.size(), 1023u);  // junk-1..1022 and "new"; not "busy"
  EXPECT_EQ(JobIds(), std::vector<std::string>{"busy"});
  ASSERT_TRUE(RegisterJob("another").ok());
  // The busy job's stream was never touched.
  ASSERT_TRUE(busy.SendStats(0, {1.0, 1.0}));
  v1::Decision d;
  EXPECT_TRUE(busy.WaitDecision(0, &d, std::chrono::seconds(10)));
}

}  // namespace
}  // namespace gnmr::testing
