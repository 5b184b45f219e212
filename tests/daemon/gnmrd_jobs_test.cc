// Job lifecycle of the real gnmrd binary: a deleted job's /metrics series
// are gone and a restart (graceful or kill -9) does not bring it back; an
// idle job expires by itself (a short job_idle_expiry, polled with a
// bounded wait) while a busy one stays; event logs rotate by size and the
// reload after a restart reads across the rotated file.
#include <dirent.h>
#include <sys/stat.h>

#include <functional>
#include <sstream>

#include <gtest/gtest.h>

#include "controller/publish/event_json.h"
#include "daemon/store/job_dir.h"
#include "tests/daemon/gnmrd_process.h"
#include "tests/daemon/raw_rank.h"
#include "tests/daemon/test_daemon.h"
#include "tests/metrics/metrics_scrape.h"
#include "tests/testing/eventually.h"

namespace gnmr::testing {
namespace {

using testing::Eventually;

using Clock = std::chrono::steady_clock;

const std::vector<RawRank::Unit>& Units() {
  static const std::vector<RawRank::Unit> units = {{"a"}, {"b"}};
  return units;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

size_t CountLines(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

// A one-rank job, attached, with steps [0, steps) decided. The stream stays
// open while the returned rank lives.
std::unique_ptr<RawRank> Drive(GnmrdProcess& gnmrd, const std::string& job, int64_t steps) {
  auto rank = std::make_unique<RawRank>(gnmrd.Channel(), job, 0, 1);
  const v1::ControllerConfig cfg = FastConfig();
  EXPECT_TRUE(rank->Register(Units(), nullptr, &cfg).ok());
  rank->Open();
  for (int64_t s = 0; s < steps; ++s) {
    EXPECT_TRUE(rank->SendStats(s, {1.0, s == steps - 1 ? 900.0 : 1.0}));
    v1::Decision d;
    EXPECT_TRUE(rank->WaitDecision(s, &d)) << job << " step " << s;
  }
  return rank;
}

class GnmrdJobs : public ::testing::Test {
 protected:
  std::unique_ptr<v1::Admin::Stub> Admin() { return v1::Admin::NewStub(gnmrd_.Channel()); }
  std::vector<std::string> JobIds() { return ListJobIds(gnmrd_.Channel()); }
  // No admin token is configured: the socket may mutate.
  grpc::Status Delete(const std::string& job) {
    grpc::ClientContext ctx;
    v1::DeleteJobRequest req;
    req.set_job_id(job);
    v1::DeleteJobResponse resp;
    return Admin()->DeleteJob(&ctx, req, &resp);
  }
  // The /metrics port from gnmrd's start-up line ("... (port N)").
  int MetricsPort() {
    const std::string log = gnmrd_.log();
    const size_t at = log.rfind("(port ");
    return at == std::string::npos ? 0 : std::atoi(log.c_str() + at + 6);
  }
  std::map<std::string, double> Scrape() {
    const testing_util::HttpResponse r = testing_util::HttpGet(MetricsPort(), "/metrics", 10);
    EXPECT_EQ(r.status, 200);
    return testing_util::ParseSamples(r.body);
  }
  static size_t SeriesOf(const std::map<std::string, double>& samples, const std::string& job) {
    size_t n = 0;
    for (const auto& [series, value] : samples) {
      n += series.find("job_id=\"" + job + "\"") != std::string::npos ? 1 : 0;
    }
    return n;
  }
  std::string JobDir(const std::string& job) { return store::JobDir(gnmrd_.state_dir(), job); }

  GnmrdProcess gnmrd_;
};

TEST_F(GnmrdJobs, DeletedJobLosesItsSeriesAndNoRestartRestoresIt) {
  ASSERT_TRUE(gnmrd_.Start({"--metrics", "127.0.0.1:0"}, "info")) << gnmrd_.log();
  auto a = Drive(gnmrd_, "a", 8);
  auto b = Drive(gnmrd_, "b", 8);
  std::map<std::string, double> before = Scrape();
  ASSERT_GT(SeriesOf(before, "a"), 5u);
  ASSERT_GT(SeriesOf(before, "b"), 5u);
  EXPECT_EQ(before["gnmr_jobs"], 2);
  // (Snapshots are written in the background.)
  ASSERT_TRUE(
      Eventually([&] { return Exists(JobDir("a") + "/snapshot.pb"); }, std::chrono::seconds(10)));

  ASSERT_TRUE(Delete("a").ok());
  EXPECT_EQ(a->WaitEnd().error_code(), grpc::StatusCode::ABORTED);
  std::map<std::string, double> after = Scrape();
  EXPECT_EQ(SeriesOf(after, "a"), 0u);
  EXPECT_GT(SeriesOf(after, "b"), 5u);  // the other job keeps its series
  EXPECT_EQ(after["gnmr_jobs"], 1);
  EXPECT_FALSE(Exists(JobDir("a")));
  EXPECT_NE(gnmrd_.log().find("job a: deleted by an operator (1 stream(s) closed)"),
            std::string::npos)
      << gnmrd_.log();

  // A graceful stop snapshots every job it has: not the deleted one.
  b.reset();
  ASSERT_EQ(gnmrd_.Kill(SIGTERM), 0) << gnmrd_.log();
  ASSERT_TRUE(gnmrd_.Start({}, "info")) << gnmrd_.log();
  EXPECT_EQ(JobIds(), std::vector<std::string>{"b"});
  // Deleted, then kill -9 at once: the deletion was on disk already.
  ASSERT_TRUE(Delete("b").ok());
  gnmrd_.Kill(SIGKILL);
  ASSERT_TRUE(gnmrd_.Start({}, "info")) << gnmrd_.log();
  EXPECT_TRUE(JobIds().empty());
  EXPECT_FALSE(Exists(JobDir("b")));
}

TEST_F(GnmrdJobs, IdleJobExpiresBusyJobStays) {
  ASSERT_TRUE(gnmrd_.Start({"--job-idle-expiry", "1s"}, "info")) << gnmrd_.log();
  auto busy = Drive(gnmrd_, "busy", 3);
  Drive(gnmrd_, "idle", 3);  // its stream ends here
  // (The log line follows the removal.)
  ASSERT_TRUE(Eventually(
      [&] {
        return JobIds() == std::vector<std::string>{"busy"} &&
               gnmrd_.log().find("job idle: expired after ") != std::string::npos;
      },
      std::chrono::seconds(30)))
      << gnmrd_.log();
  EXPECT_NE(gnmrd_.log().find("(job_idle_expiry 1.0s)"), std::string::npos) << gnmrd_.log();
  EXPECT_FALSE(Exists(JobDir("idle")));
  EXPECT_TRUE(Exists(JobDir("busy") + "/snapshot.pb"));  // files of a live job stay
  // The busy job, attached all along, still decides.
  ASSERT_TRUE(busy->SendStats(3, {1.0, 1.0}));
  v1::Decision d;
  EXPECT_TRUE(busy->WaitDecision(3, &d));
  EXPECT_EQ(JobIds(), std::vector<std::string>{"busy"});
}

TEST_F(GnmrdJobs, EventLogRotatesAndTheReloadReadsAcrossBothFiles) {
  ASSERT_TRUE(gnmrd_.Start({"--event-log-max-bytes", "4096"}, "info")) << gnmrd_.log();
  Drive(gnmrd_, "j", 3);
  // Every config change is one event line (~250 bytes).
  for (int i = 0; i < 80; ++i) {
    grpc::ClientContext ctx;
    v1::SetConfigRequest req;
    req.set_job_id("j");
    *req.mutable_config() = FastConfig(/*max_o=*/1 + i % 3);
    v1::SetConfigResponse resp;
    ASSERT_TRUE(Admin()->SetConfig(&ctx, req, &resp).ok());
    if (i % 10 == 9) std::this_thread::sleep_for(std::chrono::milliseconds(250));  // a flush
  }
  ASSERT_EQ(gnmrd_.Kill(SIGTERM), 0) << gnmrd_.log();  // flushes the event log
  const std::string current = ReadText(JobDir("j") + "/events.jsonl");
  const std::string rotated = ReadText(JobDir("j") + "/events.jsonl.1");
  ASSERT_FALSE(rotated.empty()) << "no rotation";
  EXPECT_FALSE(Exists(JobDir("j") + "/events.jsonl.2"));
  const size_t on_disk = CountLines(current) + CountLines(rotated);
  EXPECT_LT(on_disk, 80u) << "older events were not dropped";

  ASSERT_TRUE(gnmrd_.Start({"--event-log-max-bytes", "4096"}, "info")) << gnmrd_.log();
  grpc::ClientContext ctx;
  v1::ListEventsRequest req;
  req.set_job_id("j");
  v1::ListEventsResponse resp;
  ASSERT_TRUE(Admin()->ListEvents(&ctx, req, &resp).ok());
  // Both files (the restart's own "generation" event comes on top).
  ASSERT_GE(static_cast<size_t>(resp.events_size()), on_disk);
  EXPECT_GT(static_cast<size_t>(resp.events_size()), CountLines(current) + 1);
  std::istringstream first_line(rotated);
  std::string line;
  std::getline(first_line, line);
  StatusOr<v1::Event> oldest = ParseEventJsonLine(line);
  ASSERT_TRUE(oldest.ok()) << line;
  EXPECT_EQ(resp.events(0).SerializeAsString(), oldest->SerializeAsString())
      << line << " vs " << resp.events(0).ShortDebugString();
}

}  // namespace
}  // namespace gnmr::testing
