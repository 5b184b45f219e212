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
// - Every request is validated before anything changes (Register and
//   ImportState are all-or-nothing); errors come back as Status with the
//   precise code the server answers with.
// - Job keeps the lock and the orchestration. Its parts, each with its own
//   header, are called with the lock held: RankSessions (sessions, the
//   broadcast), GenerationHistory (what each generation sent), AckBook,
//   ReporterElection, ReplicaCheck, RestoreHold and JobReservation (the
//   memory budget). JobView, the view Admin reads, has a mutex of its own.
// - Snapshots are requested whenever the recovery set changes (so max_o and
//   locks survive a kill -9), when a generation starts, and every
//   `snapshot_every_steps` steps.
//
// Generations and live switches (docs/safety.md, rule 3): the design
// comment at the top of job_generation.cc.
//
// Reporter election (reporter_election.h, job_reporters.cc): with `report:
// one_per_shard` the job tells each rank that can stand by whether it
// reports (ReporterRole, when its stream attaches and when its role
// changes), and the aggregator waits for the reporters only. A reporter
// whose stream ends is replaced at once; one that misses a step's deadline
// is passed over and the step gets one more deadline, during which the new
// reporter sends the step from the reports it held back.
//
// Ranks without decisions (job_ranks.cc): a rank that registered but gets
// no decisions (its stream never attached, a relay lost its lane, its acks
// never arrive) can look connected. Every kWithoutDecisionsCheck closed
// steps the job counts the registered ranks whose newest ack with a
// decision is more than kWithoutDecisionsSteps of its steps old (or that
// acked none since they registered), writes a `rank_without_decisions`
// event for each rank that crosses the line either way, and tells the
// listener (gnmr_ranks_without_decisions, an alert).
//
// Acks (AckBook): every rank acks every planned step; the job compares them
// per step (and an acked decision with the digest it sent) and reports one
// mismatch per step. Acks of an older generation are not compared: their
// plan belonged to a void generation (an old incarnation still shutting
// down, or a rank that has not yet heard of the new one).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "controller/controller.h"
#include "controller/publish/decision_message.h"
#include "daemon/aggregator/step_aggregator.h"
#include "daemon/job/ack_book.h"
#include "daemon/job/decision_sink.h"
#include "daemon/job/generation_history.h"
#include "daemon/job/job_listener.h"
#include "daemon/job/job_options.h"
#include "daemon/job/job_reservation.h"
#include "daemon/job/job_view.h"
#include "daemon/job/rank_sessions.h"
#include "daemon/job/replica_check.h"
#include "daemon/job/reporter_election.h"
#include "daemon/job/restore_hold.h"
#include "daemon/job/unit_query.h"
#include "daemon/job/wire_message.h"
#include "daemon/topology/topology.h"
#include "gnmr/status.h"
#include "gnmr/v1/gnmr.pb.h"
#include "gnmr/v1/job_state.pb.h"

namespace gnmr {

struct RegisterResult {
  std::vector<uint32_t> unit_ids;
  uint64_t session_id = 0;
  ControllerConfig config;
  uint64_t config_version = 0;
  int64_t last_step = -1;
  uint64_t generation = 0;
};

class Job {
 public:
  using Clock = std::chrono::steady_clock;

  // A new job; InvalidArgument if the config does not validate. Its first
  // generation is `first_generation` (above 1 for a job id that was
  // deleted while its ranks may still hold decisions of the old job).
  static StatusOr<std::unique_ptr<Job>> Create(std::string job_id, uint32_t world_size,
                                               std::string token, const ControllerConfig& config,
                                               JobOptions options, JobListener* listener,
                                               uint64_t first_generation = 1);
  // A job restored from its snapshot; DataLoss if the two parts disagree.
  static StatusOr<std::unique_ptr<Job>> Restore(const v1::ControllerState& state,
                                                const v1::JobMeta& meta, JobOptions options,
                                                JobListener* listener);

  ~Job();  // gives the job's memory budget back

  const std::string& id() const { return id_; }
  uint32_t world_size() const { return world_size_; }
  bool TokenMatches(const std::string& token) const;

  // Registers (or re-registers) a rank; the rank's previous session, if any,
  // is closed with ABORTED. The request is assumed syntactically validated
  // (see request_validation.h); this checks it against the job and changes
  // nothing when it fails. A rank that registered before (since this daemon
  // started) must name the same units: FAILED_PRECONDITION naming the
  // difference otherwise. May start a generation (new incarnation, above).
  StatusOr<RegisterResult> Register(const v1::RegisterRequest& request);

  // Binds a Session stream to the rank's current session id and sends it
  // the current GenerationStart and the generation's recent decisions.
  Status Attach(uint32_t rank, uint64_t session_id, std::shared_ptr<DecisionSink> sink);
  // `sink`'s stream ended. Nothing if the rank has another stream or
  // session by now (a replaced stream ends after its successor attached).
  void Detach(uint32_t rank, uint64_t session_id, const DecisionSink* sink);

  // A StepStats from a rank's stream. Late reports are counted, not errors.
  Status OnStats(uint32_t rank, uint64_t session_id, const v1::StepStats& stats, size_t bytes,
                 Clock::time_point now);
  // A rank's ack of a planned step: compared with the other ranks' acks of
  // the step and with the decision the job sent (see "Acks" above).
  Status OnAck(uint32_t rank, uint64_t session_id, const v1::Ack& ack);

  // The job's time (JobOptions::clock): what OnStats and Tick are given.
  Clock::time_point Now() const { return options_.clock->Now(); }

  // Closes steps whose deadline has passed.
  void Tick(Clock::time_point now);

  // ---- admin
  // The job's summary for ListJobs. Waits at most kInfoPatience for the
  // job's lock: while the job stays busy longer (a long decision, a large
  // Register) it returns the view published last, its ages advanced to
  // `now` (job_view.h: when it is published; kViewWatched). So one job can
  // never hold up a listing of all jobs for long, a finished Register always
  // shows, and while anyone watches (gnmrctl top, a dashboard's exporter) a
  // view is at most about a second older than the operation in progress.
  // Nobody watching, the job builds none (O(ranks) under its lock: ~4 ms a
  // second at 16,384 ranks, and a report arriving meanwhile waited for it).
  // A listing of many jobs passes one `give_up` (a time of the job's clock)
  // to all of them, so busy jobs together cost it at most kInfoPatience,
  // not 50 ms each; without one, each call has its own kInfoPatience. The
  // patience runs on the job's clock: a test's clock decides when it ends.
  static constexpr std::chrono::milliseconds kInfoPatience{50};
  static constexpr std::chrono::seconds kViewWatched{10};
  v1::JobInfo Info(Clock::time_point now) const;
  v1::JobInfo Info(Clock::time_point now, Clock::time_point give_up) const;
  // The units a ListUnits query asks for (unit_query.h); waits for the
  // job's lock.
  UnitPage Units(const UnitQuery& query) const;
  // The config in force (never waits for the job's lock either).
  ControllerConfig config() const;
  uint64_t config_version() const;
  Status SetConfig(const ControllerConfig& config);
  Status ReleaseUnit(const std::string& unit);
  v1::ControllerState ExportState() const;
  // Replaces the controller state (all-or-nothing) and starts a generation;
  // `generation` (may be null) receives its number. A repeat of this
  // generation's import before the controller changed is a no-op (the same
  // generation). `resume`: the importing trainer goes back to the state's
  // steps (a checkpoint load), so the switch is at once; otherwise (an
  // operator's import) it is live while ranks train (see "Live switches").
  Status ImportState(const v1::ControllerState& state, uint64_t* generation = nullptr,
                     bool resume = false);
  // The operator's way out when the job's steps went wrong (gnmrctl
  // rewind): starts a generation in which reports of `first_step` and
  // later are accepted (0: any step, the first report then anchors the
  // step-jump bound) and the controller forgets its last step
  // (Controller::Rewind: history, locks and the sequence stay).
  // InvalidArgument for a step outside [0, kMaxStep].
  Status Rewind(int64_t first_step, uint64_t* generation = nullptr);
  uint64_t generation() const;
  // Closed steps the controller refused (a bug: see Decide).
  uint64_t decision_failures() const;
  // Requests a snapshot now (shutdown).
  void SnapshotNow();
  uint32_t connected_sessions() const;

  // ---- lifecycle (job_lifecycle.cc; deploy/README.md, "Job lifecycle")
  // Ends the job for good (deletion, idle expiry): every attached stream is
  // closed with `why`, every later Register, Attach, report and ack fails
  // with it, and the listener is never called again, so nothing recreates
  // the job's files or metric series afterwards. Returns the number of
  // streams it closed.
  uint32_t Close(const Status& why);
  // How long the job has been idle at `now`: no stream attached and no
  // report since (zero while a stream is attached). A restored job counts
  // from its snapshot's last activity.
  Clock::duration IdleFor(Clock::time_point now) const;

 private:
  // kImport: an operator's import (live while ranks train); kResume: a
  // trainer's (ImportState with resume: at once).
  enum class GenerationCause { kImport, kResume, kRestore, kIncarnation, kRewind };

  Job(std::string job_id, uint32_t world_size, std::string token, Controller controller,
      JobOptions options, JobListener* listener);

  void DrainReady(Clock::time_point now) GNMR_REQUIRES(mu_);  // closes every ready step
  // ---- Register's steps, in its order (job_register.cc)
  Status CheckRegisterRequest(const v1::RegisterRequest& req) const GNMR_REQUIRES(mu_);
  // The layout's and the controller's checks; *new_units: views into specs.
  Status CheckRankUnits(uint32_t rank, const std::vector<RankUnitSpec>& specs,
                        std::vector<std::string_view>* new_units, JobTopology::Growth* growth) const
      GNMR_REQUIRES(mu_);
  Status ReserveGrowth(const JobTopology::Growth& growth, size_t rank_units) GNMR_REQUIRES(mu_);
  Status AddRankUnits(uint32_t rank, const std::vector<RankUnitSpec>& specs,
                      std::vector<uint32_t>* unit_ids) GNMR_REQUIRES(mu_);
  // Its new session; the rank's steps, checks and role start over.
  RankSession& OpenRankSession(const v1::RegisterRequest& req) GNMR_REQUIRES(mu_);
  // A new incarnation's generation, or a snapshot of a changed layout.
  void JoinGeneration(const v1::RegisterRequest& req, RankSession& rs, bool layout_changed)
      GNMR_REQUIRES(mu_);
  // ---- ranks without decisions (job_ranks.cc)
  static constexpr int64_t kWithoutDecisionsSteps = 20;
  static constexpr uint32_t kWithoutDecisionsCheck = 4;
  // After a closed step: counts the ranks without decisions every
  // kWithoutDecisionsCheck steps, with an event for each change.
  void CheckRanksWithoutDecisions(int64_t closed_step) GNMR_REQUIRES(mu_);
  void Decide(const StepAggregator::ClosedStep& step, double aggregation_seconds)
      GNMR_REQUIRES(mu_);
  // The "cannot happen" branch of Decide: logged, counted, an event.
  void DecisionFailed(int64_t step, const Status& why) GNMR_REQUIRES(mu_);

  // ---- generations (job_generation.cc)
  // Starts the next generation for `cause` (see "Generations" above):
  // resets the steps, announces it to every attached stream, rebuilds the
  // last decision (import, restore), writes an event and requests a
  // snapshot. `rewind_to`: kRewind's first accepted step. Call before the
  // controller changes steps (Rewind does it here; ImportState replaces
  // the controller first, which LiveSwitchPoint does not read).
  void StartGeneration(GenerationCause cause, const std::string& detail, int64_t rewind_to = 0)
      GNMR_REQUIRES(mu_);
  // For an import or a rewind that starts the next generation with the
  // aggregator's first accepted step after `floor`: the live switch, or
  // nullopt when the switch is at once (no decision published in this
  // generation, no stream attached, or a new incarnation waits).
  std::optional<LiveSwitch> LiveSwitchPoint(int64_t floor) const GNMR_REQUIRES(mu_);
  // The step most attached ranks have reached (the lower median of each
  // one's newest acked or reported step), or nullopt if none did: how far
  // the trainers are, which one rank alone cannot move.
  std::optional<int64_t> TrainersFrontier() const GNMR_REQUIRES(mu_);
  // Records `rank`'s client instance; true if it starts a new generation
  // now. A new instance that must wait is marked incarnation_pending.
  bool NewIncarnation(uint32_t rank, RankSession& rs, uint64_t instance) GNMR_REQUIRES(mu_);
  // Whether a rank other than `except` of the current generation's
  // timeline (not a pending incarnation) was heard from lately, or the job
  // was restored lately (see job_generation.cc).
  bool OldTimelineAlive(uint32_t except) const GNMR_REQUIRES(mu_);
  // Starts the waiting incarnation once no rank of the old timeline is
  // attached and heard from (after a detach, and at every tick).
  void MaybeStartPendingIncarnation() GNMR_REQUIRES(mu_);
  // Whether `step` is at most max_step_jump past the last closed step (as
  // a report's step must be): how far an ack or a held_through may reach.
  bool WithinStepJump(int64_t step) const GNMR_REQUIRES(mu_);
  // How long a rank of the old timeline counts as alive after it was last
  // heard from: max(incarnation_silence, 5 deadlines).
  Clock::duration OldTimelineSilence() const;
  // While restore_hold_ is set: ends it once it is over at `now`, or at
  // once with `forced` (another generation starts), and decides from its
  // FirstStep on (job_generation.cc).
  void MaybeEndRestoreHold(Clock::time_point now, const char* forced = nullptr) GNMR_REQUIRES(mu_);
  // After the controller was replaced: its last decision, rebuilt from its
  // state (the same digest as the original), published.
  void RebuildLastDecision() GNMR_REQUIRES(mu_);
  // Steps a rank may plan after the trainers' frontier before the switch
  // reaches it (its messages in flight): a live switch takes effect this
  // many steps past how far most ranks are, at the latest.
  static constexpr int64_t kSwitchMargin = 8;
  // ---- events (job_events.cc)
  void EmitEvent(v1::EventKind kind, int64_t step, std::string detail) GNMR_REQUIRES(mu_);
  void EmitEvents(const Decision& d) GNMR_REQUIRES(mu_);
  // ---- reporter election (job_reporters.cc)
  // After the config's `report` may have changed: the election's mode and
  // what the aggregator waits for.
  void SyncReportMode() GNMR_REQUIRES(mu_);
  // Tells each rank in `changes` its new role (if its stream is attached).
  void ApplyRoleChanges(const ReporterElection::Changes& changes) GNMR_REQUIRES(mu_);
  // The ReporterRole `rank` should hold now.
  std::shared_ptr<const WireMessage> RoleMessage(bool standby) const GNMR_REQUIRES(mu_);
  // The oldest open step passed its deadline without some reporters: each
  // is passed over, and if another replica takes over, the step gets one
  // more deadline.
  void HandleOverdue(Clock::time_point now) GNMR_REQUIRES(mu_);
  // With `report: one_per_shard`: a rank acked (planned) a step, so the
  // trainers have reached it even if its reporter sent nothing: the step
  // opens and its deadline runs (an attached but silent reporter is passed
  // over like a late one).
  void AnnounceStep(const v1::Ack& ack) GNMR_REQUIRES(mu_);
  // The replica check (replica_check.h): a reporter's report, a standby's
  // note; a mismatch makes every rank report (the config's `report: all`).
  void CheckReport(uint32_t rank, const v1::StepStats& stats) GNMR_REQUIRES(mu_);
  void CheckNote(uint32_t rank, const v1::StandbyNote& note) GNMR_REQUIRES(mu_);
  // Counts a comparison, and falls back on a mismatch.
  void SettleCheck(bool compared, const std::optional<ReplicaCheck::Mismatch>& m)
      GNMR_REQUIRES(mu_);
  void FallBackToAllReports(const ReplicaCheck::Mismatch& m) GNMR_REQUIRES(mu_);
  // SetConfig after its checks (holds mu_): the controller's config, the
  // roles, an event, a snapshot and the view.
  void ApplyConfigLocked(const ControllerConfig& config) GNMR_REQUIRES(mu_);
  // ---- resources (job_resources.cc; reserved through reservation_)
  JobShape ShapeLocked() const GNMR_REQUIRES(mu_);
  // The shape with the layout as it is and the given config (SetConfig,
  // ImportState: what a new config would make the job hold).
  JobShape ShapeWith(const ControllerConfig& config, uint64_t rule_bytes) const GNMR_REQUIRES(mu_);
  // ---- the view (job_admin.cc, job_view.h)
  v1::JobInfo InfoLocked(Clock::time_point now) const GNMR_REQUIRES(mu_);
  void PublishView(Clock::time_point now) const GNMR_REQUIRES(mu_);
  // ---- snapshots and lifecycle (job_lifecycle.cc)
  void RequestSnapshot() GNMR_REQUIRES(mu_);
  v1::JobMeta MetaLocked() const GNMR_REQUIRES(mu_);
  // last_active_ as Unix seconds (now while a stream is attached).
  double LastActiveUnixLocked() const GNMR_REQUIRES(mu_);

  const std::string id_;
  const uint32_t world_size_;
  const std::string token_;
  const JobOptions options_;
  JobListener* listener_ GNMR_GUARDED_BY(mu_);  // null once closed (and when none was given)

  // Guards listener_ and all below but view_ (job_view.h); the parts are
  // called with it held.
  mutable Mutex mu_;
  JobTopology topology_ GNMR_GUARDED_BY(mu_);
  Controller controller_ GNMR_GUARDED_BY(mu_);
  StepAggregator aggregator_ GNMR_GUARDED_BY(mu_);
  ReporterElection election_ GNMR_GUARDED_BY(mu_);
  ReplicaCheck replica_check_ GNMR_GUARDED_BY(mu_);
  RankSessions sessions_ GNMR_GUARDED_BY(mu_);
  GenerationHistory generations_ GNMR_GUARDED_BY(mu_);
  AckBook acks_ GNMR_GUARDED_BY(mu_);
  JobReservation reservation_ GNMR_GUARDED_BY(mu_);
  mutable JobView view_;  // Info() while mu_ is busy, config(): published under mu_

  // Ranks marked incarnation_pending.
  uint32_t pending_incarnations_ GNMR_GUARDED_BY(mu_) = 0;
  // When Restore made the job (its ranks are on their way back), and what
  // it waits for before it decides (restore_hold.h; none once over).
  std::optional<Clock::time_point> restored_at_ GNMR_GUARDED_BY(mu_);
  std::optional<RestoreHold> restore_hold_ GNMR_GUARDED_BY(mu_);
  // Ranks marked without_decisions; closed steps since the last count.
  uint32_t ranks_without_decisions_ GNMR_GUARDED_BY(mu_) = 0;
  uint32_t steps_since_rank_check_ GNMR_GUARDED_BY(mu_) = 0;
  // The state this generation was imported from, until the controller
  // changes after it (a decision, a config change, a release, a new unit):
  // a repeat of that import before is a no-op. "" otherwise.
  std::string imported_state_ GNMR_GUARDED_BY(mu_);

  // Lifecycle: the last report, attach or detach (idle expiry), and why
  // the job was closed (OK while open).
  Clock::time_point last_active_ GNMR_GUARDED_BY(mu_);
  Status closed_ GNMR_GUARDED_BY(mu_);

  uint64_t steps_since_snapshot_ GNMR_GUARDED_BY(mu_) = 0;
  uint64_t decision_failures_ GNMR_GUARDED_BY(mu_) = 0;
  Clock::time_point last_failure_log_ GNMR_GUARDED_BY(mu_){};
  uint64_t failures_not_logged_ GNMR_GUARDED_BY(mu_) = 0;
};

}  // namespace gnmr
