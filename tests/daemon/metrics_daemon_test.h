// A DaemonTest whose jobs' side effects also reach gnmrd's own metrics
// (DaemonSideEffects over a DaemonMetrics without an endpoint), rendered in
// the test: for tests that assert what the metrics say.
#pragma once

#include <memory>
#include <string>

#include "daemon/metrics/daemon_metrics.h"
#include "programs/gnmrd/side_effects.h"
#include "tests/daemon/test_daemon.h"
#include "tests/metrics/metrics_scrape.h"

namespace gnmr::testing {

class MetricsDaemonTest : public DaemonTest {
 protected:
  // Starts the metrics, then the daemon.
  void StartDaemonWithMetrics(DaemonOptions opts = {}) {
    metrics::MetricsOptions mo;
    mo.listen = "";  // no endpoint: rendered in the test
    auto m = metrics::DaemonMetrics::Start(mo);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    metrics_ = std::move(m).value();
    effects_ = std::make_unique<DaemonSideEffects>(nullptr, nullptr, metrics_.get());
    listener_.forward = effects_.get();
    StartDaemon(std::move(opts));
  }
  // One sample's value, e.g. `gnmr_ack_mismatches_total{job_id="j"}` (0 if absent).
  double Sample(const std::string& series) {
    auto samples = testing_util::ParseSamples(metrics_->Render());
    return samples[series];
  }

  std::unique_ptr<metrics::DaemonMetrics> metrics_;
  std::unique_ptr<DaemonSideEffects> effects_;
};

}  // namespace gnmr::testing
