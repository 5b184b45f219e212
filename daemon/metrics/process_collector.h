// ProcessCollector: gnmrd's own process figures, read at scrape time
// (prometheus-cpp exports no process_* metrics). Linux: /proc/self.
//
//   gnmr_process_resident_memory_bytes   resident set size
//   gnmr_process_virtual_memory_bytes    virtual memory size
//   gnmr_process_open_fds                open file descriptors
//
// A figure that cannot be read (no /proc) is left out of the scrape.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace gnmr {
namespace metrics {

struct ProcessFigures {
  std::optional<double> resident_bytes;
  std::optional<double> virtual_bytes;
  std::optional<double> open_fds;
};

// Reads the figures of the calling process from `proc_self` (a directory
// laid out like /proc/self).
ProcessFigures ReadProcessFigures(const std::string& proc_self = "/proc/self");

class ProcessCollector : public prometheus::Collectable {
 public:
  explicit ProcessCollector(std::string proc_self = "/proc/self")
      : proc_self_(std::move(proc_self)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::string proc_self_;
};

}  // namespace metrics
}  // namespace gnmr
