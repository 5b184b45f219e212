// Job: one training job inside gnmrd — its ranks and sessions, unit layout,
// step aggregation, controller, and the decision broadcast.
//
// Design notes
// - One mutex per job; jobs never share state, so two jobs cannot affect
//   each other. Every public method takes the lock; listeners and session
//   sinks are called under it and must not call back into the job.
// - A decision is built once as a ServerMessage and the same immutable
//   object is queued to every connected rank: all ranks receive identical
//   bytes for a step.
// - Every request is validated before anything changes; errors come back as
//   Status with the precise code the server answers with.
// - Snapshots are requested whenever the recovery set changes (so max_o and
//   locks survive a kill -9) and every `snapshot_every_steps` steps.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "daemon/aggregator/step_aggregator.h"
#include "daemon/controller/controller.h"
#include "daemon/job/job_listener.h"
#include "daemon/job/topology.h"
#include "gnmr/v1/gnmr.pb.h"
#include "gnmr/v1/job_state.pb.h"

namespace gnmr {

// The server side of one rank's Session stream.
class DecisionSink {
 public:
  virtual ~DecisionSink() = default;
  virtual void SendDecision(std::shared_ptr<const v1::ServerMessage> msg) = 0;
  // Ends the stream with `why` (e.g. ABORTED: replaced by a new session).
  virtual void Close(const Status& why) = 0;
};

struct JobOptions {
  StepAggregator::Options aggregation;
  uint32_t snapshot_every_steps = 50;
  size_t max_units = 1u << 20;
  size_t events_kept_for_acks = 1024;
};

struct RegisterResult {
  std::vector<uint32_t> unit_ids;
  uint64_t session_id = 0;
  ControllerConfig config;
  uint64_t config_version = 0;
  int64_t last_step = -1;
};

class Job {
 public:
  using Clock = std::chrono::steady_clock;

  // A new job; InvalidArgument if the config does not validate.
  static StatusOr<std::unique_ptr<Job>> Create(std::string job_id, uint32_t world_size,
                                               std::string token,
                                               const ControllerConfig& config,
                                               JobOptions options, JobListener* listener);
  // A job restored from its snapshot; DataLoss if the two parts disagree.
  static StatusOr<std::unique_ptr<Job>> Restore(const v1::ControllerState& state,
                                                const v1::JobMeta& meta,
                                                JobOptions options,
                                                JobListener* listener);

  const std::string& id() const { return id_; }
  uint32_t world_size() const { return world_size_; }
  bool TokenMatches(const std::string& token) const;

  // Registers (or re-registers) a rank; the rank's previous session, if any,
  // is closed with ABORTED. The request is assumed syntactically validated
  // (see request_validation.h); this checks it against the job.
  StatusOr<RegisterResult> Register(const v1::RegisterRequest& request);

  // Binds a Session stream to the rank's current session id and sends it
  // the newest decision, if any.
  Status Attach(uint32_t rank, uint64_t session_id, std::shared_ptr<DecisionSink> sink);
  void Detach(uint32_t rank, uint64_t session_id);

  // A StepStats from a rank's stream. Late reports are counted, not errors.
  Status OnStats(uint32_t rank, uint64_t session_id, const v1::StepStats& stats,
                 size_t bytes, Clock::time_point now);
  Status OnAck(uint32_t rank, uint64_t session_id, const v1::Ack& ack);

  // Closes steps whose deadline has passed.
  void Tick(Clock::time_point now);

  // ---- admin
  v1::JobInfo Info(Clock::time_point now) const;
  std::vector<v1::UnitInfo> Units(uint32_t top) const;
  ControllerConfig config() const;
  uint64_t config_version() const;
  Status SetConfig(const ControllerConfig& config);
  Status ReleaseUnit(const std::string& unit);
  v1::ControllerState ExportState() const;
  Status ImportState(const v1::ControllerState& state);
  // Requests a snapshot now (shutdown).
  void SnapshotNow();
  uint32_t connected_sessions() const;

 private:
  struct RankSession {
    uint64_t session_id = 0;
    std::shared_ptr<DecisionSink> sink;  // null while no stream is attached
    std::string client_version;
    Clock::time_point last_seen;
    bool seen = false;
  };

  Job(std::string job_id, uint32_t world_size, std::string token, Controller controller,
      JobOptions options, JobListener* listener);

  void DrainReady(Clock::time_point now);  // closes every ready step
  void Decide(const StepAggregator::ClosedStep& step, double aggregation_seconds);
  // After the controller was replaced (restart from a snapshot, ImportState):
  // the newest decision rebuilt from its state and sent to attached ranks.
  void RebuildLastDecision();
  // Makes `decision` the job's newest and queues it to every attached rank.
  void Publish(std::shared_ptr<const v1::ServerMessage> decision);
  void EmitEvents(const Decision& d);
  void RequestSnapshot();
  v1::JobMeta MetaLocked() const;
  Status CheckSession(uint32_t rank, uint64_t session_id) const;
  uint32_t ConnectedLocked() const;

  const std::string id_;
  const uint32_t world_size_;
  const std::string token_;
  const JobOptions options_;
  JobListener* const listener_;

  mutable std::mutex mu_;
  JobTopology topology_;
  Controller controller_;
  StepAggregator aggregator_;
  std::unordered_map<uint32_t, RankSession> sessions_;
  std::mt19937_64 session_ids_;
  std::deque<std::pair<uint64_t, uint64_t>> sent_digests_;  // sequence, digest
  // The newest decision, sent to a stream as soon as it attaches so a
  // (re)connecting rank knows the set in force before its next step.
  std::shared_ptr<const v1::ServerMessage> last_decision_;
  uint64_t steps_since_snapshot_ = 0;
};

}  // namespace gnmr
