// QuietListener: a JobListener that ignores every side effect, for tests
// of a Job alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/job/job_listener.h"

namespace gnmr::testing {

class QuietListener : public JobListener {
 public:
  void OnJobStarted(const std::string&, uint32_t, const Controller&) override {}
  void OnReport(const std::string&, uint32_t, size_t, const v1::ClientOverhead&) override {}
  void OnLateReport(const std::string&, uint32_t) override {}
  void OnDecision(const std::string&, const StepAggregator::ClosedStep&, const Decision&,
                  const Controller&, const StepTiming&) override {}
  void OnEvents(const std::string&, const std::vector<v1::Event>&) override {}
  void OnControllerChanged(const std::string&, const Controller&) override {}
  void OnAckMismatch(const std::string&, const AckMismatch&) override {}
  void OnDecisionFailed(const std::string&) override {}
  void OnSessions(const std::string&, uint32_t) override {}
  void OnSnapshot(const std::string&, v1::ControllerState, const v1::JobMeta&) override {}
};

}  // namespace gnmr::testing
