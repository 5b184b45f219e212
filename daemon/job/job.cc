#include "daemon/job/job.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/secret.h"
#include "controller/publish/decision_message.h"

namespace gnmr {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

StatusOr<std::unique_ptr<Job>> Job::Create(std::string job_id, uint32_t world_size,
                                           std::string token, const ControllerConfig& config,
                                           JobOptions options, JobListener* listener,
                                           uint64_t first_generation) {
  StatusOr<Controller> c = Controller::Create(config);
  if (!c.ok()) return c.status();
  std::unique_ptr<Job> job(new Job(std::move(job_id), world_size, std::move(token),
                                   std::move(c).value(), options, listener));
  // Nobody else can reach the job yet: the lock is uncontended, and held
  // so that the analysis sees the job's state read under it.
  MutexLock lock(job->mu_);
  if (first_generation > 1) {
    job->generations_.set_generation(first_generation);
    job->generations_.set_start(ToWire(GenerationStartMessage(
        first_generation, job->controller_.next_lag(), job->controller_.sequence() + 1)));
  }
  GNMR_RETURN_IF_ERROR(
      job->reservation_.Reserve(job->ShapeLocked()));  // max_o_limit, memory_budget
  if (listener) listener->OnJobStarted(job->id_, world_size, job->controller_);
  return job;
}

Job::Job(std::string job_id, uint32_t world_size, std::string token, Controller controller,
         JobOptions options, JobListener* listener)
    : id_(std::move(job_id)),
      world_size_(world_size),
      token_(std::move(token)),
      options_(options),
      listener_(listener),
      topology_(JobTopology::Limits{static_cast<uint32_t>(options.max_units), 4096}),
      controller_(std::move(controller)),
      aggregator_(&topology_, options.aggregation),
      election_(&topology_),
      sessions_(options_.fan_out.get()),
      generations_(
          {options.decisions_kept, options.decision_history_bytes, options.steps_kept_for_acks},
          ToWire(GenerationStartMessage(1, controller_.next_lag(), controller_.sequence() + 1))),
      acks_(options.steps_kept_for_acks),
      reservation_(id_, options_),
      last_active_(Now()) {
  SyncReportMode();
  PublishView(Now());  // Info() has a view even if the job is busy at once
}

bool Job::WithinStepJump(int64_t step) const {
  const int64_t closed = aggregator_.last_closed();
  return closed < 0 || step <= closed || step - closed <= options_.aggregation.max_step_jump;
}

bool Job::TokenMatches(const std::string& token) const { return SameSecret(token, token_); }

Status Job::Attach(uint32_t rank, uint64_t session_id, std::shared_ptr<DecisionSink> sink) {
  MutexLock lock(mu_);
  if (!closed_.ok()) return closed_;
  RankSession* session = nullptr;
  GNMR_RETURN_IF_ERROR(sessions_.Check(id_, rank, session_id, &session));
  RankSession& rs = *session;
  sessions_.CloseSink(rs, Status(StatusCode::kAborted, "replaced by a new stream"));
  {
    ReporterElection::Changes changes;
    election_.SetLive(rank, true, &changes);
    ApplyRoleChanges(changes);
  }
  sessions_.SetSink(rs, std::move(sink));
  rs.last_seen = Now();
  last_active_ = rs.last_seen;
  rs.stream_ended = false;
  // The generation, then its recent decisions in order: a rank attaching
  // late finds the decision that covers each recent step. Retired
  // generations first: they still plan the steps before their successor's
  // first (a live switch, job_generation.cc).
  generations_.ReplayTo(*rs.sink);
  if (election_.can_stand_by(rank)) rs.sink->SendDecision(RoleMessage(election_.standby(rank)));
  rs.sink->Flush();
  if (listener_) listener_->OnSessions(id_, sessions_.connected());
  return Status::Ok();
}

void Job::Detach(uint32_t rank, uint64_t session_id, const DecisionSink* sink) {
  MutexLock lock(mu_);
  RankSession* rs = sessions_.Find(rank);
  if (rs == nullptr || rs->session_id != session_id || rs->sink.get() != sink) return;
  sessions_.DropSink(*rs);
  rs->stream_ended = true;
  last_active_ = Now();
  ReporterElection::Changes changes;
  election_.SetLive(rank, false, &changes);  // a reporter is replaced at once
  ApplyRoleChanges(changes);
  if (listener_) listener_->OnSessions(id_, sessions_.connected());
  MaybeStartPendingIncarnation();
}

uint32_t Job::connected_sessions() const {
  MutexLock lock(mu_);
  return sessions_.connected();
}

Status Job::OnStats(uint32_t rank, uint64_t session_id, const v1::StepStats& stats, size_t bytes,
                    Clock::time_point now) {
  MutexLock lock(mu_);
  if (!closed_.ok()) return closed_;
  RankSession* session = nullptr;
  GNMR_RETURN_IF_ERROR(sessions_.Check(id_, rank, session_id, &session));
  StepAggregator::Outcome outcome;
  GNMR_RETURN_IF_ERROR(aggregator_.Add(rank, stats, now, &outcome));
  if (restore_hold_) restore_hold_->Heard(rank, stats.step());
  RankSession& rs = *session;
  rs.last_seen = now;
  last_active_ = now;
  if (listener_) {
    listener_->OnReport(id_, rank, bytes, stats.overhead());
    if (outcome == StepAggregator::Outcome::kLate) listener_->OnLateReport(id_, rank);
  }
  CheckReport(rank, stats);
  DrainReady(now);
  return Status::Ok();
}

Status Job::OnAck(uint32_t rank, uint64_t session_id, const v1::Ack& ack) {
  MutexLock lock(mu_);
  if (!closed_.ok()) return closed_;
  RankSession* session = nullptr;
  GNMR_RETURN_IF_ERROR(sessions_.Check(id_, rank, session_id, &session));
  RankSession& rs = *session;
  rs.last_seen = Now();
  if (ack.has_standby()) {  // what a standby held back: its figures, the replica check
    if (listener_ && ack.standby().has_overhead()) {
      listener_->OnStandbyNote(id_, rank, ack.standby().overhead());
    }
    CheckNote(rank, ack.standby());
  }
  // Shown as the rank's last step (gnmrctl jobs, top), so bounded as a
  // report's step is: no further ahead of the last closed step than a
  // report may jump.
  if (WithinStepJump(ack.step())) {
    rs.last_acked_step = std::max(rs.last_acked_step, ack.step());
    if (restore_hold_) {
      restore_hold_->Heard(rank, ack.step());
      MaybeEndRestoreHold(Now());
    }
  }
  // An ack of a void generation is not compared (see "Acks" in job.h);
  // generation 0 is an old client that does not say. Retired generations
  // are not void: they plan the steps before a live switch.
  const uint64_t oldest = generations_.oldest_generation();
  if (ack.generation() != 0 && ack.generation() < oldest) return Status::Ok();
  if (ack.generation() == 0 || ack.generation() == generations_.generation()) AnnounceStep(ack);
  if (ack.has_decision()) rs.last_decided_ack = std::max(rs.last_decided_ack, ack.step());
  AckMismatch m;
  bool mismatch = acks_.Add(rank, ack, &m);
  if (!mismatch && ack.has_decision() && ack.generation() >= oldest) {
    const std::optional<uint64_t> sent = generations_.SentDigest(ack.generation(), ack.sequence());
    if (sent && *sent != ack.digest() && acks_.MarkMismatched(ack.step())) {
      mismatch = true;
      m.step = ack.step();
      m.other = AckRecord::From(rank, ack);
      m.against_sent = true;
      m.sent_digest = *sent;
    }
  }
  if (!mismatch) return Status::Ok();
  const std::string detail = m.Describe();
  spdlog::warn("job {}: ranks applied different plans at {}", id_, detail);
  if (listener_) listener_->OnAckMismatch(id_, m);
  EmitEvent(v1::EVENT_KIND_ACK_MISMATCH, m.step, detail);
  return Status::Ok();
}

void Job::Tick(Clock::time_point now) {
  MutexLock lock(mu_);
  DrainReady(now);
}

void Job::DrainReady(Clock::time_point now) {
  // A new incarnation waits for the old timeline's ranks to go quiet too,
  // not only for their streams to end (job_generation.cc).
  MaybeStartPendingIncarnation();
  MaybeEndRestoreHold(now);
  HandleOverdue(now);  // none while the aggregator holds
  StepAggregator::ClosedStep closed;
  for (;;) {
    const Clock::time_point t0 = Now();
    if (!aggregator_.PopReady(now, &closed)) break;
    Decide(closed, Seconds(Now() - t0));
  }
  // After an operation: the view, if an Info() found the job busy, one is
  // due, or a watched one is a second old (job_view.h).
  const Clock::time_point view_now = Now();
  if (view_.ShouldPublish(view_now, kViewWatched)) PublishView(view_now);
}

void Job::Decide(const StepAggregator::ClosedStep& step, double aggregation_seconds) {
  Decision d;
  Status s = controller_.Observe(step.step, step.samples, &d);
  if (!s.ok()) {  // cannot happen: the aggregator validated the input
    DecisionFailed(step.step, s);
    return;
  }
  const Clock::time_point decided = Now();
  sessions_.Broadcast(generations_.Record(DecisionMessage(d, generations_.generation())));
  imported_state_.clear();  // a repeated import would now replace the state

  const Clock::time_point done = Now();
  StepTiming timing;
  timing.aggregation_seconds = aggregation_seconds;
  timing.broadcast_seconds = Seconds(done - decided);
  // Last report in -> decision queued to every rank. For a step closed by
  // its deadline this includes the wait for the missing ranks.
  timing.decision_seconds = Seconds(done - step.last_report);
  if (listener_) listener_->OnDecision(id_, step, d, controller_, timing);
  EmitEvents(d);
  CheckRanksWithoutDecisions(step.step);
  // A retired generation plans steps before its successor's first; once
  // the job is well past that, no rank asks for it again.
  generations_.DropRetired(step.step);
  const bool set_changed = !d.admitted.empty() || !d.released.empty();
  if (set_changed || ++steps_since_snapshot_ >= options_.snapshot_every_steps) {
    RequestSnapshot();
  }
}

}  // namespace gnmr
