// DaemonMetrics: the /metrics endpoint over real HTTP, naming and label
// rules, job removal, RPC counts, scrape-time store figures, promtool.
#include "daemon/metrics/daemon_metrics.h"

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/metrics/metrics_scrape.h"
#include "tests/store/scratch_dir.h"
#include "tests/testing/manual_clock.h"

namespace gnmr {
namespace metrics {
namespace {

using testing_util::CountSeries;
using testing_util::HttpGet;
using testing_util::ParseSamples;

std::unique_ptr<DaemonMetrics> StartOnFreePort() {
  MetricsOptions options;
  options.listen = "127.0.0.1:0";
  options.version = "9.9.9-test";
  StatusOr<std::unique_ptr<DaemonMetrics>> m = DaemonMetrics::Start(options);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m.value()) : nullptr;
}

// A job with a little of everything, for the format checks.
void Populate(DaemonMetrics* m) {
  JobMetrics* jm = m->ForJob("train-\"7b\"");  // quotes must be escaped
  jm->SetWorldSize(2);
  v1::ClientOverhead o;
  o.set_overhead_ratio(0.01);
  jm->OnReport(0, 64, o);
  jm->UpdateUnits({{"layers.0.fc1", 3.5, 2.0, 0.5, true}, {"layers.1.fc1", 1.1, 1.0, 0.9, false}});
  ControllerConfig config;
  StatusOr<Controller> c = Controller::Create(config);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->AddUnit("layers.0.fc1").ok());
  Decision d;
  ASSERT_TRUE(c->Observe(0, {{0, 1.0, 1.0, 0, 0, 4}}, &d).ok());
  StepFigures f;
  f.decision_seconds = 0.003;
  jm->OnDecision(d, *c, f);
  m->RecordRpc("Register", StatusCode::kOk);
  m->SetStoreSources({[] {
                        return StoreFigures{3, 1, 10, 0, 0};
                      },
                      [](const std::string&) { return std::nullopt; }});
}

TEST(DaemonMetricsTest, ServesMetricsOverHttpOnAFreePort) {
  auto m = StartOnFreePort();
  ASSERT_NE(m, nullptr);
  ASSERT_GT(m->port(), 0);
  m->ForJob("j")->SetRanksConnected(2);
  const testing_util::HttpResponse r = HttpGet(m->port(), "/metrics");
  ASSERT_EQ(r.status, 200);
  auto samples = ParseSamples(r.body);
  EXPECT_EQ(samples["gnmr_build_info{version=\"9.9.9-test\"}"], 1);
  EXPECT_EQ(samples["gnmr_jobs"], 1);
  EXPECT_EQ(samples["gnmr_ranks_connected{job_id=\"j\"}"], 2);
  EXPECT_GT(samples["gnmr_start_time_seconds"], 1.6e9);
  EXPECT_NE(r.body.find("# TYPE gnmr_reports_total counter"), std::string::npos);
  EXPECT_NE(r.body.find("# TYPE gnmr_decision_latency_seconds histogram"), std::string::npos);
  // prometheus-cpp's own exposer_* families come first, then ours. The
  // gnmr_process_* figures (RSS, fds) change between two reads: left out.
  const auto stable = [](const std::string& text) {
    std::istringstream in(text);
    std::string out;
    for (std::string line; std::getline(in, line);) {
      if (line.find("gnmr_process_") == std::string::npos) out += line + "\n";
    }
    return out;
  };
  const std::string ours = stable(m->Render());
  const std::string body = stable(r.body);
  ASSERT_GE(body.size(), ours.size());
  EXPECT_EQ(body.substr(body.size() - ours.size()), ours);
  EXPECT_NE(r.body.find("# TYPE gnmr_process_resident_memory_bytes gauge"), std::string::npos);
}

TEST(DaemonMetricsTest, PortInUseIsUnavailableAndEmptyListenHasNoEndpoint) {
  auto first = StartOnFreePort();
  ASSERT_NE(first, nullptr);
  MetricsOptions options;
  options.listen = "127.0.0.1:" + std::to_string(first->port());
  StatusOr<std::unique_ptr<DaemonMetrics>> second = DaemonMetrics::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(options.listen), std::string::npos);

  options.listen = "";
  StatusOr<std::unique_ptr<DaemonMetrics>> none = DaemonMetrics::Start(options);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)->port(), 0);
  EXPECT_NE((*none)->Render().find("gnmr_jobs 0"), std::string::npos);
}

TEST(DaemonMetricsTest, NamingRulesAndNoJobLabel) {
  auto m = StartOnFreePort();
  ASSERT_NE(m, nullptr);
  Populate(m.get());
  const std::string text = HttpGet(m->port(), "/metrics").body;
  ASSERT_FALSE(text.empty());
  const std::regex job_label("[{,]job=\"");
  const std::regex type_line("^# TYPE (\\S+) (\\S+)$");
  std::istringstream in(text);
  size_t families = 0;
  for (std::string line; std::getline(in, line);) {
    EXPECT_FALSE(std::regex_search(line, job_label)) << line;
    std::smatch t;
    if (!std::regex_match(line, t, type_line)) continue;
    const std::string name = t[1], type = t[2];
    if (name.rfind("exposer_", 0) == 0) continue;  // prometheus-cpp's own
    ++families;
    EXPECT_EQ(name.rfind("gnmr_", 0), 0u) << name;
    const bool total = name.size() > 6 && name.substr(name.size() - 6) == "_total";
    EXPECT_EQ(type == "counter", total) << name << " is a " << type;
    if (type == "histogram") {
      EXPECT_EQ(name.substr(name.size() - 8), "_seconds") << name;
    }
  }
  EXPECT_GT(families, 30u);
  EXPECT_NE(text.find("job_id=\"train-\\\"7b\\\"\""), std::string::npos);
}

TEST(DaemonMetricsTest, RemoveJobDropsEverySeriesOfTheJob) {
  auto m = StartOnFreePort();
  ASSERT_NE(m, nullptr);
  Populate(m.get());
  m->ForJob("other")->SetWorldSize(8);
  EXPECT_EQ(m->num_jobs(), 2u);
  m->RemoveJob("train-\"7b\"");
  m->RemoveJob("never-existed");
  const std::string text = m->Render();
  EXPECT_EQ(text.find("train-"), std::string::npos) << text;
  auto samples = ParseSamples(text);
  EXPECT_EQ(samples["gnmr_jobs"], 1);
  EXPECT_EQ(samples["gnmr_ranks_expected{job_id=\"other\"}"], 8);
  // Recreating the job starts from zero.
  m->ForJob("train-\"7b\"");
  samples = ParseSamples(m->Render());
  EXPECT_EQ(samples["gnmr_decisions_total{job_id=\"train-\\\"7b\\\"\"}"], 0);
}

TEST(DaemonMetricsTest, RpcCountsByMethodAndCode) {
  auto m = StartOnFreePort();
  ASSERT_NE(m, nullptr);
  m->RecordRpc("Register", StatusCode::kOk);
  m->RecordRpc("Register", StatusCode::kOk);
  m->RecordRpc("Register", StatusCode::kInvalidArgument);
  m->RecordRpc("Admin.ListJobs", StatusCode::kUnauthenticated);
  auto samples = ParseSamples(m->Render());
  EXPECT_EQ(samples["gnmr_rpcs_total{code=\"OK\",method=\"Register\"}"], 2);
  EXPECT_EQ(samples["gnmr_rpcs_total{code=\"INVALID_ARGUMENT\",method=\"Register\"}"], 1);
  EXPECT_EQ(samples["gnmr_rpcs_total{code=\"UNAUTHENTICATED\","
                    "method=\"Admin.ListJobs\"}"],
            1);
}

TEST(DaemonMetricsTest, SnapshotAgeAndStoreCountersAtScrapeTime) {
  auto m = StartOnFreePort();
  ASSERT_NE(m, nullptr);
  m->ForJob("fresh");
  m->ForJob("never");
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  m->SetStoreSources({[] {
                        return StoreFigures{5, 2, 100, 3, 1};
                      },
                      [now](const std::string& job) -> std::optional<double> {
                        if (job == "fresh") return now - 30.0;
                        return std::nullopt;
                      }});
  auto samples = ParseSamples(HttpGet(m->port(), "/metrics").body);
  EXPECT_NEAR(samples["gnmr_snapshot_age_seconds{job_id=\"fresh\"}"], 30.0, 5.0);
  EXPECT_GE(samples["gnmr_snapshot_age_seconds{job_id=\"never\"}"], 0.0);
  EXPECT_LT(samples["gnmr_snapshot_age_seconds{job_id=\"never\"}"], 5.0);
  EXPECT_EQ(samples["gnmr_snapshot_writes_total"], 5);
  EXPECT_EQ(samples["gnmr_snapshot_failures_total"], 2);
  EXPECT_EQ(samples["gnmr_events_written_total"], 100);
  EXPECT_EQ(samples["gnmr_events_dropped_total"], 3);
  EXPECT_EQ(samples["gnmr_event_write_failures_total"], 1);
  m->RemoveJob("never");
  samples = ParseSamples(m->Render());
  EXPECT_EQ(CountSeries(samples, "gnmr_snapshot_age_seconds{"), 1u);
}

// The ages are read on gnmrd's clock (MetricsOptions::clock): exact, with
// time moved by the test instead of waited for.
TEST(DaemonMetricsTest, StartTimeAndSnapshotAgesFollowTheDaemonsClock) {
  gnmr::testing::ManualClock clock;
  MetricsOptions options;
  options.listen = "";  // Render() only
  options.clock = &clock;
  StatusOr<std::unique_ptr<DaemonMetrics>> started = DaemonMetrics::Start(options);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  DaemonMetrics& m = **started;
  const double t0 = clock.UnixSeconds();
  m.ForJob("fresh");
  clock.Advance(std::chrono::seconds(40));
  m.ForJob("never");  // appears 40 s later
  m.SetStoreSources({[] { return StoreFigures{}; },
                     [t0](const std::string& job) -> std::optional<double> {
                       if (job == "fresh") return t0 + 10.0;  // snapshot at t0 + 10 s
                       return std::nullopt;
                     }});
  clock.Advance(std::chrono::seconds(60));
  auto samples = ParseSamples(m.Render());
  EXPECT_NEAR(samples["gnmr_start_time_seconds"], t0, 1e-3);
  EXPECT_NEAR(samples["gnmr_snapshot_age_seconds{job_id=\"fresh\"}"], 90.0, 1e-3);
  EXPECT_NEAR(samples["gnmr_snapshot_age_seconds{job_id=\"never\"}"], 60.0, 1e-3);
}

TEST(DaemonMetricsTest, PromtoolAcceptsTheOutput) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not installed (Debian package 'prometheus')";
  }
  auto m = StartOnFreePort();
  ASSERT_NE(m, nullptr);
  Populate(m.get());
  testing_util::ScratchDir dir;
  const std::string path = dir / "metrics.txt";
  testing_util::WriteFileOrFail(path, HttpGet(m->port(), "/metrics").body);
  const std::string cmd = "promtool check metrics < " + path + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  const int rc = ::pclose(p);
  EXPECT_EQ(rc, 0) << out;
}

}  // namespace
}  // namespace metrics
}  // namespace gnmr
