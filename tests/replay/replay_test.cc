// RunReplay: the JSON Lines it writes on small handmade traces, the summary,
// and agreement with a controller fed directly on the bundled example.
#include "controller/replay/replay.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "controller/config_yaml.h"

namespace gnmr {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The number after "key": in `json` (the first occurrence); NaN if absent.
double NumberAfter(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return std::nan("");
  return std::strtod(json.c_str() + at + key.size() + 3, nullptr);
}

struct Result {
  Status status;
  ReplaySummary summary;
  std::string jsonl;
};

Result Replay(const std::string& trace, const ControllerConfig& config) {
  TraceReader reader;
  Result r;
  r.status = reader.OpenBuffer(trace, "t.csv");
  if (!r.status.ok()) return r;
  std::ostringstream out;
  OstreamSink sink(out);
  ReplayOptions options;
  options.config = config;
  StatusOr<ReplaySummary> s = RunReplay(&reader, options, &sink);
  r.status = s.status();
  if (s.ok()) r.summary = s.value();
  r.jsonl = out.str();
  return r;
}

// warmup 2, lock 3, max_o 1, lag 1; b is clipped. Units a and b have norm
// 1 in warmup (mean 1), so GNMR equals the norm afterwards.
ControllerConfig SmallConfig() {
  ControllerConfig c;
  c.warmup = 2;
  c.lock_steps = 3;
  c.max_o = 1;
  c.lag = 1;
  c.actions = {{"b", Action::kClip, -1.0}};
  return c;
}

const char kSmallTrace[] =
    "step,unit,sumsq\n"
    "0,a,1\n0,b,1\n"
    "1,a,1\n1,b,1\n"
    "2,a,100\n2,b,1\n"   // a: GNMR 10 -> admitted, in force [3, 6)
    "3,a,1\n3,b,100\n"   // b: GNMR 10 -> denied, a holds the budget
    "4,a,1\n4,b,1\n"     // nothing changes: no line
    "5,a,1\n5,b,1\n"     // apply 6: a released
    "6,a,1\n6,b,nan\n";  // b non-finite -> admitted, global skip

TEST(Replay, WritesOneLinePerDecisionWithChanges) {
  Result r = Replay(kSmallTrace, SmallConfig());
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  const std::vector<std::string> lines = Lines(r.jsonl);
  ASSERT_EQ(lines.size(), 4u) << r.jsonl;
  EXPECT_EQ(lines[0],
            "{\"observed_step\":2,\"apply_step\":3,\"admitted\":[{\"unit\":"
            "\"a\",\"action\":\"promote\",\"until\":6,\"trigger\":\"gnmr\","
            "\"gnmr\":10,\"delta\":0}],\"released\":[],\"denied\":[],"
            "\"in_recovery\":[\"a\"],\"global_skip\":false}");
  EXPECT_EQ(lines[1],
            "{\"observed_step\":3,\"apply_step\":4,\"admitted\":[],"
            "\"released\":[],\"denied\":[\"b\"],\"in_recovery\":[\"a\"],"
            "\"global_skip\":false}");
  EXPECT_EQ(lines[2],
            "{\"observed_step\":5,\"apply_step\":6,\"admitted\":[],"
            "\"released\":[\"a\"],\"denied\":[],\"in_recovery\":[],"
            "\"global_skip\":false}");
  EXPECT_EQ(lines[3],
            "{\"observed_step\":6,\"apply_step\":7,\"admitted\":[{\"unit\":"
            "\"b\",\"action\":\"clip\",\"until\":10,\"trigger\":\"nonfinite\","
            "\"gnmr\":null,\"delta\":null}],\"released\":[],\"denied\":[],"
            "\"in_recovery\":[\"b\"],\"global_skip\":true}");
}

// Without forward columns there are no forward figures: the lines are
// those of a replay before the figures existed.
TEST(Replay, NoForwardColumnsNoForwardFigures) {
  Result r = Replay(kSmallTrace, SmallConfig());
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.jsonl.find("fwd_ratio"), std::string::npos) << r.jsonl;
  EXPECT_EQ(r.jsonl.find("saturation_ratio"), std::string::npos) << r.jsonl;
}

TEST(Replay, SummaryCountsWhatHappened) {
  Result r = Replay(kSmallTrace, SmallConfig());
  ASSERT_TRUE(r.status.ok());
  const ReplaySummary& s = r.summary;
  EXPECT_EQ(s.trace, "t.csv");
  EXPECT_EQ(s.steps, 7u);
  EXPECT_EQ(s.units, 2u);
  EXPECT_EQ(s.first_step, 0);
  EXPECT_EQ(s.last_step, 6);
  EXPECT_EQ(s.decisions_written, 4u);
  EXPECT_EQ(s.stats.unit_steps_observed, 14u);
  EXPECT_EQ(s.stats.admissions_by_trigger[static_cast<int>(Trigger::kGnmr)], 1u);
  EXPECT_EQ(s.stats.admissions_by_trigger[static_cast<int>(Trigger::kNonFinite)], 1u);
  EXPECT_EQ(s.stats.denials, 1u);
  EXPECT_EQ(s.stats.peak_in_recovery, 1u);
  // a is in force at steps 3, 4, 5: 3 of 14 unit-steps.
  EXPECT_EQ(s.stats.unit_steps_in_force, 3u);
  const std::string text = FormatReplaySummary(s);
  EXPECT_NE(text.find("replay t.csv: 7 steps (0..6), 2 units, 14 unit "
                      "observations\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("admissions: 2 (nonfinite 1, gnmr 1, delta 0); "
                      "denials: 1;"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("recovery fraction: 0.214286 (3 of 14 unit-steps in "
                      "recovery); peak units in recovery: 1\n"),
            std::string::npos)
      << text;
}

// denied: clip at lag 0: b, denied at step 3 while a holds the budget, is
// listed as clipped and is not in recovery; the summary counts it.
TEST(Replay, DeniedClipsAreListedApart) {
  ControllerConfig c = SmallConfig();
  c.lag = 0;
  c.denied = DeniedTreatment::kClip;
  Result r = Replay(kSmallTrace, c);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  const std::vector<std::string> lines = Lines(r.jsonl);
  ASSERT_GE(lines.size(), 2u) << r.jsonl;
  EXPECT_EQ(lines[1],
            "{\"observed_step\":3,\"apply_step\":3,\"admitted\":[],"
            "\"released\":[],\"denied\":[\"b\"],\"denied_clipped\":[\"b\"],"
            "\"in_recovery\":[\"a\"],\"global_skip\":false}");
  EXPECT_EQ(r.summary.stats.denied_clips, 1u);
  EXPECT_NE(FormatReplaySummary(r.summary).find("denied clips: 1 (of the denials"),
            std::string::npos);
  // Without it the lines and the summary are as they were.
  c.denied = DeniedTreatment::kNone;
  r = Replay(kSmallTrace, c);
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.jsonl.find("denied_clipped"), std::string::npos) << r.jsonl;
  EXPECT_EQ(FormatReplaySummary(r.summary).find("denied clips"), std::string::npos);
}

// The forward channel's optional columns: a (coupled neighbour) spikes in
// its gradient at step 3, b (the root) in its forward saturation; with
// max_o 1 the root is admitted, labelled `saturation`.
TEST(Replay, ForwardColumnsFeedTheForwardChannel) {
  const char trace[] =
      "step,unit,sumsq,fwd_sumsq,fwd_saturated,fwd_zeros,fwd_numel\n"
      "0,a,1,4,1,0,1000\n0,b,1,4,1,0,1000\n"
      "1,a,1,4,1,0,1000\n1,b,1,4,1,0,1000\n"
      "2,a,1,4,1,0,1000\n2,b,1,4,1,0,1000\n"
      "3,a,400,4,1,0,1000\n3,b,1.2,4,200,0,1000\n";
  Result r = Replay(trace, SmallConfig());
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  const ControllerStats& st = r.summary.stats;
  EXPECT_EQ(st.forward_samples, 8u);
  EXPECT_EQ(st.admissions_by_trigger[static_cast<int>(Trigger::kSaturation)], 1u);
  EXPECT_EQ(st.denials, 1u);
  EXPECT_NE(r.jsonl.find("\"saturation\""), std::string::npos) << r.jsonl;
  // The admission carries the figures behind its trigger, after "delta":
  // S = 0.2 / 0.001 = 200, F = 2 / 2 = 1, no zeros: U = 0.
  const std::vector<std::string> lines = Lines(r.jsonl);
  ASSERT_EQ(lines.size(), 1u) << r.jsonl;
  EXPECT_NE(lines[0].find("\"trigger\":\"saturation\",\"gnmr\":"), std::string::npos);
  EXPECT_LT(lines[0].find("\"delta\":"), lines[0].find("\"fwd_ratio\":")) << lines[0];
  EXPECT_NEAR(NumberAfter(lines[0], "fwd_ratio"), 1.0, 1e-9) << lines[0];
  EXPECT_NEAR(NumberAfter(lines[0], "saturation_ratio"), 200.0, 1e-9) << lines[0];
  EXPECT_NE(lines[0].find("\"underflow_ratio\":0}"), std::string::npos) << lines[0];
  const std::string text = FormatReplaySummary(r.summary);
  EXPECT_NE(text.find("forward channel: 8 samples; admissions forward 0, saturation 1, "
                      "underflow 0\n"),
            std::string::npos)
      << text;
  // A negative forward sum is refused at its line.
  Result bad = Replay("step,unit,sumsq,fwd_sumsq\n0,a,1,-2\n", SmallConfig());
  EXPECT_EQ(bad.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status.message().find("t.csv:2: column 'fwd_sumsq'"), std::string::npos)
      << bad.status.message();
  // So are more zero elements than elements (a fuzz finding: the reader took
  // the row and the controller refused the trace without a column name).
  bad = Replay("step,unit,sumsq,fwd_zeros\n0,a,1,8\n", SmallConfig());
  EXPECT_EQ(bad.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status.message().find("t.csv:2: fwd_saturated (0) and fwd_zeros (8) cannot "
                                      "exceed fwd_numel (0)"),
            std::string::npos)
      << bad.status.message();
}

TEST(Replay, BlockColumnsFeedTheBlockRulesOnlyWhenTheyAreOn) {
  // b's blocks go dead at step 3 (60 of 100; 5 usually) while its element
  // figures stay quiet: only the dead_blocks rule, when on, sees it.
  const char trace[] =
      "step,unit,sumsq,fwd_sumsq,fwd_saturated,fwd_zeros,fwd_numel,fwd_blocks,"
      "fwd_saturated_blocks,fwd_dead_blocks,fwd_scale_clamps\n"
      "0,b,1,4,20,1000,3200,100,20,5,0\n1,b,1,4,20,1000,3200,100,20,5,0\n"
      "2,b,1,4,20,1000,3200,100,20,5,0\n3,b,1,4,20,1100,3200,100,20,60,0\n";
  Result off = Replay(trace, SmallConfig());
  ASSERT_TRUE(off.status.ok()) << off.status.ToString();
  EXPECT_EQ(off.summary.stats.admissions(), 0u);
  EXPECT_EQ(FormatReplaySummary(off.summary).find("block rules"), std::string::npos);
  ControllerConfig on = SmallConfig();
  on.dead_block_fraction = 0.25;
  Result r = Replay(trace, on);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.summary.stats.admissions_by_trigger[static_cast<int>(Trigger::kDeadBlocks)], 1u);
  EXPECT_NE(r.jsonl.find("\"trigger\":\"dead_blocks\""), std::string::npos) << r.jsonl;
  EXPECT_NE(FormatReplaySummary(r.summary).find(
                "  block rules: admissions block_saturation 0, dead_blocks 1, "
                "scale_clamps 0, relative_error 0\n"),
            std::string::npos)
      << FormatReplaySummary(r.summary);
}

TEST(Replay, BackwardColumnsFeedTheBackwardChannel) {
  // b's quantized gradient is x10 at step 3 (its gradient norm too quiet to
  // trigger): the backward rule at its default sees it, a variant with
  // tau_backward above 10 does not.
  const char trace[] =
      "step,unit,sumsq,bwd_sumsq,bwd_saturated,bwd_zeros,bwd_numel,bwd_order\n"
      "0,b,1,4,1,10,1000,1\n1,b,1,4,1,10,1000,1\n2,b,1,4,1,10,1000,1\n3,b,1,400,1,10,1000,1\n";
  Result r = Replay(trace, SmallConfig());
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.summary.stats.admissions_by_trigger[static_cast<int>(Trigger::kBackward)], 1u);
  EXPECT_NE(r.jsonl.find("\"trigger\":\"backward\""), std::string::npos) << r.jsonl;
  EXPECT_NE(r.jsonl.find("\"bwd_ratio\":10}"), std::string::npos) << r.jsonl;
  EXPECT_EQ(r.jsonl.find("fwd_ratio"), std::string::npos) << r.jsonl;  // no forward columns
  EXPECT_NE(FormatReplaySummary(r.summary).find(
                "  backward channel: 4 samples; admissions backward 1, backward_saturation 0, "
                "backward_underflow 0\n"),
            std::string::npos)
      << FormatReplaySummary(r.summary);
  ControllerConfig high = SmallConfig();
  ASSERT_TRUE(ApplyOverride(&high, "tau_backward=12").ok());
  Result quiet = Replay(trace, high);
  ASSERT_TRUE(quiet.status.ok()) << quiet.status.ToString();
  EXPECT_EQ(quiet.summary.stats.admissions(), 0u);
}

TEST(Replay, LaterConfigOverridesChangeTheOutcome) {
  ControllerConfig c = SmallConfig();
  ASSERT_TRUE(ApplyOverride(&c, "max_o=2").ok());
  Result r = Replay(kSmallTrace, c);
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.summary.stats.denials, 0u);  // b fits the larger budget
  EXPECT_NE(r.jsonl.find("\"in_recovery\":[\"a\",\"b\"]"), std::string::npos) << r.jsonl;
}

TEST(Replay, EscapesUnitNamesAndKeepsGnmrRoundTrippable) {
  ControllerConfig c;
  c.warmup = 1;
  c.short_window = 2;
  c.tau = 2.5;  // the spike below (GNMR 3.7) triggers
  const char trace[] =
      "step,unit,sumsq\n"
      "0,we\"ird\\u,1\n"
      "1,we\"ird\\u,1.21\n"    // GNMR 1.1, fills the window
      "2,we\"ird\\u,13.69\n";  // GNMR 3.7 / mean(1, 1.1...)
  Result r = Replay(trace, c);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  const std::vector<std::string> lines = Lines(r.jsonl);
  ASSERT_EQ(lines.size(), 1u) << r.jsonl;
  EXPECT_NE(lines[0].find("{\"unit\":\"we\\\"ird\\\\u\""), std::string::npos) << lines[0];
  // The printed GNMR parses back to the value the controller computed.
  const size_t at = lines[0].find("\"gnmr\":") + 7;
  const double printed = std::stod(lines[0].substr(at));
  auto ctl = Controller::Create(c);
  ASSERT_TRUE(ctl.ok());
  ASSERT_TRUE(ctl->AddUnit("u").ok());
  Decision d;
  for (double sumsq : {1.0, 1.21, 13.69}) {
    UnitSample s;
    s.sumsq = sumsq;
    ASSERT_TRUE(ctl->Observe(ctl->last_step().value_or(-1) + 1, {s}, &d).ok());
  }
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(printed, d.admitted[0].gnmr);
}

// Traces gnmrd recorded before it quoted names put the unit last,
// unquoted (docs/replay.md, "Traces"): they still replay, to the very
// decisions the same statistics give in the quoted form it writes now.
TEST(Replay, TheOldUnquotedFormReplaysLikeTheQuotedOne) {
  struct Row {
    int step;
    int unit;
    const char* sumsq;
  };
  // kSmallTrace's statistics, a and b renamed to names that need quotes.
  const Row rows[] = {{0, 0, "1"}, {0, 1, "1"}, {1, 0, "1"},   {1, 1, "1"},  {2, 0, "100"},
                      {2, 1, "1"}, {3, 0, "1"}, {3, 1, "100"}, {4, 0, "1"},  {4, 1, "1"},
                      {5, 0, "1"}, {5, 1, "1"}, {6, 0, "1"},   {6, 1, "nan"}};
  const char* const old_names[] = {"layers.0,\"fc1\"", "\"b\""};
  const char* const quoted_names[] = {"\"layers.0,\"\"fc1\"\"\"", "\"\"\"b\"\"\""};
  std::string old_form = "step,sumsq,amax,nonfinite,zeros,numel,unit\n";
  std::string quoted_form =
      "step,unit,sumsq,amax,nonfinite,zeros,numel,fwd_sumsq,fwd_amax,fwd_saturated,fwd_zeros,"
      "fwd_numel,fwd_order\n";
  for (const Row& r : rows) {
    const std::string step = std::to_string(r.step);
    old_form += step + "," + r.sumsq + ",0,0,0,100," + old_names[r.unit] + "\n";
    quoted_form += step + "," + quoted_names[r.unit] + "," + r.sumsq + ",0,0,0,100,,,,,,\n";
  }
  ControllerConfig c = SmallConfig();
  c.actions = {{"\"b\"", Action::kClip, -1.0}};
  Result old_replay = Replay(old_form, c);
  Result quoted_replay = Replay(quoted_form, c);
  ASSERT_TRUE(old_replay.status.ok()) << old_replay.status.message();
  ASSERT_TRUE(quoted_replay.status.ok()) << quoted_replay.status.message();
  EXPECT_EQ(old_replay.jsonl, quoted_replay.jsonl);
  EXPECT_EQ(Lines(old_replay.jsonl).size(), 4u) << old_replay.jsonl;
  EXPECT_NE(old_replay.jsonl.find(R"({"unit":"layers.0,\"fc1\"")"), std::string::npos)
      << old_replay.jsonl;
  EXPECT_EQ(old_replay.summary.stats.admissions(), quoted_replay.summary.stats.admissions());
  EXPECT_EQ(old_replay.summary.stats.denials, 1u);
}

TEST(Replay, TraceErrorsStopTheReplayWithTheLine) {
  Result r = Replay("step,unit,sumsq\n0,a,1\n1,a,1\n0,a,1\n", ControllerConfig());
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status.message().rfind("t.csv:4: step 0 goes backwards", 0), 0u)
      << r.status.message();
}

TEST(Replay, StepsBeyondTheControllersRangeStopAtTheirLine) {
  // The reader refuses what the controller would (8840197), at its row.
  Result r = Replay("step,unit,sumsq\n0,a,1\n\n9000000000000000000,a,1\n", ControllerConfig());
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status.message(),
            "t.csv:4: step 9000000000000000000 is above the largest step 2305843009213693951");
}

TEST(Replay, InvalidConfigIsRejected) {
  ControllerConfig c;
  c.max_o = -1;
  Result r = Replay(kSmallTrace, c);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
}

// The bundled example replayed through RunReplay equals a controller fed
// directly from an independent, naive parse of the same file.
TEST(Replay, MatchesADirectControllerOnTheExampleTrace) {
  const std::string path = std::string(GNMR_SOURCE_DIR) + "/examples/traces/example.csv";
  StatusOr<ControllerConfig> config =
      LoadControllerConfigFile(std::string(GNMR_SOURCE_DIR) + "/examples/configs/replay.yaml");
  ASSERT_TRUE(config.ok()) << config.status().message();

  TraceReader reader;
  ASSERT_TRUE(reader.OpenFile(path).ok());
  std::ostringstream replayed;
  OstreamSink sink(replayed);
  ReplayOptions options;
  options.config = config.value();
  uint64_t progress_calls = 0;
  options.on_step = [&](const ReplayProgress&) { ++progress_calls; };
  StatusOr<ReplaySummary> summary = RunReplay(&reader, options, &sink);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_EQ(progress_calls, summary->steps);

  auto ctl = Controller::Create(config.value());
  ASSERT_TRUE(ctl.ok());
  std::ifstream in(path);
  std::string line, expected;
  std::getline(in, line);  // header: step,unit,sumsq,amax,nonfinite,...
  ASSERT_EQ(line, "step,unit,sumsq,amax,nonfinite,zeros,numel");
  int64_t step = -1;
  std::vector<UnitSample> samples;
  Decision d;
  auto flush = [&] {
    if (step < 0) return;
    ASSERT_TRUE(ctl->Observe(step, samples, &d).ok());
    if (d.HasChanges()) AppendDecisionJson(d, ctl.value(), &expected);
    samples.clear();
  };
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
    ASSERT_EQ(f.size(), 7u);
    if (std::stoll(f[0]) != step) {
      flush();
      step = std::stoll(f[0]);
    }
    auto id = ctl->FindUnit(f[1]);
    UnitSample s;
    s.unit_id = id ? *id : ctl->AddUnit(f[1]).value();
    s.sumsq = std::stod(f[2]);
    s.amax = std::stod(f[3]);
    s.nonfinite = std::stoull(f[4]);
    s.zeros = std::stoull(f[5]);
    s.numel = std::stoull(f[6]);
    samples.push_back(s);
  }
  flush();
  EXPECT_EQ(replayed.str(), expected);
  EXPECT_EQ(summary->stats.admissions(), ctl->stats().admissions());
  // The example exercises every path: all three triggers and denials.
  EXPECT_GT(summary->stats.admissions_by_trigger[1], 0u);
  EXPECT_GT(summary->stats.admissions_by_trigger[2], 0u);
  EXPECT_GT(summary->stats.admissions_by_trigger[3], 0u);
  EXPECT_GT(summary->stats.denials, 0u);
  EXPECT_GT(summary->stats.inactive_samples, 0u);
}

TEST(Replay, NullSinkCountsBytes) {
  TraceReader reader;
  ASSERT_TRUE(reader.OpenBuffer(kSmallTrace, "t.csv").ok());
  NullSink sink;
  ReplayOptions options;
  options.config = SmallConfig();
  ASSERT_TRUE(RunReplay(&reader, options, &sink).ok());
  EXPECT_EQ(sink.bytes(), Replay(kSmallTrace, SmallConfig()).jsonl.size());
}

}  // namespace
}  // namespace gnmr
