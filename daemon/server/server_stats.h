// ServerStats: process-wide counters of the RPC layer, read by the metrics
// exporter and by Admin.GetStatus. Plain atomics: cheap from any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace gnmr {

struct ServerStats {
  std::atomic<int64_t> sessions_open{0};
  std::atomic<uint64_t> sessions_total{0};
  std::atomic<uint64_t> decisions_sent{0};
  std::atomic<uint64_t> decisions_dropped{0};  // slow rank: queue overflow
  std::atomic<uint64_t> bad_requests{0};
};

}  // namespace gnmr
