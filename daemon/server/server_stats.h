// ServerStats: process-wide counters of the RPC layer, read by the metrics
// exporter and by Admin.GetStatus. Plain atomics: cheap from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string_view>

#include "gnmr/status.h"

namespace gnmr {

struct ServerStats {
  std::atomic<int64_t> sessions_open{0};
  std::atomic<uint64_t> sessions_total{0};
  std::atomic<uint64_t> decisions_sent{0};
  std::atomic<uint64_t> decisions_dropped{0};  // slow rank: queue overflow
  std::atomic<uint64_t> bad_requests{0};
  // Called once per finished RPC with its short method name ("Register",
  // "Session", "Admin.ListJobs"); set before the server starts.
  std::function<void(std::string_view method, StatusCode code)> record_rpc;

  void Record(std::string_view method, const Status& s) {
    if (record_rpc) record_rpc(method, s.code());
  }
};

}  // namespace gnmr
