#include "daemon/job/job.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/secret.h"
#include "controller/state_codec.h"
#include "controller_io/decision_message.h"
#include "daemon/job/unit_set_diff.h"

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
  if (first_generation > 1) {
    job->generation_ = first_generation;
    job->generation_start_ = ToWire(GenerationStartMessage(
        first_generation, job->controller_.next_lag(), job->controller_.sequence() + 1));
  }
  {
    std::lock_guard<std::mutex> lock(job->mu_);
    Status s = job->Reserve(job->ShapeLocked());  // max_o_limit, memory_budget
    if (!s.ok()) return s;
  }
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
      session_ids_(std::random_device{}()),
      generation_start_(ToWire(
          GenerationStartMessage(generation_, controller_.next_lag(), controller_.sequence() + 1))),
      acks_(options.steps_kept_for_acks),
      last_active_(Now()) {
  SyncReportMode();
  PublishView(Now());  // Info() has a view even if the job is busy at once
}

StatusOr<std::unique_ptr<Job>> Job::Restore(const v1::ControllerState& state,
                                            const v1::JobMeta& meta, JobOptions options,
                                            JobListener* listener) {
  StatusOr<Controller> c = ControllerStateCodec::Restore(state);
  if (!c.ok()) return c.status();
  if (meta.world_size() == 0 || static_cast<size_t>(meta.units_size()) != c->num_units()) {
    return DataLoss("job '" + meta.job_id() + "': layout does not match controller state");
  }
  // Checked like the controller state (state_codec.cc): a last closed step
  // at the end of the range would make every report late, for good.
  if (meta.last_closed_step() < -1 || meta.last_closed_step() > kMaxStep ||
      meta.generation() > (uint64_t{1} << 62)) {
    return DataLoss("job '" + meta.job_id() + "': last closed step " +
                    std::to_string(meta.last_closed_step()) + " or generation " +
                    std::to_string(meta.generation()) + " out of range");
  }
  std::unique_ptr<Job> job(new Job(meta.job_id(), meta.world_size(), meta.token(),
                                   std::move(c).value(), options, listener));
  for (int i = 0; i < meta.units_size(); ++i) {
    const v1::UnitLayoutState& u = meta.units(i);
    if (job->controller_.unit(i).name != u.name()) {
      return DataLoss("job '" + meta.job_id() + "': unit " + std::to_string(i) + " is '" +
                      u.name() + "' in the layout but '" + job->controller_.unit(i).name +
                      "' in the controller state");
    }
    Status s = job->topology_.RestoreUnit(u.name(), u.shard_count(),
                                          {u.shard_numel().begin(), u.shard_numel().end()});
    if (!s.ok()) return s;
  }
  if (listener) listener->OnJobStarted(job->id_, job->world_size_, job->controller_);
  // A new generation: decisions sent before the restart (some perhaps after
  // this snapshot) are void. Snapshotted at once, so a second crash cannot
  // start the same number again.
  {
    std::lock_guard<std::mutex> lock(job->mu_);
    // Served even past a cap or the budget (lowered since it was saved):
    // refusing would lose its state. Said loudly.
    const JobShape shape = job->ShapeLocked();
    const Status caps = CheckJobCaps(shape, job->EffectiveCaps());
    job->reserved_bytes_ = JobFootprint(shape, job->EffectiveCaps());
    if (options.budget) options.budget->ForceResize(0, job->reserved_bytes_);
    if (!caps.ok() || (options.budget && options.budget->used() > options.budget->limit())) {
      spdlog::warn(
          "job {}: restored beyond the daemon's limits ({}; memory_budget {} of {} "
          "MiB used); new registrations of it may be refused",
          job->id_, caps.ok() ? "caps ok" : caps.message(),
          options.budget ? options.budget->used() >> 20 : 0,
          options.budget ? options.budget->limit() >> 20 : 0);
    }
    job->generation_ = meta.generation();
    job->restored_at_ = job->Now();
    job->aggregator_.SetLastClosed(meta.last_closed_step());
    job->last_active_ = job->SteadyFromUnix(meta.last_active_unix(), job->last_active_);
    job->StartGeneration(GenerationCause::kRestore,
                         "the daemon restored the job from its snapshot");
    // Decisions made after the snapshot are lost, not unplanned: wait for
    // the ranks to say how far they are (restore_hold.h).
    job->restore_hold_.emplace(job->world_size_, *job->restored_at_ + job->OldTimelineSilence());
    job->aggregator_.Hold();
  }
  return job;
}

bool Job::WithinStepJump(int64_t step) const {
  const int64_t closed = aggregator_.last_closed();
  return closed < 0 || step <= closed || step - closed <= options_.aggregation.max_step_jump;
}

bool Job::TokenMatches(const std::string& token) const { return SameSecret(token, token_); }

StatusOr<RegisterResult> Job::Register(const v1::RegisterRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_.ok()) return closed_;
  if (req.world_size() != world_size_) {
    return Status(StatusCode::kFailedPrecondition,
                  "job '" + id_ + "' has world size " + std::to_string(world_size_) +
                      ", request says " + std::to_string(req.world_size()));
  }
  if (req.says_held_through()) {
    // Bounded as a report's step is: a rank cannot push a restored job's
    // first decided step out of reach (restore_hold.h).
    const int64_t held = req.held_through();
    if (held < -1 || held > kMaxStep || !WithinStepJump(held)) {
      return Status(
          StatusCode::kOutOfRange,
          "held_through " + std::to_string(held) + " is not -1 or a step at most max_step_jump (" +
              std::to_string(options_.aggregation.max_step_jump) +
              ") past the job's last closed step " + std::to_string(aggregator_.last_closed()));
    }
  }
  std::vector<RankUnitSpec> specs;
  specs.reserve(req.units_size());
  for (const v1::UnitSpec& u : req.units()) {
    specs.push_back({u.name(), u.numel(), u.shard_index(), u.shard_count()});
  }
  // Validate everything before changing anything: an error changes nothing,
  // so the layout and the controller never disagree (their unit ids must
  // match: a report names units by id).
  Status s = topology_.ValidateSpecs(specs);
  if (!s.ok()) return s;
  if (topology_.HasRank(req.rank())) {
    const std::vector<RankUnitSpec> before = topology_.SpecsOfRank(req.rank());
    const std::string diff = DescribeUnitSetChange(before, specs);
    if (!diff.empty()) {
      return Status(StatusCode::kFailedPrecondition,
                    "job '" + id_ + "' rank " + std::to_string(req.rank()) + " registered " +
                        std::to_string(before.size()) +
                        " units before; this registration differs: " + diff +
                        ". A different model needs a new job id");
    }
  }
  std::vector<std::string_view> new_units;  // views into specs
  JobTopology::Growth growth;
  s = topology_.CheckRank(specs, &new_units, req.rank(), &growth);
  if (!s.ok()) return s;
  s = controller_.CheckNewUnits(new_units);
  if (!s.ok() || topology_.num_units() != controller_.num_units()) {
    // Cannot happen while both change together; refuse rather than diverge.
    spdlog::error("job {}: layout ({} units) and controller ({} units) disagree: {}", id_,
                  topology_.num_units(), controller_.num_units(), s.ToString());
    return Internal("job '" + id_ + "': unit layout and controller disagree (a daemon bug)");
  }
  JobShape next = ShapeLocked();
  next.units += growth.units;
  next.name_bytes += growth.name_bytes;
  next.slots += growth.slots;
  next.rank_units =
      static_cast<uint64_t>(static_cast<int64_t>(next.rank_units) + growth.rank_units);
  // Whether the rank will share a replica's layout is known only once it
  // is built: reserve as if not, and settle below.
  next.layout_entries += specs.size();
  next.reported_rank_units += specs.size();
  next.ranks += growth.ranks;
  s = Reserve(next);  // the caps and the memory budget; the last check
  if (!s.ok()) return s;

  RegisterResult result;
  std::vector<std::string> created;
  s = topology_.RegisterRank(req.rank(), specs, &result.unit_ids, &created);
  if (!s.ok()) return s;  // validated above: cannot fail
  for (const std::string& name : created) {
    StatusOr<uint32_t> id = controller_.AddUnit(name);  // checked above: cannot fail
    if (!id.ok()) spdlog::error("job {}: unit '{}': {}", id_, name, id.status().ToString());
  }
  if (!created.empty()) imported_state_.clear();

  RankSession& rs = sessions_[req.rank()];
  if (rs.sink)
    rs.sink->Close(Status(StatusCode::kAborted, "replaced by a new session of this rank"));
  DropSink(rs);
  do {
    rs.session_id = session_ids_();
  } while (rs.session_id == 0);
  rs.client_version = req.client_version();
  rs.last_acked_step = -1;
  rs.last_decided_ack = -1;  // decisions are watched for from now on
  rs.watched_from = aggregator_.last_closed();
  rs.last_seen = Now();
  last_active_ = rs.last_seen;
  rs.seen = true;
  rs.stream_ended = false;
  aggregator_.ResetRank(req.rank());
  // It may send steps again, with other numbers than before (a trainer
  // back at a checkpoint): what the check kept of those steps is void.
  replica_check_.Forget();
  {
    ReporterElection::Changes changes;
    election_.OnRegistered(req.rank(), req.can_stand_by(), &changes);
    ApplyRoleChanges(changes);  // not to this rank: it is not attached
  }
  const bool new_generation = NewIncarnation(req.rank(), rs, req.instance());
  if (req.instance() != 0) rs.instance = req.instance();
  if (new_generation) {
    StartGeneration(GenerationCause::kIncarnation,
                    "rank " + std::to_string(req.rank()) + " registered as a new incarnation");
  } else if (!new_units.empty()) {
    RequestSnapshot();  // the layout changed
  }
  if (req.instance() != 0) rs.instance_generation = generation_;
  // The exact shape is at most what was reserved: shrinking cannot fail.
  s = Reserve(ShapeLocked());
  if (!s.ok()) spdlog::error("job {}: settling its reservation: {}", id_, s.ToString());

  if (restore_hold_) {
    restore_hold_->Registered(req.rank(), req.says_held_through()
                                              ? std::optional<int64_t>(req.held_through())
                                              : std::nullopt);
    MaybeEndRestoreHold(Now());
  }
  result.session_id = rs.session_id;
  result.config = controller_.config();
  result.config_version = controller_.config_version();
  result.last_step = controller_.last_step().value_or(-1);
  result.generation = generation_;
  if (listener_) listener_->OnSessions(id_, ConnectedLocked());
  PublishViewSoon(Now());  // ranks and units changed
  return result;
}

Status Job::CheckSession(uint32_t rank, uint64_t session_id, RankSession** session) {
  RankSession* rs = sessions_.Find(rank);
  if (rs == nullptr) {
    return Status(StatusCode::kFailedPrecondition,
                  "rank " + std::to_string(rank) + " of job '" + id_ + "' is not registered");
  }
  if (rs->session_id != session_id) {
    return Status(StatusCode::kFailedPrecondition, "session is not the current one of rank " +
                                                       std::to_string(rank) +
                                                       " (it registered again); register anew");
  }
  *session = rs;
  return Status::Ok();
}

Status Job::Attach(uint32_t rank, uint64_t session_id, std::shared_ptr<DecisionSink> sink) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_.ok()) return closed_;
  RankSession* session = nullptr;
  Status s = CheckSession(rank, session_id, &session);
  if (!s.ok()) return s;
  RankSession& rs = *session;
  if (rs.sink) rs.sink->Close(Status(StatusCode::kAborted, "replaced by a new stream"));
  DropSink(rs);
  {
    ReporterElection::Changes changes;
    election_.SetLive(rank, true, &changes);
    ApplyRoleChanges(changes);
  }
  SetSink(rs, std::move(sink));
  rs.last_seen = Now();
  last_active_ = rs.last_seen;
  rs.stream_ended = false;
  // The generation, then its recent decisions in order: a rank attaching
  // late finds the decision that covers each recent step. Retired
  // generations first: they still plan the steps before their successor's
  // first (a live switch, job_generation.cc).
  for (const RetiredGeneration& r : retired_) {
    rs.sink->SendDecision(r.start);
    for (const auto& msg : r.decisions) rs.sink->SendDecision(msg);
  }
  rs.sink->SendDecision(generation_start_);
  for (const auto& msg : history_) rs.sink->SendDecision(msg);
  if (election_.can_stand_by(rank)) rs.sink->SendDecision(RoleMessage(election_.standby(rank)));
  rs.sink->Flush();
  if (listener_) listener_->OnSessions(id_, ConnectedLocked());
  return Status::Ok();
}

void Job::Detach(uint32_t rank, uint64_t session_id, const DecisionSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  RankSession* rs = sessions_.Find(rank);
  if (rs == nullptr || rs->session_id != session_id || rs->sink.get() != sink) return;
  DropSink(*rs);
  rs->stream_ended = true;
  last_active_ = Now();
  ReporterElection::Changes changes;
  election_.SetLive(rank, false, &changes);  // a reporter is replaced at once
  ApplyRoleChanges(changes);
  if (listener_) listener_->OnSessions(id_, ConnectedLocked());
  MaybeStartPendingIncarnation();
}

void Job::SetSink(RankSession& rs, std::shared_ptr<DecisionSink> sink) {
  DropSink(rs);
  if (sink) ++connected_;
  rs.sink = std::move(sink);
  attached_stale_ = true;
}

void Job::DropSink(RankSession& rs) {
  if (rs.sink) --connected_;
  rs.sink.reset();
  attached_stale_ = true;
}

uint32_t Job::connected_sessions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ConnectedLocked();
}

Status Job::OnStats(uint32_t rank, uint64_t session_id, const v1::StepStats& stats, size_t bytes,
                    Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_.ok()) return closed_;
  RankSession* session = nullptr;
  Status s = CheckSession(rank, session_id, &session);
  if (!s.ok()) return s;
  StepAggregator::Outcome outcome;
  s = aggregator_.Add(rank, stats, now, &outcome);
  if (!s.ok()) return s;
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
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_.ok()) return closed_;
  RankSession* session = nullptr;
  Status s = CheckSession(rank, session_id, &session);
  if (!s.ok()) return s;
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
  const uint64_t oldest = retired_.empty() ? generation_ : retired_.front().generation;
  if (ack.generation() != 0 && ack.generation() < oldest) return Status::Ok();
  if (ack.generation() == 0 || ack.generation() == generation_) AnnounceStep(ack);
  if (ack.has_decision()) rs.last_decided_ack = std::max(rs.last_decided_ack, ack.step());
  AckMismatch m;
  bool mismatch = acks_.Add(rank, ack, &m);
  if (!mismatch && ack.has_decision() && ack.generation() >= oldest) {
    for (const SentDigest& sent : sent_digests_) {
      if (sent.generation == ack.generation() && sent.sequence == ack.sequence()) {
        if (sent.digest != ack.digest() && acks_.MarkMismatched(ack.step())) {
          mismatch = true;
          m.step = ack.step();
          m.other = AckRecord::From(rank, ack);
          m.against_sent = true;
          m.sent_digest = sent.digest;
        }
        break;
      }
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
  std::lock_guard<std::mutex> lock(mu_);
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
  MaybePublishView();
}

void Job::Decide(const StepAggregator::ClosedStep& step, double aggregation_seconds) {
  Decision d;
  Status s = controller_.Observe(step.step, step.samples, &d);
  if (!s.ok()) {  // cannot happen: the aggregator validated the input
    DecisionFailed(step.step, s);
    return;
  }
  const Clock::time_point decided = Now();
  Publish(DecisionMessage(d, generation_));
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
  while (!retired_.empty() &&
         step.step >= retired_.front().until_step + static_cast<int64_t>(kRetiredAfterSteps)) {
    retired_.pop_front();
  }
  const bool set_changed = !d.admitted.empty() || !d.released.empty();
  if (set_changed || ++steps_since_snapshot_ >= options_.snapshot_every_steps) {
    RequestSnapshot();
  }
}

v1::JobMeta Job::MetaLocked() const {
  v1::JobMeta meta;
  meta.set_job_id(id_);
  meta.set_world_size(world_size_);
  meta.set_token(token_);
  for (const UnitLayout& u : topology_.units()) {
    v1::UnitLayoutState* l = meta.add_units();
    l->set_name(u.name);
    l->set_shard_count(u.shard_count);
    for (uint64_t n : u.shard_numel) l->add_shard_numel(n);
  }
  meta.set_last_closed_step(aggregator_.last_closed());
  meta.set_generation(generation_);
  meta.set_last_active_unix(LastActiveUnixLocked());
  return meta;
}

void Job::RequestSnapshot() {
  steps_since_snapshot_ = 0;
  if (!listener_) return;
  v1::ControllerState state;
  ControllerStateCodec::Save(controller_, &state);
  listener_->OnSnapshot(id_, std::move(state), MetaLocked());
}

void Job::SnapshotNow() {
  std::lock_guard<std::mutex> lock(mu_);
  RequestSnapshot();
}

}  // namespace gnmr
