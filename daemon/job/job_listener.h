// JobListener: the side effects of a job (event log, snapshots, metrics),
// injected so the Job itself does no I/O and tests can observe it.
//
// Every method is called with the job's lock held, so implementations must
// be quick and must never call back into the job: hand work to a background
// writer (the store's writers are built that way) or update atomics.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "controller/controller.h"
#include "daemon/aggregator/step_aggregator.h"
#include "daemon/job/ack_book.h"
#include "gnmr/status.h"
#include "gnmr/v1/gnmr.pb.h"
#include "gnmr/v1/job_state.pb.h"

namespace gnmr {

struct StepTiming {
  double aggregation_seconds = 0;  // combining the ranks' reports
  double decision_seconds = 0;     // last report in -> decision out
  double broadcast_seconds = 0;    // of which: serializing it and queueing it to every stream
};

class JobListener {
 public:
  virtual ~JobListener() = default;

  // A job was created or restored (not under its lock: it is not shared yet).
  virtual void OnJobStarted(const std::string& job_id, uint32_t world_size,
                            const Controller& controller) = 0;
  virtual void OnReport(const std::string& job_id, uint32_t rank, size_t bytes,
                        const v1::ClientOverhead& overhead) = 0;
  virtual void OnLateReport(const std::string& job_id, uint32_t rank) = 0;
  // A standby's ack said what it held back (docs/scale.md): the client
  // figures its reports would have carried.
  virtual void OnStandbyNote(const std::string& job_id, uint32_t rank,
                             const v1::ClientOverhead& overhead) {
    (void)job_id, (void)rank, (void)overhead;
  }
  // A standby's held report was compared with its reporter's (replica
  // check); `match` false is also a `replicas_differ` event.
  virtual void OnReplicaCheck(const std::string& job_id, bool match) { (void)job_id, (void)match; }
  virtual void OnDecision(const std::string& job_id, const StepAggregator::ClosedStep& step,
                          const Decision& decision, const Controller& controller,
                          const StepTiming& timing) = 0;
  virtual void OnEvents(const std::string& job_id, const std::vector<v1::Event>& events) = 0;
  // The controller changed outside a decision (config, release, import).
  virtual void OnControllerChanged(const std::string& job_id, const Controller& controller) = 0;
  // Two ranks (or a rank and the daemon) disagree on the plan of a step;
  // once per step. The job also writes it as an `ack_mismatch` event.
  virtual void OnAckMismatch(const std::string& job_id, const AckMismatch& mismatch) = 0;
  // A closed step could not be decided (the controller refused its input:
  // a bug, never the peer's fault). The job also logs it and writes a
  // `decision_failed` event.
  virtual void OnDecisionFailed(const std::string& job_id) = 0;
  virtual void OnSessions(const std::string& job_id, uint32_t connected) = 0;
  // The registered ranks that had no decision for more than
  // Job::kWithoutDecisionsSteps of the job's steps (docs/safety.md, "A rank
  // without decisions"), when that count changes.
  virtual void OnRanksWithoutDecisions(const std::string& job_id, uint32_t ranks) {
    (void)job_id, (void)ranks;
  }
  // A snapshot should be written (asynchronously; latest wins). The state
  // is handed over, not copied (a large job's state is large).
  virtual void OnSnapshot(const std::string& job_id, v1::ControllerState state,
                          const v1::JobMeta& meta) = 0;
  // The job was deleted or expired and is closed (Job::Close: no other call
  // for it follows): forget it, its files and its metric series. Not under
  // the job's lock, and the only method that may block (file I/O); a new
  // job of the same id is created only after it returns. Errors are for
  // the caller's log line and the Admin answer.
  virtual Status OnJobRemoved(const std::string& job_id) {
    (void)job_id;
    return Status::Ok();
  }
};

}  // namespace gnmr
