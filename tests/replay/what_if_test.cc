// What-if replay: SplitVariant's top-level commas, and RunWhatIf's one pass
// giving every variant exactly the counters a separate RunReplay of that
// config gives, on the bundled example trace.
#include "controller/replay/what_if.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "controller/config_yaml.h"

namespace gnmr {
namespace {

const std::string kSource = GNMR_SOURCE_DIR;

TEST(SplitVariant, SplitsAtTopLevelCommasOnly) {
  auto parts = SplitVariant("tau=3, max_o=2");
  ASSERT_TRUE(parts.ok());
  EXPECT_EQ(parts.value(), (std::vector<std::string>{"tau=3", "max_o=2"}));
  parts = SplitVariant(R"(actions=[{pattern: "a,b", action: clip}, {pattern: 'x'}],lag=0)");
  ASSERT_TRUE(parts.ok());
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0], R"(actions=[{pattern: "a,b", action: clip}, {pattern: 'x'}])");
  EXPECT_EQ((*parts)[1], "lag=0");
  EXPECT_EQ(SplitVariant("tau=3").value(), std::vector<std::string>{"tau=3"});
}

TEST(SplitVariant, RejectsEmptyPartsAndUnbalancedText) {
  EXPECT_EQ(SplitVariant("").status().message(),
            "--variant '': empty override (write key=value[,key=value...])");
  EXPECT_FALSE(SplitVariant("tau=3,").ok());
  EXPECT_FALSE(SplitVariant(",tau=3").ok());
  EXPECT_EQ(SplitVariant("actions=[{pattern: x}").status().message(),
            "--variant 'actions=[{pattern: x}': unbalanced brackets");
  EXPECT_EQ(SplitVariant("actions=[{pattern: \"x}]").status().message(),
            "--variant 'actions=[{pattern: \"x}]': unbalanced quote");
  EXPECT_FALSE(SplitVariant("tau=3]").ok());
}

void ExpectSameStats(const ControllerStats& a, const ControllerStats& b) {
  EXPECT_EQ(a.steps_observed, b.steps_observed);
  EXPECT_EQ(a.unit_steps_observed, b.unit_steps_observed);
  EXPECT_EQ(a.unit_steps_in_force, b.unit_steps_in_force);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(a.admissions_by_trigger[i], b.admissions_by_trigger[i]) << i;
    EXPECT_EQ(a.admissions_by_action[i], b.admissions_by_action[i]) << i;
  }
  EXPECT_EQ(a.denials, b.denials);
  EXPECT_EQ(a.releases, b.releases);
  EXPECT_EQ(a.global_skips, b.global_skips);
  EXPECT_EQ(a.peak_in_recovery, b.peak_in_recovery);
}

TEST(RunWhatIf, EachVariantMatchesItsOwnReplay) {
  const std::string trace = kSource + "/examples/traces/example.csv";
  StatusOr<ControllerConfig> base =
      LoadControllerConfigFile(kSource + "/examples/configs/replay.yaml");
  ASSERT_TRUE(base.ok());
  std::vector<WhatIfVariant> variants = {{"base", base.value()}};
  for (const char* spec : {"tau=2", "max_o=1", "tau=2,max_o=1,lock_steps=30", "tau_delta=0.5"}) {
    WhatIfVariant v{spec, base.value()};
    const StatusOr<std::vector<std::string>> parts = SplitVariant(spec);
    ASSERT_TRUE(parts.ok());
    for (const std::string& a : parts.value()) {
      ASSERT_TRUE(ApplyOverride(&v.config, a).ok()) << a;
    }
    variants.push_back(v);
  }
  TraceReader reader;
  ASSERT_TRUE(reader.OpenFile(trace).ok());
  StatusOr<WhatIfSummary> what_if = RunWhatIf(&reader, variants);
  ASSERT_TRUE(what_if.ok()) << what_if.status().message();
  ASSERT_EQ(what_if->results.size(), variants.size());
  EXPECT_EQ(what_if->steps, 320u);
  for (size_t i = 0; i < variants.size(); ++i) {
    SCOPED_TRACE(variants[i].label);
    EXPECT_EQ(what_if->results[i].label, variants[i].label);
    TraceReader alone;
    ASSERT_TRUE(alone.OpenFile(trace).ok());
    ReplayOptions options;
    options.config = variants[i].config;
    NullSink sink;
    StatusOr<ReplaySummary> replay = RunReplay(&alone, options, &sink);
    ASSERT_TRUE(replay.ok());
    ExpectSameStats(what_if->results[i].stats, replay->stats);
  }
  // The variants differ where they should: a budget of 1 denies more and
  // never holds more than one unit.
  EXPECT_EQ(what_if->results[2].stats.peak_in_recovery, 1u);
  EXPECT_GT(what_if->results[2].stats.denials, what_if->results[0].stats.denials);
}

TEST(RunWhatIf, ReportsTraceErrorsWithTheirLine) {
  TraceReader reader;
  ASSERT_TRUE(reader.OpenBuffer("step,unit,sumsq\n0,a,1\n1,a,-1\n", "t.csv").ok());
  StatusOr<WhatIfSummary> s = RunWhatIf(&reader, {{"base", ControllerConfig()}});
  EXPECT_EQ(s.status().message(),
            "t.csv:3: column 'sumsq': '-1' is negative (a sum of squares is >= 0, nan or inf)");
}

}  // namespace
}  // namespace gnmr
