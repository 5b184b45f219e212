#include "daemon/metrics/unit_series.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace gnmr {
namespace metrics {

std::vector<size_t> SelectExportedUnits(size_t n, const std::function<double(size_t)>& gnmr,
                                        const std::function<bool(size_t)>& in_recovery,
                                        size_t top_k) {
  std::vector<size_t> chosen;
  std::vector<std::pair<double, size_t>> others;
  others.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (in_recovery(i)) {
      chosen.push_back(i);
    } else {
      const double g = gnmr(i);
      others.emplace_back(std::isnan(g) ? -HUGE_VAL : g, i);
    }
  }
  // Highest GNMR first, then lowest index.
  auto better = [](const std::pair<double, size_t>& a, const std::pair<double, size_t>& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  const size_t k = std::min(top_k, others.size());
  if (k < others.size()) {
    std::nth_element(others.begin(), others.begin() + k, others.end(), better);
  }
  for (size_t i = 0; i < k; ++i) chosen.push_back(others[i].second);
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

UnitSeries::UnitSeries(MetricFamilies* families, std::string job_id)
    : families_(families), job_id_(std::move(job_id)) {}

UnitSeries::~UnitSeries() {
  for (const auto& [name, s] : series_) Remove(s);
}

UnitSeries::Series UnitSeries::Add(const std::string& unit) {
  const prometheus::Labels labels = {{"job_id", job_id_}, {"unit", unit}};
  return Series{&families_->unit_gnmr.Add(labels),
                &families_->unit_norm.Add(labels),
                &families_->unit_mu.Add(labels),
                &families_->unit_in_recovery.Add(labels),
                &families_->unit_forward.Add(labels),
                &families_->unit_saturation.Add(labels),
                &families_->unit_saturated_blocks.Add(labels),
                &families_->unit_dead_blocks.Add(labels),
                &families_->unit_scale_clamps.Add(labels),
                &families_->unit_backward.Add(labels)};
}

void UnitSeries::Remove(const Series& s) {
  families_->unit_gnmr.Remove(s.gnmr);
  families_->unit_norm.Remove(s.norm);
  families_->unit_mu.Remove(s.mu);
  families_->unit_in_recovery.Remove(s.in_recovery);
  families_->unit_forward.Remove(s.forward);
  families_->unit_saturation.Remove(s.saturation);
  families_->unit_saturated_blocks.Remove(s.saturated_blocks);
  families_->unit_dead_blocks.Remove(s.dead_blocks);
  families_->unit_scale_clamps.Remove(s.scale_clamps);
  families_->unit_backward.Remove(s.backward);
}

void UnitSeries::Set(const std::vector<UnitFigures>& units) {
  std::unordered_set<std::string> wanted;
  for (const UnitFigures& u : units) wanted.insert(u.name);
  for (auto it = series_.begin(); it != series_.end();) {
    if (wanted.count(it->first) == 0) {
      Remove(it->second);
      it = series_.erase(it);
    } else {
      ++it;
    }
  }
  for (const UnitFigures& u : units) {
    auto it = series_.find(u.name);
    if (it == series_.end()) it = series_.emplace(u.name, Add(u.name)).first;
    it->second.gnmr->Set(u.gnmr);
    it->second.norm->Set(u.norm);
    it->second.mu->Set(u.mu);
    it->second.in_recovery->Set(u.in_recovery ? 1.0 : 0.0);
    it->second.forward->Set(u.forward);
    it->second.saturation->Set(u.saturation);
    it->second.saturated_blocks->Set(u.saturated_blocks);
    it->second.dead_blocks->Set(u.dead_blocks);
    it->second.scale_clamps->Set(u.scale_clamps);
    it->second.backward->Set(u.backward);
  }
}

}  // namespace metrics
}  // namespace gnmr
