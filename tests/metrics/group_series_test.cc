// Unit-group series (daemon/metrics/group_series.h): every unit of a job
// folded by name into at most max_groups groups, so the dashboard shows the
// whole model by layer however many units it has.
#include "daemon/metrics/group_series.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/metrics/daemon_metrics.h"
#include "tests/metrics/metrics_scrape.h"

namespace gnmr {
namespace metrics {
namespace {

using testing_util::CountSeries;
using testing_util::ParseSamples;

std::unique_ptr<DaemonMetrics> Metrics(GroupOptions groups) {
  MetricsOptions options;
  options.listen = "";
  options.top_k_units = 10;
  options.unit_refresh = std::chrono::milliseconds(0);
  options.unit_groups = groups;
  StatusOr<std::unique_ptr<DaemonMetrics>> m = DaemonMetrics::Start(options);
  EXPECT_TRUE(m.ok());
  return std::move(m.value());
}

std::string Series(const char* metric, const std::string& group) {
  return std::string(metric) + "{group=\"" + group + "\",job_id=\"j\"}";
}

TEST(UnitGroupTest, FirstPartsOfTheName) {
  EXPECT_EQ(UnitGroup("layers.12.mlp.fc1", 2), "layers.12");
  EXPECT_EQ(UnitGroup("layers.12.mlp.fc1", 1), "layers");
  EXPECT_EQ(UnitGroup("layers.12.mlp.fc1", 3), "layers.12.mlp");
  EXPECT_EQ(UnitGroup("layers.12.mlp.fc1", 4), "layers.12.mlp.fc1");
  EXPECT_EQ(UnitGroup("layers.12.mlp.fc1", 9), "layers.12.mlp.fc1");
  EXPECT_EQ(UnitGroup("embed", 2), "embed");
  EXPECT_EQ(UnitGroup("a..b", 2), "a.");
  EXPECT_EQ(UnitGroup("", 2), "");
}

// A DeepSeek-V3-like MoE layout: 58 layers x 256 experts x 3 matrices plus
// attention, 46,400 units in 58 layer groups and an embedding group.
TEST(GroupSeriesTest, FiftyThousandUnitsFoldIntoTheirLayers) {
  auto m = Metrics(GroupOptions{});
  JobMetrics* jm = m->ForJob("j");
  std::vector<UnitFigures> units;
  units.push_back({"embed", 0.5, 1.0, 1.0, false});
  std::map<std::string, double> max_of;
  for (int layer = 0; layer < 58; ++layer) {
    const std::string prefix = "layers." + std::to_string(layer);
    for (const char* part : {".attn.q", ".attn.kv", ".attn.o", ".router"}) {
      units.push_back({prefix + part, 1.0, 1.0, 1.0, false});
    }
    for (int e = 0; e < 256; ++e) {
      for (const char* w : {".w1", ".w2", ".w3"}) {
        // A value that differs per unit; its max per layer is known.
        const double g = 1.0 + 0.001 * ((layer * 7 + e * 13) % 997);
        units.push_back({prefix + ".experts." + std::to_string(e) + w, g, 1.0, 1.0, false});
        max_of[prefix] = std::max(max_of[prefix], g);
      }
    }
  }
  ASSERT_EQ(units.size(), 1u + 58u * (4u + 768u));
  // Layer 3 spikes in one expert, and two of its units are in recovery.
  units[1 + 3 * 772 + 4 + 100].gnmr = 40.0;
  units[1 + 3 * 772 + 4 + 100].in_recovery = true;
  units[1 + 3 * 772 + 4 + 101].in_recovery = true;
  max_of["layers.3"] = 40.0;
  jm->UpdateUnits(units);

  auto samples = ParseSamples(m->Render());
  EXPECT_EQ(CountSeries(samples, "gnmr_group_gnmr_max{"), 59u);
  EXPECT_EQ(CountSeries(samples, "gnmr_group_units{"), 59u);
  EXPECT_EQ(jm->group_series(), 59u);
  for (const auto& [group, max] : max_of) {
    EXPECT_DOUBLE_EQ(samples[Series("gnmr_group_gnmr_max", group)], max) << group;
    EXPECT_EQ(samples[Series("gnmr_group_units", group)], 772.0) << group;
  }
  EXPECT_EQ(samples[Series("gnmr_group_gnmr_max", "embed")], 0.5);
  EXPECT_EQ(samples[Series("gnmr_group_units", "embed")], 1.0);
  EXPECT_EQ(samples[Series("gnmr_group_units_in_recovery", "layers.3")], 2.0);
  EXPECT_EQ(samples[Series("gnmr_group_units_in_recovery", "layers.4")], 0.0);

  // The next update: the spike is over, its series follow.
  units[1 + 3 * 772 + 4 + 100].gnmr = 1.0;
  units[1 + 3 * 772 + 4 + 100].in_recovery = false;
  units[1 + 3 * 772 + 4 + 101].in_recovery = false;
  jm->UpdateUnits(units);
  samples = ParseSamples(m->Render());
  EXPECT_LT(samples[Series("gnmr_group_gnmr_max", "layers.3")], 40.0);
  EXPECT_EQ(samples[Series("gnmr_group_units_in_recovery", "layers.3")], 0.0);

  // A job's group series go with the job.
  m->RemoveJob("j");
  EXPECT_EQ(CountSeries(ParseSamples(m->Render()), "gnmr_group_"), 0u);
}

TEST(GroupSeriesTest, GroupsBeyondTheBoundAreOther) {
  auto m = Metrics(GroupOptions{2, 4});
  JobMetrics* jm = m->ForJob("j");
  std::vector<UnitFigures> units;
  for (int layer = 0; layer < 10; ++layer) {
    for (int k = 0; k < 3; ++k) {
      units.push_back({"layers." + std::to_string(layer) + ".w" + std::to_string(k),
                       1.0 + layer + 0.1 * k, 1.0, 1.0, layer == 8 && k == 0});
    }
  }
  jm->UpdateUnits(units);
  auto samples = ParseSamples(m->Render());
  // Layers 0-2 by name (the first groups to register), layers 3-9 together.
  EXPECT_EQ(CountSeries(samples, "gnmr_group_gnmr_max{"), 4u);
  EXPECT_EQ(samples[Series("gnmr_group_units", "layers.0")], 3.0);
  EXPECT_EQ(samples[Series("gnmr_group_units", "layers.2")], 3.0);
  EXPECT_EQ(samples.count(Series("gnmr_group_units", "layers.3")), 0u);
  EXPECT_EQ(samples[Series("gnmr_group_units", GroupSeries::kOther)], 21.0);
  EXPECT_DOUBLE_EQ(samples[Series("gnmr_group_gnmr_max", GroupSeries::kOther)], 10.2);
  EXPECT_EQ(samples[Series("gnmr_group_units_in_recovery", GroupSeries::kOther)], 1.0);

  // Units added later join their group, or (other); the bound holds.
  for (int layer = 10; layer < 20; ++layer)
    units.push_back({"layers." + std::to_string(layer), 2.0, 1.0, 1.0, false});
  units.push_back({"layers.1.w9", 3.0, 1.0, 1.0, false});
  jm->UpdateUnits(units);
  samples = ParseSamples(m->Render());
  EXPECT_EQ(CountSeries(samples, "gnmr_group_gnmr_max{"), 4u);
  EXPECT_EQ(samples[Series("gnmr_group_units", "layers.1")], 4.0);
  EXPECT_EQ(samples[Series("gnmr_group_units", GroupSeries::kOther)], 31.0);
}

TEST(GroupSeriesTest, NaNIsPassedOverAndDepthZeroExportsNothing) {
  {
    auto m = Metrics(GroupOptions{1, 256});
    JobMetrics* jm = m->ForJob("j");
    jm->UpdateUnits({{"a.x", NAN, 1.0, 1.0, false},
                     {"a.y", 2.5, 1.0, 1.0, false},
                     {"b.x", NAN, 1.0, 1.0, false},
                     {"c.x", INFINITY, 1.0, 1.0, false}});
    auto samples = ParseSamples(m->Render());
    EXPECT_EQ(samples[Series("gnmr_group_gnmr_max", "a")], 2.5);
    EXPECT_TRUE(std::isnan(samples[Series("gnmr_group_gnmr_max", "b")]));
    EXPECT_EQ(samples[Series("gnmr_group_gnmr_max", "c")], INFINITY);
    // Fewer units than before (a replaced layout): placed anew.
    jm->UpdateUnits({{"z.x", 1.5, 1.0, 1.0, false}});
    samples = ParseSamples(m->Render());
    EXPECT_EQ(CountSeries(samples, "gnmr_group_units{"), 1u);
    EXPECT_EQ(samples[Series("gnmr_group_units", "z")], 1.0);
  }
  auto m = Metrics(GroupOptions{0, 256});
  m->ForJob("j")->UpdateUnits({{"a.x", 1.0, 1.0, 1.0, false}});
  EXPECT_EQ(CountSeries(ParseSamples(m->Render()), "gnmr_group_"), 0u);
}

}  // namespace
}  // namespace metrics
}  // namespace gnmr
