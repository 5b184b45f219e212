// The q-quantile of a benchmark's per-round figures (nearest rank), shared
// by the CPU harnesses (cpu_stats_vs_read, block_stats_vs_fp8).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace gnmr::bench {

inline double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace gnmr::bench
