// A job's life beyond one operation: its snapshot (RequestSnapshot:
// controller state and JobMeta), Restore from one at daemon start, and its
// end: Close (deletion by an operator, idle expiry) and the idle time that
// expiry goes by (deploy/README.md, "Job lifecycle").
//
// Close is the point after which the job has no side effects: it drops the
// listener under the job's lock, so a report or an admin call still in
// flight on another thread (holding its shared_ptr) can neither recreate
// the job's metric series nor write its snapshot or events after the
// registry removed them.
#include <algorithm>
#include <chrono>
#include <utility>

#include <spdlog/spdlog.h>

#include "controller/state_codec.h"
#include "daemon/job/job.h"

namespace gnmr {
namespace {

using Clock = Job::Clock;

// A wall-clock time as a steady-clock one (both of `clock`); `fallback`
// for 0 (unknown).
Clock::time_point SteadyFromUnix(const TimeSource& clock, double unix_seconds,
                                 Clock::time_point fallback) {
  if (!(unix_seconds > 0)) return fallback;  // unknown (an older snapshot), or NaN
  const double ago = clock.UnixSeconds() - unix_seconds;
  if (!(ago > 0)) return fallback;  // the future: a clock that went back
  // Bounded, so a corrupt value cannot overflow the conversion: a year is
  // past any sensible idle expiry.
  const double bounded = std::min(ago, 366.0 * 24 * 3600);
  const auto back =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(bounded));
  return fallback - back;
}

}  // namespace

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
  // Nobody else can reach the job yet: the lock is uncontended, and held
  // so that the analysis sees the job's state read under it.
  MutexLock lock(job->mu_);
  for (int i = 0; i < meta.units_size(); ++i) {
    const v1::UnitLayoutState& u = meta.units(i);
    if (job->controller_.unit(i).name != u.name()) {
      return DataLoss("job '" + meta.job_id() + "': unit " + std::to_string(i) + " is '" +
                      u.name() + "' in the layout but '" + job->controller_.unit(i).name +
                      "' in the controller state");
    }
    GNMR_RETURN_IF_ERROR(job->topology_.RestoreUnit(
        u.name(), u.shard_count(), {u.shard_numel().begin(), u.shard_numel().end()}));
  }
  if (listener) listener->OnJobStarted(job->id_, job->world_size_, job->controller_);
  // Served even past a cap or the budget (lowered since it was saved):
  // refusing would lose its state. Said loudly.
  const Status caps = job->reservation_.ForceReserve(job->ShapeLocked());
  if (!caps.ok() || (options.budget && options.budget->used() > options.budget->limit())) {
    spdlog::warn(
        "job {}: restored beyond the daemon's limits ({}; memory_budget {} of {} "
        "MiB used); new registrations of it may be refused",
        job->id_, caps.ok() ? "caps ok" : caps.message(),
        options.budget ? options.budget->used() >> 20 : 0,
        options.budget ? options.budget->limit() >> 20 : 0);
  }
  // A new generation: decisions sent before the restart (some perhaps after
  // this snapshot) are void. Snapshotted at once, so a second crash cannot
  // start the same number again.
  job->generations_.set_generation(meta.generation());
  job->restored_at_ = job->Now();
  job->aggregator_.SetLastClosed(meta.last_closed_step());
  job->last_active_ =
      SteadyFromUnix(*job->options_.clock, meta.last_active_unix(), job->last_active_);
  job->StartGeneration(GenerationCause::kRestore, "the daemon restored the job from its snapshot");
  // Decisions made after the snapshot are lost, not unplanned: wait for
  // the ranks to say how far they are (restore_hold.h).
  job->restore_hold_.emplace(job->world_size_, *job->restored_at_ + job->OldTimelineSilence());
  job->aggregator_.Hold();
  return job;
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
  meta.set_generation(generations_.generation());
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
  MutexLock lock(mu_);
  RequestSnapshot();
}

uint32_t Job::Close(const Status& why) {
  MutexLock lock(mu_);
  if (!closed_.ok()) return 0;
  closed_ = why.ok() ? Status(StatusCode::kAborted, "job '" + id_ + "' was closed") : why;
  listener_ = nullptr;
  return sessions_.CloseAll(closed_);
}

Job::Clock::duration Job::IdleFor(Clock::time_point now) const {
  MutexLock lock(mu_);
  if (sessions_.connected() > 0 || now <= last_active_) return Clock::duration::zero();
  return now - last_active_;
}

double Job::LastActiveUnixLocked() const {
  const double now_unix = options_.clock->UnixSeconds();
  if (sessions_.connected() > 0) return now_unix;
  const double idle = std::chrono::duration<double>(Now() - last_active_).count();
  return now_unix - std::max(0.0, idle);
}

}  // namespace gnmr
