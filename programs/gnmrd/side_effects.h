// DaemonSideEffects: gnmrd's JobListener. Routes each job's side effects to
// the store (snapshots, event log, trace recording) and the metrics exporter.
//
// Called under the job's lock: every target here is non-blocking (the store
// writers are background threads; metrics are atomics and short mutexes).
// OnJobRemoved is the exception (not under a lock; file I/O): it cancels the
// job's pending snapshot, closes its event log and trace, removes its directory
// (store::RemoveJobDir: atomically) and its metric series.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/time_source.h"
#include "daemon/job/job_listener.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/store/event_log.h"
#include "daemon/store/snapshot_writer.h"
#include "daemon/store/trace_recorder.h"

namespace gnmr {

class DaemonSideEffects final : public JobListener {
 public:
  // Any pointer but `clock` may be null: that side effect is off.
  // `state_dir` is where a removed job's files are ("": none are removed).
  // `traces` records the decided steps (a full queue drops a step: a
  // `trace_dropped` event marks the first of each gap). `clock` (the
  // daemon's, never null) dates those events and names a removed job's
  // directory.
  DaemonSideEffects(store::SnapshotWriter* snapshots, store::EventLog* events,
                    metrics::DaemonMetrics* metrics, std::string state_dir = "",
                    store::TraceRecorder* traces = nullptr,
                    const TimeSource* clock = &TimeSource::Real())
      : snapshots_(snapshots),
        events_(events),
        metrics_(metrics),
        state_dir_(std::move(state_dir)),
        traces_(traces),
        clock_(clock) {}

  void OnJobStarted(const std::string& job_id, uint32_t world_size,
                    const Controller& controller) override;
  void OnStandbyNote(const std::string& job_id, uint32_t rank,
                     const v1::ClientOverhead& overhead) override;
  void OnReplicaCheck(const std::string& job_id, bool match) override;
  void OnReport(const std::string& job_id, uint32_t rank, size_t bytes,
                const v1::ClientOverhead& overhead) override;
  void OnLateReport(const std::string& job_id, uint32_t rank) override;
  void OnDecision(const std::string& job_id, const StepAggregator::ClosedStep& step,
                  const Decision& decision, const Controller& controller,
                  const StepTiming& timing) override;
  void OnEvents(const std::string& job_id, const std::vector<v1::Event>& events) override;
  void OnControllerChanged(const std::string& job_id, const Controller& controller) override;
  void OnAckMismatch(const std::string& job_id, const AckMismatch& mismatch) override;
  void OnDecisionFailed(const std::string& job_id) override;
  void OnSessions(const std::string& job_id, uint32_t connected) override;
  void OnRanksWithoutDecisions(const std::string& job_id, uint32_t ranks) override;
  void OnSnapshot(const std::string& job_id, v1::ControllerState state,
                  const v1::JobMeta& meta) override;
  Status OnJobRemoved(const std::string& job_id) override;

 private:
  store::SnapshotWriter* const snapshots_;
  store::EventLog* const events_;
  metrics::DaemonMetrics* const metrics_;
  const std::string state_dir_;
  store::TraceRecorder* const traces_;
  const TimeSource* const clock_;
};

}  // namespace gnmr
