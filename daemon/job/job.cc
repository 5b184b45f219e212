#include "daemon/job/job.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "common/secret.h"
#include "common/wall_clock.h"
#include "daemon/controller/state_codec.h"

namespace gnmr {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

void FillEntry(const RecoveryEntry& e, v1::RecoveryEntry* out) {
  out->set_unit_id(e.unit_id);
  out->set_action(static_cast<v1::Action>(e.action));
  out->set_entry(static_cast<v1::EntryTreatment>(e.entry));
  out->set_since(e.since);
  out->set_until(e.until);
  out->set_clip_min_scale(e.clip_min_scale);
  out->set_ref_norm(e.ref_norm);
}

// The wire form of a decision, shared (immutable) by every rank's queue.
std::shared_ptr<const v1::ServerMessage> DecisionMessage(const Decision& d) {
  auto msg = std::make_shared<v1::ServerMessage>();
  v1::Decision* pd = msg->mutable_decision();
  pd->set_observed_step(d.observed_step);
  pd->set_apply_step(d.apply_step);
  pd->set_sequence(d.sequence);
  for (const RecoveryEntry& e : d.recovery) FillEntry(e, pd->add_recovery());
  for (const Admission& a : d.admitted) pd->add_admitted(a.unit_id);
  for (uint32_t u : d.released) pd->add_released(u);
  pd->set_global_skip(d.global_skip);
  pd->set_digest(d.digest);
  pd->set_config_version(d.config_version);
  return msg;
}

}  // namespace

StatusOr<std::unique_ptr<Job>> Job::Create(std::string job_id, uint32_t world_size,
                                           std::string token, const ControllerConfig& config,
                                           JobOptions options, JobListener* listener) {
  StatusOr<Controller> c = Controller::Create(config);
  if (!c.ok()) return c.status();
  std::unique_ptr<Job> job(new Job(std::move(job_id), world_size, std::move(token),
                                   std::move(c).value(), options, listener));
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
      session_ids_(std::random_device{}()) {}

StatusOr<std::unique_ptr<Job>> Job::Restore(const v1::ControllerState& state,
                                            const v1::JobMeta& meta, JobOptions options,
                                            JobListener* listener) {
  StatusOr<Controller> c = ControllerStateCodec::Restore(state);
  if (!c.ok()) return c.status();
  if (meta.world_size() == 0 || static_cast<size_t>(meta.units_size()) != c->num_units()) {
    return DataLoss("job '" + meta.job_id() + "': layout does not match controller state");
  }
  std::unique_ptr<Job> job(new Job(meta.job_id(), meta.world_size(), meta.token(),
                                   std::move(c).value(), options, listener));
  for (int i = 0; i < meta.units_size(); ++i) {
    const v1::UnitLayoutState& u = meta.units(i);
    if (job->controller_.unit(i).name != u.name()) {
      return DataLoss("job '" + meta.job_id() + "': unit " + std::to_string(i) +
                      " is '" + u.name() + "' in the layout but '" +
                      job->controller_.unit(i).name + "' in the controller state");
    }
    Status s = job->topology_.RestoreUnit(
        u.name(), u.shard_count(), {u.shard_numel().begin(), u.shard_numel().end()});
    if (!s.ok()) return s;
  }
  job->aggregator_.SetLastClosed(std::max<int64_t>(meta.last_closed_step(),
                                                   job->controller_.last_step().value_or(-1)));
  job->RebuildLastDecision();
  if (listener) listener->OnJobStarted(job->id_, job->world_size_, job->controller_);
  return job;
}

bool Job::TokenMatches(const std::string& token) const { return SameSecret(token, token_); }

StatusOr<RegisterResult> Job::Register(const v1::RegisterRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  if (req.world_size() != world_size_) {
    return Status(StatusCode::kFailedPrecondition,
                  "job '" + id_ + "' has world size " + std::to_string(world_size_) +
                      ", request says " + std::to_string(req.world_size()));
  }
  std::vector<RankUnitSpec> specs;
  specs.reserve(req.units_size());
  for (const v1::UnitSpec& u : req.units()) {
    specs.push_back({u.name(), u.numel(), u.shard_index(), u.shard_count()});
  }
  RegisterResult result;
  std::vector<std::string> new_units;
  // Validate against the controller's capacity before touching anything.
  Status s = topology_.RegisterRank(req.rank(), specs, &result.unit_ids, &new_units);
  if (!s.ok()) return s;
  for (const std::string& name : new_units) {
    StatusOr<uint32_t> id = controller_.AddUnit(name);
    if (!id.ok()) return Internal("controller rejected unit '" + name + "': " + id.status().message());
  }

  RankSession& rs = sessions_[req.rank()];
  if (rs.sink) rs.sink->Close(Status(StatusCode::kAborted, "replaced by a new session of this rank"));
  rs.sink.reset();
  do {
    rs.session_id = session_ids_();
  } while (rs.session_id == 0);
  rs.client_version = req.client_version();
  rs.last_seen = Clock::now();
  rs.seen = true;
  aggregator_.ResetRank(req.rank());
  if (!new_units.empty()) RequestSnapshot();  // the layout changed

  result.session_id = rs.session_id;
  result.config = controller_.config();
  result.config_version = controller_.config_version();
  result.last_step = controller_.last_step().value_or(-1);
  if (listener_) listener_->OnSessions(id_, ConnectedLocked());
  return result;
}

Status Job::CheckSession(uint32_t rank, uint64_t session_id) const {
  auto it = sessions_.find(rank);
  if (it == sessions_.end()) {
    return Status(StatusCode::kFailedPrecondition,
                  "rank " + std::to_string(rank) + " of job '" + id_ + "' is not registered");
  }
  if (it->second.session_id != session_id) {
    return Status(StatusCode::kFailedPrecondition,
                  "session is not the current one of rank " + std::to_string(rank) +
                      " (it registered again); register anew");
  }
  return Status::Ok();
}

Status Job::Attach(uint32_t rank, uint64_t session_id, std::shared_ptr<DecisionSink> sink) {
  std::lock_guard<std::mutex> lock(mu_);
  Status s = CheckSession(rank, session_id);
  if (!s.ok()) return s;
  RankSession& rs = sessions_[rank];
  if (rs.sink) rs.sink->Close(Status(StatusCode::kAborted, "replaced by a new stream"));
  rs.sink = std::move(sink);
  rs.last_seen = Clock::now();
  if (last_decision_) rs.sink->SendDecision(last_decision_);
  if (listener_) listener_->OnSessions(id_, ConnectedLocked());
  return Status::Ok();
}

void Job::Detach(uint32_t rank, uint64_t session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(rank);
  if (it == sessions_.end() || it->second.session_id != session_id) return;
  it->second.sink.reset();
  if (listener_) listener_->OnSessions(id_, ConnectedLocked());
}

uint32_t Job::ConnectedLocked() const {
  uint32_t n = 0;
  for (const auto& [rank, rs] : sessions_) n += rs.sink ? 1 : 0;
  return n;
}

uint32_t Job::connected_sessions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ConnectedLocked();
}

Status Job::OnStats(uint32_t rank, uint64_t session_id, const v1::StepStats& stats,
                    size_t bytes, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  Status s = CheckSession(rank, session_id);
  if (!s.ok()) return s;
  StepAggregator::Outcome outcome;
  s = aggregator_.Add(rank, stats, now, &outcome);
  if (!s.ok()) return s;
  RankSession& rs = sessions_[rank];
  rs.last_seen = now;
  if (listener_) {
    listener_->OnReport(id_, rank, bytes, stats.overhead());
    if (outcome == StepAggregator::Outcome::kLate) listener_->OnLateReport(id_, rank);
  }
  DrainReady(now);
  return Status::Ok();
}

Status Job::OnAck(uint32_t rank, uint64_t session_id, const v1::Ack& ack) {
  std::lock_guard<std::mutex> lock(mu_);
  Status s = CheckSession(rank, session_id);
  if (!s.ok()) return s;
  for (const auto& [seq, digest] : sent_digests_) {
    if (seq == ack.sequence()) {
      if (digest != ack.digest() && listener_) listener_->OnAckMismatch(id_, rank);
      return Status::Ok();
    }
  }
  return Status::Ok();  // too old to check: not the rank's fault
}

void Job::Tick(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  DrainReady(now);
}

void Job::DrainReady(Clock::time_point now) {
  StepAggregator::ClosedStep closed;
  for (;;) {
    const Clock::time_point t0 = Clock::now();
    if (!aggregator_.PopReady(now, &closed)) break;
    Decide(closed, Seconds(Clock::now() - t0));
  }
}

// The decision of the controller's last observed step as a rank would have
// received it: the set in force, its apply step and sequence, so a rank that
// attaches after a restart or resumes from a checkpoint knows the plan of its
// next step without waiting for a new decision. global_skip belonged to that
// past step and is not repeated.
void Job::RebuildLastDecision() {
  const std::optional<int64_t> observed = controller_.last_step();
  const std::optional<int64_t> apply = controller_.last_apply();
  if (!observed || !apply || controller_.sequence() == 0) {
    last_decision_.reset();
    return;
  }
  Decision d;
  d.observed_step = *observed;
  d.apply_step = *apply;
  d.sequence = controller_.sequence();
  d.config_version = controller_.config_version();
  d.recovery = controller_.recovery();
  d.digest = DigestOf(d.apply_step, d.recovery, /*global_skip=*/false);
  Publish(DecisionMessage(d));
}

void Job::Publish(std::shared_ptr<const v1::ServerMessage> decision) {
  last_decision_ = std::move(decision);
  for (auto& [rank, rs] : sessions_) {
    if (rs.sink) rs.sink->SendDecision(last_decision_);
  }
}

void Job::Decide(const StepAggregator::ClosedStep& step, double aggregation_seconds) {
  Decision d;
  Status s = controller_.Observe(step.step, step.samples, &d);
  if (!s.ok()) return;  // cannot happen: the aggregator validated the input
  Publish(DecisionMessage(d));
  sent_digests_.emplace_back(d.sequence, d.digest);
  while (sent_digests_.size() > options_.events_kept_for_acks) sent_digests_.pop_front();

  const Clock::time_point done = Clock::now();
  StepTiming timing;
  timing.aggregation_seconds = aggregation_seconds;
  // Last report in -> decision queued to every rank. For a step closed by
  // its deadline this includes the wait for the missing ranks.
  timing.decision_seconds = Seconds(done - step.last_report);
  if (listener_) listener_->OnDecision(id_, step, d, controller_, timing);
  EmitEvents(d);
  const bool set_changed = !d.admitted.empty() || !d.released.empty();
  if (set_changed || ++steps_since_snapshot_ >= options_.snapshot_every_steps) {
    RequestSnapshot();
  }
}

void Job::EmitEvents(const Decision& d) {
  if (!listener_ || (!d.HasChanges())) return;
  std::vector<v1::Event> events;
  const double now = UnixNowSeconds();
  auto base = [&](const char* kind, uint32_t unit) {
    v1::Event e;
    e.set_observed_step(d.observed_step);
    e.set_apply_step(d.apply_step);
    e.set_kind(kind);
    e.set_unit(controller_.unit(unit).name);
    e.set_time_unix(now);
    return e;
  };
  for (const Admission& a : d.admitted) {
    v1::Event e = base("admission", a.unit_id);
    for (const RecoveryEntry& r : d.recovery) {
      if (r.unit_id == a.unit_id) {
        e.set_action(static_cast<v1::Action>(r.action));
        e.set_until(r.until);
      }
    }
    e.set_trigger(static_cast<v1::Trigger>(a.trigger));
    // A non-finite sample is not evaluated: no GNMR or Delta exists for it.
    const bool evaluated = a.trigger != Trigger::kNonFinite;
    e.set_gnmr(evaluated ? a.gnmr : std::nan(""));
    e.set_delta(evaluated ? a.delta : std::nan(""));
    e.set_norm(a.norm);
    e.set_mu(a.mu);
    if (a.nonfinite) e.set_detail("nonfinite=" + std::to_string(a.nonfinite));
    events.push_back(std::move(e));
  }
  for (uint32_t u : d.released) events.push_back(base("release", u));
  for (const Denial& x : d.denied) {
    v1::Event e = base("denial", x.unit_id);
    e.set_trigger(static_cast<v1::Trigger>(x.trigger));
    const UnitState& st = controller_.unit(x.unit_id);
    e.set_gnmr(st.last_gnmr);
    e.set_delta(st.last_delta);
    e.set_norm(st.last_norm);
    e.set_mu(st.mu);
    e.set_detail("max_o reached");
    events.push_back(std::move(e));
  }
  if (d.global_skip) {
    v1::Event e;
    e.set_observed_step(d.observed_step);
    e.set_apply_step(d.apply_step);
    e.set_kind("global_skip");
    e.set_time_unix(now);
    e.set_detail("non-finite gradient observed");
    events.push_back(std::move(e));
  }
  listener_->OnEvents(id_, events);
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
  return meta;
}

void Job::RequestSnapshot() {
  steps_since_snapshot_ = 0;
  if (!listener_) return;
  v1::ControllerState state;
  ControllerStateCodec::Save(controller_, &state);
  listener_->OnSnapshot(id_, state, MetaLocked());
}

void Job::SnapshotNow() {
  std::lock_guard<std::mutex> lock(mu_);
  RequestSnapshot();
}

}  // namespace gnmr
