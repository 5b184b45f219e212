// UnitSeries: the per-unit gauges of one job, with bounded cardinality.
//
// A job may have a million units; exporting a series per unit would swamp
// Prometheus. Only the units that matter are exported (docs/metrics.md, "Per job and unit"):
// every unit in recovery (at most max_o) and the top K others by GNMR.
// Each update exports exactly that set: series of units that left it are
// removed (Family::Remove), so the number of unit series per job never
// exceeds K + max_o however many updates and units there are.
//
// Not thread-safe; JobMetrics serialises calls.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/metrics/metric_families.h"

namespace gnmr {
namespace metrics {

struct UnitFigures {
  std::string name;
  double gnmr = 0.0;
  double norm = 0.0;
  double mu = 0.0;
  bool in_recovery = false;
  double forward = 0.0;     // forward channel: last forward norm / its mean
  double saturation = 0.0;  // last saturated fraction / its mean
  // Block health of the last sample (fractions of its blocks; 0 without
  // block-scaled forward tensors).
  double saturated_blocks = 0.0;
  double dead_blocks = 0.0;
  double scale_clamps = 0.0;
  double backward = 0.0;  // backward channel: last quantized-gradient norm / its mean
};

// Indices (ascending) of the units to export out of `n`: all for which
// `in_recovery(i)`, plus the `top_k` others with the highest `gnmr(i)`
// (NaN ranks lowest; ties go to the lower index). O(n).
std::vector<size_t> SelectExportedUnits(size_t n, const std::function<double(size_t)>& gnmr,
                                        const std::function<bool(size_t)>& in_recovery,
                                        size_t top_k);

class UnitSeries {
 public:
  UnitSeries(MetricFamilies* families, std::string job_id);
  ~UnitSeries();  // removes every series it exported
  UnitSeries(const UnitSeries&) = delete;
  UnitSeries& operator=(const UnitSeries&) = delete;

  // Exports exactly `units` (already selected), removing the others.
  void Set(const std::vector<UnitFigures>& units);
  size_t size() const { return series_.size(); }

 private:
  struct Series {
    prometheus::Gauge* gnmr;
    prometheus::Gauge* norm;
    prometheus::Gauge* mu;
    prometheus::Gauge* in_recovery;
    prometheus::Gauge* forward;
    prometheus::Gauge* saturation;
    prometheus::Gauge* saturated_blocks;
    prometheus::Gauge* dead_blocks;
    prometheus::Gauge* scale_clamps;
    prometheus::Gauge* backward;
  };
  Series Add(const std::string& unit);
  void Remove(const Series& s);

  MetricFamilies* const families_;
  const std::string job_id_;
  std::unordered_map<std::string, Series> series_;  // by unit name
};

}  // namespace metrics
}  // namespace gnmr
