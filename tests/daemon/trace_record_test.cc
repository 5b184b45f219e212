// Live trace recording, end to end (docs/replay.md, "Recording a live
// job"): the real gnmrd with --trace-dir, three real ranks over gRPC that
// report replicated and sharded units (so the daemon averages and sums),
// spikes, a NaN and an Inf, max_o small enough to deny. The recorded trace,
// replayed with the controller replay library, yields exactly the decisions
// the ranks received - every field, the digest included - and the same
// admissions and denials as the job's event log.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "controller/publish/decision_events.h"
#include "controller/publish/decision_message.h"
#include "controller/publish/event_json.h"
#include "controller/replay/replay.h"
#include "controller/replay/trace_reader.h"
#include "controller/types/config_codec.h"
#include "daemon/store/job_dir.h"
#include "daemon/store/trace_recorder.h"
#include "tests/daemon/gnmrd_process.h"
#include "tests/daemon/raw_rank.h"
#include "tests/daemon/test_daemon.h"
#include "tests/testing/decision_events.h"

namespace gnmr::testing {
namespace {

constexpr uint32_t kRanks = 3;
constexpr int64_t kSteps = 80;

// Replicated units (every rank holds all of them: averaged) and one unit
// sharded over the ranks (summed). A name may hold a comma.
std::vector<RawRank::Unit> UnitsOf(uint32_t rank) {
  std::vector<RawRank::Unit> u = {
      {"layers.0.attn"}, {"layers.0.mlp,fc1"}, {"layers.1.attn"}, {"layers.1.mlp"}, {"head"}};
  u.push_back({"embed", rank, kRanks, 4000});
  return u;
}

// Deterministic, rank- and step-dependent statistics with events: spikes on
// several units (more than max_o at once at step 50), a NaN and an Inf.
v1::ClientMessage Stats(uint32_t rank, int64_t step, const std::vector<uint32_t>& ids) {
  v1::ClientMessage m;
  v1::StepStats* s = m.mutable_stats();
  s->set_step(step);
  uint64_t x = 0x9E3779B97F4A7C15ull * (step * 7 + rank + 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    const double noise = static_cast<double>(x >> 11) / 9007199254740992.0;  // [0, 1)
    double sumsq = (1.0 + i) * (0.8 + 0.4 * noise);
    double amax = std::sqrt(sumsq) / 7.0;
    uint64_t nonfinite = 0;
    if ((step == 30 && i == 1) || (step == 50 && i <= 3) || (step == 62 && i == 5)) {
      sumsq *= 400.0;  // spikes
    }
    if (step == 40 && i == 2 && rank == 1) {
      sumsq = std::numeric_limits<double>::quiet_NaN();
      nonfinite = 3;
    }
    if (step == 70 && i == 4 && rank == 2) {
      sumsq = std::numeric_limits<double>::infinity();
      nonfinite = 1;
    }
    s->add_unit_id(ids[i]);
    s->add_sumsq(sumsq);
    s->add_amax(amax);
    s->add_nonfinite(nonfinite);
    s->add_zeros(static_cast<uint64_t>(noise * 10));
  }
  return m;
}

// Kinds counted in the job's event log.
std::map<std::string, int> EventKinds(const std::string& path) {
  std::map<std::string, int> kinds;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    for (const char* k : {"admission", "denial", "release", "trace_dropped"}) {
      if (line.find(std::string("\"kind\":\"") + k + "\"") != std::string::npos) ++kinds[k];
    }
  }
  return kinds;
}

// An event as its JSON line (NaN compares equal to NaN there), without
// the wall-clock time.
std::string EventLine(v1::Event e) {
  e.set_time_unix(0);
  std::string line;
  AppendEventJsonLine("job", e, &line);
  return line;
}

// The decision events of the job's event log, as EventLine writes them.
std::vector<std::string> DecisionEventLines(const std::string& path) {
  std::vector<std::string> lines;
  for (const v1::Event& e : DecisionEvents(path)) lines.push_back(EventLine(e));
  return lines;
}

using UnitsFn = std::function<std::vector<RawRank::Unit>(uint32_t rank)>;
using StatsFn =
    std::function<v1::ClientMessage(uint32_t rank, int64_t step, const std::vector<uint32_t>& ids)>;

// Runs `world` real ranks of `job` for `steps` steps over gRPC; every rank
// registers units_of(rank) with `cfg` and sends stats_of(rank, step, its
// ids). Returns the decisions rank 0 received, one per step.
void RunJob(GnmrdProcess& gnmrd, const std::string& job, uint32_t world, int64_t steps,
            const v1::ControllerConfig& cfg, const UnitsFn& units_of, const StatsFn& stats_of,
            std::vector<v1::Decision>* live) {
  std::vector<std::unique_ptr<RawRank>> ranks;
  for (uint32_t r = 0; r < world; ++r) {
    ranks.push_back(std::make_unique<RawRank>(gnmrd.Channel(), job, r, world, "tok"));
    v1::RegisterResponse resp;
    grpc::Status st = ranks[r]->Register(units_of(r), &resp, &cfg);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ranks[r]->Open();
  }
  for (int64_t step = 0; step < steps; ++step) {
    for (uint32_t r = 0; r < world; ++r) {
      ASSERT_TRUE(ranks[r]->Send(stats_of(r, step, ranks[r]->unit_ids())));
    }
    v1::Decision d;
    ASSERT_TRUE(ranks[0]->WaitDecision(step, &d)) << step;
    live->push_back(d);
  }
  for (auto& r : ranks) r->Close();
}

// Replays the trace at `path` through a controller of `cfg`, as gnmrctl
// replay does, and expects exactly the `live` decisions: every field
// (admissions, triggers, recovery set, skip, sequence, digest), one per
// recorded step, and the events of the job's event log at `events_path`
// (admissions with their triggers and figures, denials, releases, skips)
// as JSON lines, byte for byte. Sets *names to the trace's units in id
// order.
void ExpectReplayGivesTheLiveDecisions(const std::string& path, const v1::ControllerConfig& cfg,
                                       const std::vector<v1::Decision>& live,
                                       const std::string& events_path,
                                       std::vector<std::string>* names) {
  TraceReader reader;
  Status s = reader.OpenFile(path);
  ASSERT_TRUE(s.ok()) << s.message();
  StatusOr<ControllerConfig> config = ConfigFromProto(cfg);
  ASSERT_TRUE(config.ok());
  Controller controller = Controller::Create(config.value()).value();
  TraceStep step;
  size_t compared = 0;
  std::vector<std::string> replayed_events;
  for (;;) {
    bool got = false;
    s = reader.Next(&step, &got);
    ASSERT_TRUE(s.ok()) << s.message();
    if (!got) break;
    while (controller.num_units() < reader.num_units()) {
      ASSERT_TRUE(
          controller
              .AddUnit(std::string(reader.unit_name(static_cast<uint32_t>(controller.num_units()))))
              .ok());
    }
    Decision d;
    ASSERT_TRUE(controller.Observe(step.step, step.samples, &d).ok());
    ASSERT_LT(compared, live.size());
    const v1::Decision& want = live[compared];
    const std::shared_ptr<const v1::ServerMessage> msg = DecisionMessage(d, want.generation());
    const v1::Decision& replayed = msg->decision();
    EXPECT_EQ(replayed.SerializeAsString(), want.SerializeAsString())
        << "step " << step.step << "\nreplayed: " << replayed.ShortDebugString()
        << "\nlive:     " << want.ShortDebugString();
    EXPECT_EQ(replayed.digest(), want.digest());
    ++compared;
    std::vector<v1::Event> events;
    AppendDecisionEvents(d, controller, /*time_unix=*/0, &events);
    for (const v1::Event& e : events) replayed_events.push_back(EventLine(e));
  }
  EXPECT_EQ(compared, live.size());  // every decided step, none missing
  EXPECT_EQ(replayed_events, DecisionEventLines(events_path));
  names->clear();
  for (uint32_t id = 0; id < reader.num_units(); ++id) {
    names->emplace_back(reader.unit_name(id));
  }
}

TEST(TraceRecord, RecordedTraceReplaysToTheLiveDecisions) {
  GnmrdProcess gnmrd;
  const std::string traces = gnmrd.dir() + "/traces";
  ASSERT_TRUE(gnmrd.Start({"--trace-dir", traces}));
  v1::ControllerConfig cfg = FastConfig(/*max_o=*/2);
  const std::string job = ".exp:trace-1";  // a leading dot the file name escapes
  std::vector<v1::Decision> live;
  RunJob(gnmrd, job, kRanks, kSteps, cfg, UnitsOf, Stats, &live);
  ASSERT_EQ(live.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(gnmrd.Kill(SIGTERM), 0) << gnmrd.log();  // the recorder writes what it holds

  // The trace, named by the escaped job id inside the configured directory.
  const std::string path = store::TraceRecorder::TracePath(traces, job);
  EXPECT_EQ(path, traces + "/%2Eexp:trace-1.csv");
  const std::string events = store::JobDir(gnmrd.state_dir(), job) + "/events.jsonl";
  std::vector<std::string> names;
  ExpectReplayGivesTheLiveDecisions(path, cfg, live, events, &names);
  // Unit names and ids as the daemon registered them (the comma survives).
  ASSERT_EQ(names.size(), 6u);
  EXPECT_EQ(names[1], "layers.0.mlp,fc1");
  StatusOr<ControllerConfig> config = ConfigFromProto(cfg);
  ASSERT_TRUE(config.ok());

  // The same through RunReplay (what gnmrctl replay runs), against the
  // job's event log: the test exercised admissions, a denial and releases.
  TraceReader again;
  ASSERT_TRUE(again.OpenFile(path).ok());
  ReplayOptions options;
  options.config = config.value();
  NullSink sink;
  StatusOr<ReplaySummary> summary = RunReplay(&again, options, &sink);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  const ControllerStats& st = summary->stats;
  const auto kinds = EventKinds(events);
  EXPECT_EQ(st.admissions(),
            static_cast<uint64_t>(kinds.count("admission") ? kinds.at("admission") : 0));
  EXPECT_EQ(st.denials, static_cast<uint64_t>(kinds.count("denial") ? kinds.at("denial") : 0));
  EXPECT_EQ(st.releases, static_cast<uint64_t>(kinds.count("release") ? kinds.at("release") : 0));
  EXPECT_EQ(kinds.count("trace_dropped"), 0u);
  EXPECT_GE(st.admissions_by_trigger[static_cast<int>(Trigger::kNonFinite)], 2u);
  EXPECT_GE(st.admissions_by_trigger[static_cast<int>(Trigger::kGnmr)] +
                st.admissions_by_trigger[static_cast<int>(Trigger::kDelta)],
            2u);
  EXPECT_GE(st.denials, 1u);
  EXPECT_GE(st.releases, 1u);
}

// Whether some line of `lines` holds `what`.
bool HasLine(const std::vector<std::string>& lines, const std::string& what) {
  for (const std::string& l : lines) {
    if (l.find(what) != std::string::npos) return true;
  }
  return false;
}

// The forward channel (docs/controller.md, "Forward channel"): two ranks
// report forward statistics with their forward order. Unit o's forward norm
// spikes (risk ~17) and v's quantizer saturates (risk 2.5) in the same step;
// under attribution: upstream only the one whose forward call came first
// (v, order 1) is admitted, o is denied as coupled. Later a unit whose name
// needs CSV quoting underflows. Forward tensors start after the gradients
// (fwd_numel 0 before), and one rank's forward sum is NaN once.
std::vector<RawRank::Unit> ForwardUnits(uint32_t) {
  return {{"attn.o"}, {"attn.v"}, {"mlp.\"fc1\",gate"}};
}

v1::ClientMessage ForwardStats(uint32_t rank, int64_t step, const std::vector<uint32_t>& ids) {
  v1::ClientMessage m;
  v1::StepStats* s = m.mutable_stats();
  s->set_step(step);
  const uint32_t kOrder[] = {2, 1, 3};  // v runs first, then o, then gate
  for (size_t i = 0; i < ids.size(); ++i) {
    const double noise = 0.01 * static_cast<double>((step * 7 + rank * 3 + i * 5) % 11);
    s->add_unit_id(ids[i]);
    s->add_sumsq(1.0 + noise);  // calm gradients: only forward rules fire
    s->add_amax(0.25);
    s->add_nonfinite(0);
    s->add_zeros(rank);
    const bool has_fwd = step >= 3 + static_cast<int64_t>(i);
    double fwd_sumsq = has_fwd ? 4.0 * (1.0 + noise) : 0.0;
    uint64_t saturated = has_fwd ? 1 : 0;
    uint64_t zeros = has_fwd ? 100 + rank : 0;
    if (step == 20 && i == 0) fwd_sumsq *= 1e4;  // o: F ~ 100
    if (step == 20 && i == 1) saturated = 40;    // v: S = 40
    if (step == 28 && i == 1 && rank == 1) fwd_sumsq = std::nan("");
    if (step == 36 && i == 2) zeros = 900;  // gate: U ~ 0.89
    s->add_fwd_sumsq(fwd_sumsq);
    s->add_fwd_amax(has_fwd ? 1.5 : 0.0);
    s->add_fwd_saturated(saturated);
    s->add_fwd_zeros(zeros);
    s->add_fwd_numel(has_fwd ? 1000 : 0);
    s->add_fwd_order(has_fwd ? kOrder[i] : 0);
  }
  return m;
}

TEST(TraceRecord, ForwardAdmissionsReplayExactly) {
  GnmrdProcess gnmrd;
  const std::string traces = gnmrd.dir() + "/traces";
  ASSERT_TRUE(gnmrd.Start({"--trace-dir", traces}));
  v1::ControllerConfig cfg = FastConfig(/*max_o=*/2, /*warmup=*/5);
  cfg.set_attribution(v1::ATTRIBUTION_UPSTREAM);
  const std::string job = "fwd-1";
  std::vector<v1::Decision> live;
  RunJob(gnmrd, job, /*world=*/2, /*steps=*/50, cfg, ForwardUnits, ForwardStats, &live);
  ASSERT_EQ(live.size(), 50u);
  EXPECT_EQ(gnmrd.Kill(SIGTERM), 0) << gnmrd.log();

  // The live job admitted v at step 20 by a forward rule and gate at 36.
  const std::string events = store::JobDir(gnmrd.state_dir(), job) + "/events.jsonl";
  const std::vector<std::string> lines = DecisionEventLines(events);
  auto has = [&lines](const std::string& what) { return HasLine(lines, what); };
  EXPECT_TRUE(has(R"("observed_step":20,"apply_step":21,"kind":"admission","unit":"attn.v")"));
  EXPECT_TRUE(has(R"("observed_step":20,"apply_step":21,"kind":"denial","unit":"attn.o")"));
  EXPECT_TRUE(has(R"("trigger":"forward")"));
  EXPECT_TRUE(has("coupled to this step's forward root"));
  EXPECT_TRUE(
      has(R"("observed_step":36,"apply_step":37,"kind":"admission","unit":"mlp.\"fc1\",gate")"));
  EXPECT_TRUE(has(R"("trigger":"saturation")")) << ::testing::PrintToString(lines);
  EXPECT_TRUE(has(R"("trigger":"underflow")")) << ::testing::PrintToString(lines);

  const std::string path = store::TraceRecorder::TracePath(traces, job);
  std::vector<std::string> names;
  ExpectReplayGivesTheLiveDecisions(path, cfg, live, events, &names);
  EXPECT_EQ(names, (std::vector<std::string>{"attn.o", "attn.v", "mlp.\"fc1\",gate"}));
}

// Block-scaled forward tensors with their source (docs/controller.md,
// "Block rules" and "Relative error"): v's blocks go dead at step 20 and
// gate's relative error jumps at step 30, the element figures quiet; with
// those two rules on, the recorded trace (block and source columns
// included) replays to the live decisions.
v1::ClientMessage BlockStats(uint32_t rank, int64_t step, const std::vector<uint32_t>& ids) {
  v1::ClientMessage m = ForwardStats(rank, step, ids);
  v1::StepStats* s = m.mutable_stats();
  for (int i = 0; i < s->unit_id_size(); ++i) {
    s->set_fwd_saturated(i, s->fwd_numel(i) > 0 ? 1 : 0);  // ForwardStats' own events off
    s->set_fwd_zeros(i, s->fwd_numel(i) > 0 ? 100 : 0);
    if (step == 20 && i == 0) s->set_fwd_sumsq(i, 4.0);
    const bool blocks = s->fwd_numel(i) > 0;
    s->add_fwd_blocks(blocks ? 32 : 0);
    s->add_fwd_saturated_blocks(blocks ? 6 : 0);
    s->add_fwd_dead_blocks(blocks ? (step == 20 && i == 1 ? 20 : 1) : 0);
    s->add_fwd_scale_clamps(0);
    const double noise = 0.01 * static_cast<double>((step * 5 + rank + i) % 7);
    s->add_fwd_source_numel(blocks ? 1000 : 0);
    s->add_fwd_underflow(blocks ? 2 : 0);
    s->add_fwd_error_sumsq(blocks ? 4e-3 * (1.0 + noise) * (step == 30 && i == 2 ? 1e3 : 1.0)
                                  : 0.0);
    s->add_fwd_source_sumsq(blocks ? 4.0 : 0.0);
  }
  return m;
}

TEST(TraceRecord, BlockAndSourceAdmissionsReplayExactly) {
  GnmrdProcess gnmrd;
  const std::string traces = gnmrd.dir() + "/traces";
  ASSERT_TRUE(gnmrd.Start({"--trace-dir", traces}));
  v1::ControllerConfig cfg = FastConfig(/*max_o=*/2, /*warmup=*/5);
  cfg.set_dead_block_fraction(0.25);
  cfg.set_tau_relative_error(4.0);
  const std::string job = "blk-1";
  std::vector<v1::Decision> live;
  RunJob(gnmrd, job, /*world=*/2, /*steps=*/40, cfg, ForwardUnits, BlockStats, &live);
  ASSERT_EQ(live.size(), 40u);
  EXPECT_EQ(gnmrd.Kill(SIGTERM), 0) << gnmrd.log();

  const std::string events = store::JobDir(gnmrd.state_dir(), job) + "/events.jsonl";
  const std::vector<std::string> lines = DecisionEventLines(events);
  auto has = [&lines](const std::string& what) { return HasLine(lines, what); };
  EXPECT_TRUE(has(R"("observed_step":20,"apply_step":21,"kind":"admission","unit":"attn.v")"))
      << ::testing::PrintToString(lines);
  EXPECT_TRUE(has(R"("trigger":"dead_blocks")")) << ::testing::PrintToString(lines);
  EXPECT_TRUE(
      has(R"("observed_step":30,"apply_step":31,"kind":"admission","unit":"mlp.\"fc1\",gate")"))
      << ::testing::PrintToString(lines);
  EXPECT_TRUE(has(R"("trigger":"relative_error")")) << ::testing::PrintToString(lines);

  const std::string path = store::TraceRecorder::TracePath(traces, job);
  std::vector<std::string> names;
  ExpectReplayGivesTheLiveDecisions(path, cfg, live, events, &names);
  EXPECT_EQ(names.size(), 3u);
}

TEST(TraceRecord, OnlyMatchingJobsAndNothingWithoutTraceDir) {
  GnmrdProcess gnmrd;
  const std::string traces = gnmrd.dir() + "/traces";
  {
    std::ofstream yaml(gnmrd.dir() + "/gnmrd.yaml");
    yaml << "trace:\n  dir: " << traces << "\n  jobs: \"keep-*\"\n";
  }
  ASSERT_TRUE(gnmrd.Start({"--config", gnmrd.dir() + "/gnmrd.yaml"}));
  v1::ControllerConfig cfg = FastConfig();
  auto run_job = [&](GnmrdProcess& d, const std::string& job) {
    RawRank rank(d.Channel(), job, 0, 1, "tok");
    ASSERT_TRUE(rank.Register({{"a"}, {"b"}}, nullptr, &cfg).ok());
    rank.Open();
    for (int64_t s = 0; s < 3; ++s) {
      ASSERT_TRUE(rank.SendStats(s, {1.0, 2.0}));
      v1::Decision dec;
      ASSERT_TRUE(rank.WaitDecision(s, &dec));
    }
    rank.Close();
  };
  run_job(gnmrd, "keep-1");
  run_job(gnmrd, "skip-1");
  EXPECT_EQ(gnmrd.Kill(SIGTERM), 0) << gnmrd.log();
  EXPECT_TRUE(std::ifstream(store::TraceRecorder::TracePath(traces, "keep-1")).good());
  EXPECT_FALSE(std::ifstream(store::TraceRecorder::TracePath(traces, "skip-1")).good());

  // Off by default: no trace file anywhere.
  GnmrdProcess plain;
  ASSERT_TRUE(plain.Start());
  run_job(plain, "keep-2");
  EXPECT_EQ(plain.Kill(SIGTERM), 0);
  for (const auto& e : std::filesystem::recursive_directory_iterator(plain.dir())) {
    EXPECT_NE(e.path().extension(), ".csv") << e.path();
  }
}

}  // namespace
}  // namespace gnmr::testing
