#include "daemon/metrics/group_series.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gnmr {
namespace metrics {

std::string_view UnitGroup(std::string_view unit, size_t depth) {
  size_t end = 0;
  for (size_t part = 0; part < depth; ++part) {
    const size_t dot = unit.find('.', end);
    if (dot == std::string_view::npos) return unit;
    if (part + 1 == depth) return unit.substr(0, dot);
    end = dot + 1;
  }
  return unit;
}

GroupSeries::GroupSeries(MetricFamilies* families, std::string job_id, GroupOptions options)
    : families_(families),
      job_id_(std::move(job_id)),
      options_{options.depth, std::max<size_t>(options.max_groups, 1)} {}

GroupSeries::~GroupSeries() { Reset(); }

void GroupSeries::Reset() {
  for (const Series& s : series_) {
    families_->group_gnmr_max.Remove(s.gnmr_max);
    families_->group_units.Remove(s.units);
    families_->group_units_in_recovery.Remove(s.in_recovery);
  }
  series_.clear();
  group_index_.clear();
  series_of_unit_.clear();
}

void GroupSeries::Learn(size_t n, const UnitView& units) {
  // Between Resets units are only added (a deciding controller never
  // forgets or renames one), so only the new ones are placed.
  for (size_t i = series_of_unit_.size(); i < n; ++i) {
    std::string group(UnitGroup(units.name(i), options_.depth));
    auto it = group_index_.find(group);
    if (it == group_index_.end() && series_.size() + 1 >= options_.max_groups) {
      group = kOther;  // the last series holds every group from here on
      it = group_index_.find(group);
    }
    if (it == group_index_.end()) {
      const prometheus::Labels labels = {{"job_id", job_id_}, {"group", group}};
      series_.push_back({&families_->group_gnmr_max.Add(labels),
                         &families_->group_units.Add(labels),
                         &families_->group_units_in_recovery.Add(labels)});
      it = group_index_.emplace(group, static_cast<uint32_t>(series_.size() - 1)).first;
    }
    series_of_unit_.push_back(it->second);
  }
}

void GroupSeries::Set(size_t n, const UnitView& units) {
  if (options_.depth == 0) return;
  if (n < series_of_unit_.size()) Reset();
  Learn(n, units);
  struct Sum {
    double gnmr_max = std::numeric_limits<double>::quiet_NaN();
    uint32_t units = 0;
    uint32_t in_recovery = 0;
  };
  std::vector<Sum> sums(series_.size());
  for (size_t i = 0; i < n; ++i) {
    Sum& s = sums[series_of_unit_[i]];
    const double g = units.gnmr(i);
    if (!std::isnan(g) && !(g <= s.gnmr_max)) s.gnmr_max = g;  // NaN never wins
    ++s.units;
    if (units.in_recovery(i)) ++s.in_recovery;
  }
  for (size_t k = 0; k < series_.size(); ++k) {
    const Sum& s = sums[k];
    series_[k].gnmr_max->Set(s.gnmr_max);
    series_[k].units->Set(s.units);
    series_[k].in_recovery->Set(s.in_recovery);
  }
}

}  // namespace metrics
}  // namespace gnmr
