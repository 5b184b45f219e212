// What the Job fuzz targets (job_sequence_fuzz.cc, controller_state_fuzz.cc)
// share: a session sink that checks the stream a rank receives, and a job
// listener that checks every snapshot the job asks for.
//
// Stream rules checked (daemon/job/job_generation.cc, "Generations"): a stream starts
// with a GenerationStart; generations never go back; a decision belongs to
// the stream's current generation and its sequence numbers increase.
// Snapshot rule: every state the job hands to be snapshotted restores
// (a snapshot that cannot be restored would lose the job at restart).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/job/job.h"
#include "daemon/job/job_listener.h"

namespace gnmr::fuzz {

class CheckingSink : public DecisionSink {
 public:
  void SendDecision(std::shared_ptr<const WireMessage> wire) override;
  void Close(const Status&) override { closed_ = true; }

  bool closed() const { return closed_; }
  // The decisions received, oldest first (acks pick from them).
  const std::vector<v1::Decision>& decisions() const { return decisions_; }
  // The largest recovery set received.
  size_t max_recovery() const { return max_recovery_; }

 private:
  bool closed_ = false;
  bool started_ = false;
  uint64_t generation_ = 0;
  uint64_t last_sequence_ = 0;
  bool have_sequence_ = false;
  size_t max_recovery_ = 0;
  std::vector<v1::Decision> decisions_;
};

class CheckingListener : public JobListener {
 public:
  void OnJobStarted(const std::string&, uint32_t, const Controller&) override {}
  void OnReport(const std::string&, uint32_t, size_t, const v1::ClientOverhead&) override {}
  void OnLateReport(const std::string&, uint32_t) override {}
  void OnDecision(const std::string&, const StepAggregator::ClosedStep&, const Decision&,
                  const Controller&, const StepTiming&) override {
    ++decisions;
  }
  void OnEvents(const std::string&, const std::vector<v1::Event>& events) override {
    this->events += events.size();
  }
  void OnControllerChanged(const std::string&, const Controller&) override {}
  void OnAckMismatch(const std::string&, const AckMismatch&) override { ++mismatches; }
  void OnDecisionFailed(const std::string&) override { ++decision_failures; }
  void OnSessions(const std::string&, uint32_t) override {}
  void OnSnapshot(const std::string& job_id, v1::ControllerState state,
                  const v1::JobMeta& meta) override;

  uint64_t decisions = 0;
  uint64_t events = 0;
  uint64_t mismatches = 0;
  uint64_t decision_failures = 0;
  uint64_t snapshots = 0;
};

// Logging off (spdlog: the job logs refused steps and the like; protobuf:
// refused strings): fuzzers run millions of inputs.
void QuietLogs();

}  // namespace gnmr::fuzz
