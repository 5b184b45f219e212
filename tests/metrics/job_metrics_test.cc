// JobMetrics driven by a real controller: values agree with the
// controller's own counters, per-unit series stay bounded, restored
// controllers do not show their history as a burst.
#include "daemon/metrics/job_metrics.h"

#include <cmath>
#include <limits>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "daemon/metrics/daemon_metrics.h"
#include "tests/metrics/metrics_scrape.h"

namespace gnmr {
namespace metrics {
namespace {

using testing_util::CountSeries;
using testing_util::ParseSamples;

// A controller with `units` units ("u0", "u1", ...) and quick triggers.
Controller MakeController(int units, int max_o, DeniedTreatment denied = DeniedTreatment::kNone) {
  ControllerConfig config;
  config.warmup = 3;
  config.max_o = max_o;
  config.lock_steps = 4;
  config.denied = denied;
  if (denied == DeniedTreatment::kClip) config.lag = 0;  // clip needs lag 0
  StatusOr<Controller> c = Controller::Create(config);
  EXPECT_TRUE(c.ok());
  for (int i = 0; i < units; ++i) {
    EXPECT_TRUE(c->AddUnit("u" + std::to_string(i)).ok());
  }
  return std::move(c.value());
}

// One step in which each unit spikes with probability `p`.
Decision Step(Controller* c, int64_t step, std::mt19937* rng, double p) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<UnitSample> samples;
  for (uint32_t id = 0; id < c->num_units(); ++id) {
    const double spike = step > 3 && u(*rng) < p ? 100.0 : 1.0;
    samples.push_back({id, spike * (1.0 + 0.01 * u(*rng)), 1.0, 0, 0, 10});
  }
  Decision d;
  EXPECT_TRUE(c->Observe(step, samples, &d).ok());
  return d;
}

std::unique_ptr<DaemonMetrics> NoEndpoint(size_t top_k) {
  MetricsOptions options;
  options.listen = "";
  options.top_k_units = top_k;
  options.unit_refresh = std::chrono::milliseconds(0);
  StatusOr<std::unique_ptr<DaemonMetrics>> m = DaemonMetrics::Start(options);
  EXPECT_TRUE(m.ok());
  return std::move(m.value());
}

// denied: clip: the clipped denials have their own series and are still
// denials.
TEST(JobMetricsTest, DeniedClipsAreCountedApart) {
  auto m = NoEndpoint(10);
  JobMetrics* jm = m->ForJob("j");
  Controller c = MakeController(20, 2, DeniedTreatment::kClip);
  std::mt19937 rng(7);
  for (int64_t t = 0; t < 60; ++t) jm->OnDecision(Step(&c, t, &rng, 0.05), c, StepFigures());
  const ControllerStats& s = c.stats();
  ASSERT_GT(s.denied_clips, 0u);
  EXPECT_EQ(s.denied_clips, s.denials);  // lag 0 throughout: every denial clipped
  auto samples = ParseSamples(m->Render());
  const std::string j = "{job_id=\"j\"}";
  EXPECT_EQ(samples["gnmr_denied_clips_total" + j], static_cast<double>(s.denied_clips));
  EXPECT_EQ(samples["gnmr_denials_total" + j], static_cast<double>(s.denials));
}

TEST(JobMetricsTest, DecisionFiguresMatchTheController) {
  auto m = NoEndpoint(10);
  JobMetrics* jm = m->ForJob("j");
  EXPECT_EQ(m->ForJob("j"), jm);  // cached
  Controller c = MakeController(20, 2);
  std::mt19937 rng(7);
  for (int64_t t = 0; t < 60; ++t) {
    const Decision d = Step(&c, t, &rng, 0.05);
    StepFigures f;
    f.decision_seconds = 0.002;
    f.aggregation_seconds = 0.0001;
    f.broadcast_seconds = 0.0005;
    f.incomplete_units = t % 10 == 0 ? 3 : 0;
    f.by_deadline = t % 10 == 0;
    jm->OnDecision(d, c, f);
  }
  const ControllerStats& s = c.stats();
  ASSERT_GT(s.admissions(), 0u);
  ASSERT_GT(s.denials, 0u);
  auto samples = ParseSamples(m->Render());
  const std::string j = "{job_id=\"j\"}";
  double admissions = 0;
  for (const auto& [series, v] : samples) {
    if (series.rfind("gnmr_admissions_total{", 0) == 0) admissions += v;
  }
  EXPECT_EQ(admissions, static_cast<double>(s.admissions()));
  EXPECT_EQ(samples["gnmr_admissions_total{action=\"promote\",job_id=\"j\","
                    "trigger=\"gnmr\"}"],
            static_cast<double>(s.admissions_by_trigger[1]));
  EXPECT_EQ(samples["gnmr_denials_total" + j], static_cast<double>(s.denials));
  EXPECT_EQ(samples["gnmr_denied_clips_total" + j], 0);  // denied: none
  EXPECT_EQ(samples["gnmr_releases_total" + j], static_cast<double>(s.releases));
  EXPECT_EQ(samples["gnmr_unit_steps_total" + j], static_cast<double>(s.unit_steps_observed));
  EXPECT_EQ(samples["gnmr_unit_steps_in_recovery_total" + j],
            static_cast<double>(s.unit_steps_in_force));
  EXPECT_DOUBLE_EQ(samples["gnmr_recovery_fraction" + j], s.recovery_fraction());
  EXPECT_EQ(samples["gnmr_decisions_total" + j], 60);
  EXPECT_EQ(samples["gnmr_last_step" + j], 59);
  EXPECT_EQ(samples["gnmr_units" + j], 20);
  EXPECT_EQ(samples["gnmr_max_o" + j], 2);
  EXPECT_EQ(samples["gnmr_units_in_recovery" + j], static_cast<double>(c.recovery().size()));
  EXPECT_EQ(samples["gnmr_incomplete_steps_total" + j], 6);
  EXPECT_EQ(samples["gnmr_incomplete_unit_steps_total" + j], 18);
  EXPECT_EQ(samples["gnmr_decision_latency_seconds_count" + j], 60);
  EXPECT_EQ(samples["gnmr_decision_latency_seconds_bucket{job_id=\"j\","
                    "le=\"0.0025\"}"],
            60);
  EXPECT_EQ(samples["gnmr_decision_latency_seconds_bucket{job_id=\"j\","
                    "le=\"0.001\"}"],
            0);
  EXPECT_EQ(samples["gnmr_aggregation_seconds_count" + j], 60);
  EXPECT_EQ(samples["gnmr_decision_broadcast_seconds_count" + j], 60);
  EXPECT_EQ(samples["gnmr_decision_broadcast_seconds_bucket{job_id=\"j\",le=\"0.001\"}"], 60);
}

TEST(JobMetricsTest, ReportsRanksAndClientFigures) {
  auto m = NoEndpoint(10);
  JobMetrics* jm = m->ForJob("j");
  jm->SetWorldSize(4);
  jm->SetRanksConnected(3);
  v1::ClientOverhead o;
  o.set_overhead_ratio(0.02);
  o.set_dropped_reports(5);
  o.set_missed_decisions(2);
  jm->OnReport(1, 100, o);
  o.set_dropped_reports(7);
  jm->OnReport(1, 150, o);
  o.set_dropped_reports(1);  // the client restarted: its count began anew
  o.set_overhead_ratio(0.03);
  jm->OnReport(1, 50, o);
  jm->OnReport(2, 10, v1::ClientOverhead());
  jm->OnLateReport();
  jm->OnAckMismatch();
  jm->OnAckMismatch();
  jm->OnDecisionFailed();
  auto samples = ParseSamples(m->Render());
  const std::string j = "{job_id=\"j\"}";
  const std::string r1 = "{job_id=\"j\",rank=\"1\"}";
  EXPECT_EQ(samples["gnmr_ranks_expected" + j], 4);
  EXPECT_EQ(samples["gnmr_ranks_connected" + j], 3);
  EXPECT_EQ(samples["gnmr_reports_total" + j], 4);
  EXPECT_EQ(samples["gnmr_report_bytes_total" + j], 310);
  EXPECT_EQ(samples["gnmr_late_reports_total" + j], 1);
  EXPECT_EQ(samples["gnmr_ack_mismatches_total" + j], 2);
  EXPECT_EQ(samples["gnmr_decision_failures_total" + j], 1);
  EXPECT_DOUBLE_EQ(samples["gnmr_client_overhead_ratio" + r1], 0.03);
  EXPECT_EQ(samples["gnmr_client_dropped_reports_total" + r1], 8);
  EXPECT_EQ(samples["gnmr_client_missed_decisions_total" + r1], 2);
  EXPECT_EQ(samples.count("gnmr_client_overhead_ratio{job_id=\"j\",rank=\"2\"}"), 1u);
}

// The overhead figures are untrusted client input: NaN, negative or
// "unavailable" ratios leave the gauge alone; a ratio above 1 is clamped.
TEST(JobMetricsTest, OverheadRatioIsValidated) {
  auto m = NoEndpoint(10);
  JobMetrics* jm = m->ForJob("j");
  const std::string r1 = "{job_id=\"j\",rank=\"1\"}";
  v1::ClientOverhead o;
  o.set_overhead_source(v1::OVERHEAD_SOURCE_CUPTI);
  o.set_overhead_ratio(0.04);
  o.set_stats_gpu_seconds(1e-4);
  o.set_overhead_step(7);
  jm->OnReport(1, 10, o);
  EXPECT_DOUBLE_EQ(ParseSamples(m->Render())["gnmr_client_overhead_ratio" + r1], 0.04);
  for (double bad : {std::nan(""), -0.5, std::numeric_limits<double>::infinity()}) {
    o.set_overhead_ratio(bad);
    jm->OnReport(1, 10, o);
    EXPECT_DOUBLE_EQ(ParseSamples(m->Render())["gnmr_client_overhead_ratio" + r1], 0.04) << bad;
  }
  o.set_overhead_source(v1::OVERHEAD_SOURCE_UNAVAILABLE);
  o.set_overhead_ratio(0.9);
  jm->OnReport(1, 10, o);
  EXPECT_DOUBLE_EQ(ParseSamples(m->Render())["gnmr_client_overhead_ratio" + r1], 0.04);
  o.set_overhead_source(static_cast<v1::OverheadSource>(42));  // from a newer client
  jm->OnReport(1, 10, o);
  EXPECT_DOUBLE_EQ(ParseSamples(m->Render())["gnmr_client_overhead_ratio" + r1], 0.04);
  o.set_overhead_source(v1::OVERHEAD_SOURCE_HOST_WALL);
  o.set_overhead_ratio(7.0);
  jm->OnReport(1, 10, o);
  EXPECT_DOUBLE_EQ(ParseSamples(m->Render())["gnmr_client_overhead_ratio" + r1], 1.0);
}

// Statistics times are per report: each rank's counters sum its reports.
TEST(JobMetricsTest, ClientStatsSecondsSumPerRank) {
  auto m = NoEndpoint(10);
  JobMetrics* jm = m->ForJob("j");
  const std::string r0 = "{job_id=\"j\",rank=\"0\"}";
  const std::string r3 = "{job_id=\"j\",rank=\"3\"}";
  v1::ClientOverhead o;
  for (double s : {0.25, 0.5, 1.0}) {  // exact in binary: sums compare exactly
    o.set_stats_seconds(s);
    o.set_stats_gpu_seconds(s / 4);
    jm->OnReport(0, 10, o);
  }
  o.set_stats_seconds(2.0);
  o.set_stats_gpu_seconds(0.0);  // the CPU path reports no GPU time
  jm->OnReport(3, 10, o);
  jm->OnReport(3, 10, o);
  auto samples = ParseSamples(m->Render());
  EXPECT_EQ(samples["gnmr_client_stats_seconds_total" + r0], 1.75);
  EXPECT_EQ(samples["gnmr_client_stats_gpu_seconds_total" + r0], 0.4375);
  EXPECT_EQ(samples["gnmr_client_stats_seconds_total" + r3], 4.0);
  EXPECT_EQ(samples.count("gnmr_client_stats_gpu_seconds_total" + r3), 1u);
  EXPECT_EQ(samples["gnmr_client_stats_gpu_seconds_total" + r3], 0.0);
  m->RemoveJob("j");  // the job's rank series go with it
  samples = ParseSamples(m->Render());
  EXPECT_EQ(CountSeries(samples, "gnmr_client_stats_seconds_total{"), 0u);
  EXPECT_EQ(CountSeries(samples, "gnmr_client_stats_gpu_seconds_total{"), 0u);
}

// A standby's figures (from its acks' notes) fill the same per-rank series
// as a reporter's, without counting as reports; replica checks are counted.
TEST(JobMetricsTest, StandbyNotesFillTheRankSeriesWithoutCountingReports) {
  auto m = NoEndpoint(10);
  JobMetrics* jm = m->ForJob("j");
  const std::string j = "{job_id=\"j\"}";
  const std::string r2 = "{job_id=\"j\",rank=\"2\"}";
  v1::ClientOverhead o;
  o.set_overhead_ratio(0.015);
  o.set_stats_seconds(0.5);
  o.set_dropped_reports(3);
  jm->OnStandbyNote(2, o);
  o.set_dropped_reports(4);
  jm->OnStandbyNote(2, o);
  jm->OnReplicaCheck(true);
  jm->OnReplicaCheck(true);
  jm->OnReplicaCheck(false);
  auto samples = ParseSamples(m->Render());
  EXPECT_EQ(samples["gnmr_reports_total" + j], 0);
  EXPECT_DOUBLE_EQ(samples["gnmr_client_overhead_ratio" + r2], 0.015);
  EXPECT_EQ(samples["gnmr_client_stats_seconds_total" + r2], 1.0);
  EXPECT_EQ(samples["gnmr_client_dropped_reports_total" + r2], 4);
  EXPECT_EQ(samples["gnmr_replica_checks_total" + j], 3);
  EXPECT_EQ(samples["gnmr_replica_mismatches_total" + j], 1);
}

// Untrusted too: a time that is NaN, infinite, negative or above an hour
// is ignored; the other field of the same report still counts.
TEST(JobMetricsTest, ClientStatsSecondsAreValidated) {
  auto m = NoEndpoint(10);
  JobMetrics* jm = m->ForJob("j");
  const std::string r1 = "{job_id=\"j\",rank=\"1\"}";
  const std::string host = "gnmr_client_stats_seconds_total" + r1;
  const std::string gpu = "gnmr_client_stats_gpu_seconds_total" + r1;
  const double inf = std::numeric_limits<double>::infinity();
  double want_host = 0.0;
  double want_gpu = 0.0;
  for (double bad : {std::nan(""), inf, -inf, -0.5, 3600.5, 1e300}) {
    v1::ClientOverhead o;
    o.set_stats_seconds(bad);
    o.set_stats_gpu_seconds(0.125);
    jm->OnReport(1, 10, o);
    want_gpu += 0.125;
    o.set_stats_seconds(0.5);
    o.set_stats_gpu_seconds(bad);
    jm->OnReport(1, 10, o);
    want_host += 0.5;
    auto samples = ParseSamples(m->Render());
    EXPECT_EQ(samples[host], want_host) << bad;
    EXPECT_EQ(samples[gpu], want_gpu) << bad;
  }
  v1::ClientOverhead o;
  o.set_stats_seconds(3600.0);  // the bound itself counts
  o.set_stats_gpu_seconds(3600.0);
  jm->OnReport(1, 10, o);
  auto samples = ParseSamples(m->Render());
  EXPECT_EQ(samples[host], want_host + 3600.0);
  EXPECT_EQ(samples[gpu], want_gpu + 3600.0);
}

TEST(JobMetricsTest, UnitSeriesStayBounded) {
  constexpr size_t kTopK = 5;
  constexpr int kMaxO = 3;
  auto m = NoEndpoint(kTopK);
  JobMetrics* jm = m->ForJob("j");
  Controller c = MakeController(200, kMaxO);
  std::mt19937 rng(11);
  for (int64_t t = 0; t < 120; ++t) {
    const Decision d = Step(&c, t, &rng, 0.03);
    jm->OnDecision(d, c, StepFigures());
    auto samples = ParseSamples(m->Render());
    const size_t series = CountSeries(samples, "gnmr_unit_gnmr{");
    ASSERT_LE(series, kTopK + kMaxO) << "step " << t;
    ASSERT_EQ(series, jm->unit_series());
    // Every unit in recovery is exported, flagged.
    for (const RecoveryEntry& e : c.recovery()) {
      const std::string s =
          "gnmr_unit_in_recovery{job_id=\"j\",unit=\"u" + std::to_string(e.unit_id) + "\"}";
      ASSERT_EQ(samples.count(s), 1u) << s;
      EXPECT_EQ(samples[s], 1);
    }
  }
  EXPECT_EQ(CountSeries(ParseSamples(m->Render()), "gnmr_unit_mu{"), jm->unit_series());
  // Every unit is in a group series ("u7" is a group of its own), and the
  // groups' recovery counts add up to the controller's.
  auto samples = ParseSamples(m->Render());
  EXPECT_EQ(CountSeries(samples, "gnmr_group_units{"), 200u);
  double in_recovery = 0;
  for (int i = 0; i < 200; ++i) {
    in_recovery +=
        samples["gnmr_group_units_in_recovery{group=\"u" + std::to_string(i) + "\",job_id=\"j\"}"];
  }
  EXPECT_EQ(in_recovery, static_cast<double>(c.recovery().size()));
}

// The forward channel's per-unit gauges: the saturation ratio the rule
// judged (saturated fraction over its mean, the mean floored at one element)
// and the forward norm ratio; the backward channel's norm ratio; 0 for a
// unit that reports no such tensors.
TEST(JobMetricsTest, ForwardChannelGaugesFollowTheController) {
  auto m = NoEndpoint(5);
  JobMetrics* jm = m->ForJob("j");
  Controller c = MakeController(2, 2);
  for (int64_t t = 0; t < 5; ++t) {
    UnitSample a{0, 1.0, 1.0, 0, 0, 10};
    a.fwd_sumsq = 4.0;
    a.fwd_amax = 1.0;
    a.fwd_saturated = t == 4 ? 40 : 2;  // 2 of 1,000 usually; 40 now: 20x
    a.fwd_numel = 1000;
    a.fwd_sumsq = t == 4 ? 36.0 : 4.0;   // norm 2, then 6: 3x
    a.bwd_sumsq = t == 4 ? 100.0 : 4.0;  // quantized gradient norm 2, then 10: 5x
    a.bwd_numel = 1000;
    const UnitSample b{1, 1.0, 1.0, 0, 0, 10};
    Decision d;
    ASSERT_TRUE(c.Observe(t, {a, b}, &d).ok());
    jm->OnDecision(d, c, StepFigures());
  }
  auto samples = ParseSamples(m->Render());
  EXPECT_DOUBLE_EQ(samples["gnmr_unit_saturation{job_id=\"j\",unit=\"u0\"}"], 20.0);
  EXPECT_DOUBLE_EQ(samples["gnmr_unit_forward{job_id=\"j\",unit=\"u0\"}"], 3.0);
  ASSERT_EQ(samples.count("gnmr_unit_saturation{job_id=\"j\",unit=\"u1\"}"), 1u);
  EXPECT_EQ(samples["gnmr_unit_saturation{job_id=\"j\",unit=\"u1\"}"], 0.0);
  EXPECT_EQ(samples["gnmr_unit_forward{job_id=\"j\",unit=\"u1\"}"], 0.0);
  EXPECT_DOUBLE_EQ(samples["gnmr_unit_backward{job_id=\"j\",unit=\"u0\"}"], 5.0);
  ASSERT_EQ(samples.count("gnmr_unit_backward{job_id=\"j\",unit=\"u1\"}"), 1u);
  EXPECT_EQ(samples["gnmr_unit_backward{job_id=\"j\",unit=\"u1\"}"], 0.0);
}

// Block health (docs/statistics.md, "Block columns"): the last sample's
// block figures as fractions of its blocks, also while the forward rules
// are in warmup or cannot judge (a NaN forward sum); 0 for a unit without
// block-scaled forward tensors and after a sample without them.
TEST(JobMetricsTest, BlockHealthGaugesFollowTheLastSample) {
  auto m = NoEndpoint(5);
  JobMetrics* jm = m->ForJob("j");
  Controller c = MakeController(2, 2);
  auto with_blocks = [](int64_t t) {
    UnitSample a{0, 1.0, 1.0, 0, 0, 10};
    a.fwd_sumsq = t == 1 ? std::nan("") : 4.0;
    a.fwd_numel = 1024;
    a.fwd_blocks = 32;
    a.fwd_saturated_blocks = 8;
    a.fwd_dead_blocks = 4;
    a.fwd_scale_clamps = static_cast<uint64_t>(t);
    return a;
  };
  const UnitSample b{1, 1.0, 1.0, 0, 0, 10};
  auto gauge = [&](const char* name, const char* unit) {
    auto samples = ParseSamples(m->Render());
    const std::string key = std::string(name) + "{job_id=\"j\",unit=\"" + unit + "\"}";
    EXPECT_EQ(samples.count(key), 1u) << key;
    return samples[key];
  };
  Decision d;
  for (int64_t t = 0; t < 2; ++t) {
    ASSERT_TRUE(c.Observe(t, {with_blocks(t), b}, &d).ok());
    jm->OnDecision(d, c, StepFigures());
  }
  EXPECT_DOUBLE_EQ(gauge("gnmr_unit_saturated_blocks", "u0"), 0.25);
  EXPECT_DOUBLE_EQ(gauge("gnmr_unit_dead_blocks", "u0"), 0.125);
  EXPECT_DOUBLE_EQ(gauge("gnmr_unit_scale_clamps", "u0"), 1.0 / 32.0);  // step 1, NaN sum
  EXPECT_EQ(gauge("gnmr_unit_saturated_blocks", "u1"), 0.0);
  UnitSample plain = with_blocks(2);
  plain.fwd_blocks = plain.fwd_saturated_blocks = plain.fwd_dead_blocks = 0;
  plain.fwd_scale_clamps = 0;
  ASSERT_TRUE(c.Observe(2, {plain, b}, &d).ok());
  jm->OnDecision(d, c, StepFigures());
  EXPECT_EQ(gauge("gnmr_unit_saturated_blocks", "u0"), 0.0);
  EXPECT_EQ(gauge("gnmr_unit_dead_blocks", "u0"), 0.0);
}

TEST(JobMetricsTest, UpdateUnitsExportsRecoveryAndTopK) {
  auto m = NoEndpoint(3);
  JobMetrics* jm = m->ForJob("j");
  std::vector<UnitFigures> units;
  for (int i = 0; i < 1000; ++i) {
    units.push_back({"u" + std::to_string(i), i * 0.001, 1.0, 1.0, false});
  }
  units[5].in_recovery = true;
  units[6].in_recovery = true;
  units[7].gnmr = NAN;
  jm->UpdateUnits(units);
  auto samples = ParseSamples(m->Render());
  EXPECT_EQ(CountSeries(samples, "gnmr_unit_gnmr{"), 5u);
  for (const char* u : {"u5", "u6", "u999", "u998", "u997"}) {
    EXPECT_EQ(samples.count(std::string("gnmr_unit_gnmr{job_id=\"j\",unit=\"") + u + "\"}"), 1u)
        << u;
  }
  // Units that leave the set lose their series.
  units[5].in_recovery = false;
  units[6].in_recovery = false;
  jm->UpdateUnits(units);
  samples = ParseSamples(m->Render());
  EXPECT_EQ(CountSeries(samples, "gnmr_unit_gnmr{"), 3u);
  EXPECT_EQ(samples.count("gnmr_unit_gnmr{job_id=\"j\",unit=\"u5\"}"), 0u);
}

TEST(JobMetricsTest, RestoredControllerIsRebasedNotCountedAgain) {
  auto m = NoEndpoint(10);
  Controller c = MakeController(10, 2);
  std::mt19937 rng(3);
  for (int64_t t = 0; t < 30; ++t) Step(&c, t, &rng, 0.1);  // before the daemon
  JobMetrics* jm = m->ForJob("j");
  jm->OnDecision(Step(&c, 30, &rng, 0.0), c, StepFigures());
  auto samples = ParseSamples(m->Render());
  EXPECT_EQ(samples["gnmr_unit_steps_total{job_id=\"j\"}"], 0);
  EXPECT_DOUBLE_EQ(samples["gnmr_recovery_fraction{job_id=\"j\"}"], c.stats().recovery_fraction());
  jm->OnDecision(Step(&c, 31, &rng, 0.0), c, StepFigures());
  samples = ParseSamples(m->Render());
  EXPECT_EQ(samples["gnmr_unit_steps_total{job_id=\"j\"}"], 10);
  // Refresh re-bases too (e.g. after ImportState) and counts nothing.
  Step(&c, 32, &rng, 0.0);
  jm->Refresh(c);
  jm->OnDecision(Step(&c, 33, &rng, 0.0), c, StepFigures());
  samples = ParseSamples(m->Render());
  EXPECT_EQ(samples["gnmr_unit_steps_total{job_id=\"j\"}"], 20);
  EXPECT_EQ(samples["gnmr_last_step{job_id=\"j\"}"], 33);
}

TEST(JobMetricsTest, ConcurrentUpdatesScrapesAndJobChurn) {
  auto m = NoEndpoint(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&m, t] {
      JobMetrics* jm = m->ForJob("shared");
      std::vector<UnitFigures> units;
      for (int i = 0; i < 50; ++i) {
        units.push_back({"u" + std::to_string(i), 1.0 * ((i * 7 + t) % 50), 1, 1, i == t});
      }
      v1::ClientOverhead o;
      for (int i = 0; i < 300; ++i) {
        o.set_dropped_reports(static_cast<uint64_t>(i));
        jm->OnReport(static_cast<uint32_t>(t), 10, o);
        if (i % 10 == 0) jm->UpdateUnits(units);
        m->RecordRpc("Session", StatusCode::kOk);
        JobMetrics* churn = m->ForJob("churn-" + std::to_string(t));
        churn->OnLateReport();
        m->RemoveJob("churn-" + std::to_string(t));
      }
    });
  }
  threads.emplace_back([&m] {
    for (int i = 0; i < 50; ++i) EXPECT_FALSE(m->Render().empty());
  });
  for (std::thread& th : threads) th.join();
  auto samples = ParseSamples(m->Render());
  EXPECT_EQ(samples["gnmr_reports_total{job_id=\"shared\"}"], 1200);
  EXPECT_EQ(samples["gnmr_rpcs_total{code=\"OK\",method=\"Session\"}"], 1200);
  EXPECT_EQ(m->num_jobs(), 1u);
  EXPECT_LE(CountSeries(samples, "gnmr_unit_gnmr{"), 4u + 4u);
}

TEST(SelectExportedUnitsTest, InRecoveryPlusTopKDeterministic) {
  const std::vector<double> g = {1, 5, 5, NAN, 3, 9, 0};
  const std::vector<bool> rec = {false, false, false, true, false, false, false};
  auto sel = SelectExportedUnits(
      g.size(), [&](size_t i) { return g[i]; }, [&](size_t i) { return rec[i]; }, 3);
  EXPECT_EQ(sel, (std::vector<size_t>{1, 2, 3, 5}));
  sel = SelectExportedUnits(
      g.size(), [&](size_t i) { return g[i]; }, [&](size_t i) { return rec[i]; }, 2);
  EXPECT_EQ(sel, (std::vector<size_t>{1, 3, 5}));  // tie 1 vs 2: lower index
  sel = SelectExportedUnits(
      g.size(), [&](size_t i) { return g[i]; }, [&](size_t i) { return rec[i]; }, 100);
  EXPECT_EQ(sel.size(), g.size());
}

}  // namespace
}  // namespace metrics
}  // namespace gnmr
