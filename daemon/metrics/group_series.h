// GroupSeries: the GNMR of every unit of a job, folded into a few series by
// unit group, so a dashboard can show the whole model at 50,000 units.
//
// The per-unit series (unit_series.h) show only the units in recovery and
// the top K: the hot spots, never the shape of the whole model. Unit names
// are hierarchical ("layers.12.mlp.experts.37.w1"), so their first `depth`
// dot-separated parts ("layers.12" at depth 2) name a group: a layer of the
// model, however many experts or matrices it holds. Each group exports
//   gnmr_group_gnmr_max{job_id,group}           highest last GNMR of its units
//   gnmr_group_units{job_id,group}              its units
//   gnmr_group_units_in_recovery{job_id,group}  its units in recovery
// A name with fewer parts than `depth` is a group of its own.
//
// Bounded: at most `max_groups` series per metric and job. Groups are
// numbered in the order their first unit registered (model order); the
// groups from number max_groups on are exported together as `(other)`.
// The group of each unit is worked out once (a deciding controller only
// ever adds units; Reset starts over after a restore or import), so an
// update is one pass over the units without string work.
//
// Not thread-safe; JobMetrics serialises calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daemon/metrics/metric_families.h"

namespace gnmr {
namespace metrics {

struct GroupOptions {
  size_t depth = 2;         // name parts that make a group; 0: no group series
  size_t max_groups = 256;  // series per metric and job, (other) included
};

// The group of `unit`: its first `depth` dot-separated parts.
std::string_view UnitGroup(std::string_view unit, size_t depth);

// What one update needs to know of unit i (0 <= i < n).
struct UnitView {
  std::function<const std::string&(size_t)> name;
  std::function<double(size_t)> gnmr;
  std::function<bool(size_t)> in_recovery;
};

class GroupSeries {
 public:
  static constexpr const char* kOther = "(other)";

  GroupSeries(MetricFamilies* families, std::string job_id, GroupOptions options);
  ~GroupSeries();  // removes every series it exported
  GroupSeries(const GroupSeries&) = delete;
  GroupSeries& operator=(const GroupSeries&) = delete;

  // Exports the groups of units 0..n-1. O(n) (plus the names of units not
  // seen before). A NaN GNMR (non-finite gradient) is passed over; a group
  // with no other exports NaN as its max.
  void Set(size_t n, const UnitView& units);
  size_t size() const { return series_.size(); }
  // Forgets every group (their series too): the next Set places every unit
  // anew. For a controller replaced wholesale (restore, import).
  void Reset();

 private:
  struct Series {
    prometheus::Gauge* gnmr_max;
    prometheus::Gauge* units;
    prometheus::Gauge* in_recovery;
  };
  void Learn(size_t n, const UnitView& units);

  MetricFamilies* const families_;
  const std::string job_id_;
  const GroupOptions options_;
  std::vector<uint32_t> series_of_unit_;  // index into series_
  std::unordered_map<std::string, uint32_t> group_index_;
  std::vector<Series> series_;
};

}  // namespace metrics
}  // namespace gnmr
