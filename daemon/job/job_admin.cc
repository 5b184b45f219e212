// The administrative side of Job: views for gnmrctl and operator actions.
#include <algorithm>
#include <cmath>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/glob.h"
#include "controller/state_codec.h"
#include "controller/types/config_codec.h"
#include "daemon/job/job.h"

namespace gnmr {

v1::JobInfo Job::Info(Clock::time_point now) const { return Info(now, Now() + kInfoPatience); }

v1::JobInfo Job::Info(Clock::time_point now, Clock::time_point give_up) const {
  // Most holders of mu_ (a tick, one step's decision) let go within
  // microseconds: wait that long rather than answer with an older view, but
  // never past `give_up` (on the job's clock), so long operations cannot
  // hold up a listing of every job.
  while (!mu_.TryLock()) {
    if (Now() >= give_up) return view_.Busy(now);  // its holder publishes one when done
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  // mu_ is held, taken by TryLock (no MutexLock adopts a held mutex): let
  // go of it on every way out, a throw included.
  v1::JobInfo info;
  try {
    info = InfoLocked(now);
    view_.Answered(info, now);
  } catch (...) {
    mu_.Unlock();
    throw;
  }
  mu_.Unlock();
  return info;
}

void Job::PublishView(Clock::time_point now) const {
  view_.Publish(InfoLocked(now), now, controller_.config(), controller_.config_version());
}

v1::JobInfo Job::InfoLocked(Clock::time_point now) const {
  v1::JobInfo info;
  info.set_job_id(id_);
  info.set_world_size(world_size_);
  info.set_units(static_cast<uint32_t>(controller_.num_units()));
  info.set_last_step(controller_.last_step().value_or(-1));
  info.set_in_recovery(static_cast<uint32_t>(controller_.recovery().size()));
  info.set_max_o(controller_.config().max_o);
  const ControllerStats& st = controller_.stats();
  info.set_admissions(st.admissions());
  info.set_denials(st.denials);
  info.set_denied_clips(st.denied_clips);
  info.set_recovery_fraction(st.recovery_fraction());
  // A rank's last step: the newest it reported or acked (a standby only
  // acks; docs/scale.md).
  // Built once a second while a job runs and under its lock: one pass over
  // the sessions, which are in rank order.
  struct Row {
    uint32_t rank;
    int64_t last;
    const RankSession* rs;
  };
  std::vector<Row> rows;
  rows.reserve(sessions_.size());
  int64_t newest = -1;
  sessions_.ForEach([&](uint32_t rank, const RankSession& rs) {
    rows.push_back({rank, rs.last_acked_step, &rs});
  });
  // The aggregator's part here, not in the lambda: ForEach runs it where
  // the thread-safety analysis does not see mu_ held.
  for (Row& row : rows) {
    row.last = std::max(aggregator_.last_step_of_rank(row.rank), row.last);
    newest = std::max(newest, row.last);
  }
  info.mutable_ranks()->Reserve(static_cast<int>(rows.size()));
  for (const Row& row : rows) {
    const RankSession& rs = *row.rs;
    const int64_t last = row.last;
    v1::RankInfo* r = info.add_ranks();
    r->set_rank(row.rank);
    r->set_connected(rs.sink != nullptr);
    r->set_last_step(last);
    r->set_last_seen_seconds_ago(std::chrono::duration<double>(now - rs.last_seen).count());
    r->set_lag_steps(last < 0 || newest < 0 ? 0 : newest - last);
    r->set_client_version(rs.client_version);
    r->set_steps_without_decision(rs.StepsWithoutDecision(aggregator_.last_closed()));
  }
  info.set_ranks_without_decisions(ranks_without_decisions_);
  return info;
}

UnitPage Job::Units(const UnitQuery& query) const {
  MutexLock lock(mu_);
  const ControllerConfig& cfg = controller_.config();
  const std::vector<RecoveryEntry>& recovery = controller_.recovery();  // unit id order
  auto recovery_entry = [&](uint32_t id) GNMR_REQUIRES(mu_) -> const RecoveryEntry* {
    if (!controller_.InRecovery(id)) return nullptr;
    auto it = std::lower_bound(recovery.begin(), recovery.end(), id,
                               [](const RecoveryEntry& e, uint32_t u) { return e.unit_id < u; });
    return it != recovery.end() && it->unit_id == id ? &*it : nullptr;
  };
  auto state_of = [&](uint32_t id) GNMR_REQUIRES(mu_) {
    if (controller_.InRecovery(id)) return v1::UNIT_STATE_RECOVERY;
    return controller_.unit(id).valid_samples < cfg.warmup ? v1::UNIT_STATE_WARMUP
                                                           : v1::UNIT_STATE_ACTIVE;
  };

  // One pass: the matching units, in id order.
  const GlobPattern pattern(query.pattern.empty() ? "*" : query.pattern);
  std::vector<uint32_t> ids;
  for (uint32_t id = 0; id < controller_.num_units(); ++id) {
    if (query.state != v1::UNIT_STATE_UNSPECIFIED && state_of(id) != query.state) continue;
    if (!query.pattern.empty() && !pattern.Matches(controller_.unit(id).name)) continue;
    ids.push_back(id);
  }
  UnitPage page;
  page.matched = static_cast<uint32_t>(ids.size());
  if (query.top > 0) {
    auto key = [&](uint32_t id) GNMR_REQUIRES(mu_) {
      const double g = controller_.unit(id).last_gnmr;
      return std::isfinite(g) ? g : 0.0;
    };
    const size_t keep = std::min<size_t>(query.top, ids.size());
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(),
                      [&](uint32_t a, uint32_t b) GNMR_REQUIRES(mu_) {
                        if (key(a) != key(b)) return key(a) > key(b);
                        return a < b;
                      });
    ids.resize(keep);
  }

  // The page: from `offset`, up to `limit` units and `max_bytes` bytes.
  uint64_t bytes = 0;
  size_t i = std::min<size_t>(query.offset, ids.size());
  for (; i < ids.size(); ++i) {
    if (query.limit > 0 && page.units.size() >= query.limit) break;
    const uint32_t id = ids[i];
    const UnitState& u = controller_.unit(id);
    v1::UnitInfo info;
    info.set_unit_id(id);
    info.set_name(u.name);
    info.set_norm(u.last_norm);
    info.set_mu(u.mu);
    info.set_gnmr(u.last_gnmr);
    info.set_delta(u.last_delta);
    info.set_last_step(u.last_step);
    info.set_action(ToProto(u.resolved.action));
    info.set_shard_count(topology_.unit(id).shard_count);
    info.set_state(state_of(id));
    info.set_fwd_ratio(u.last_forward);
    info.set_saturation_ratio(u.last_saturation);
    info.set_underflow_ratio(u.last_underflow);
    info.set_bwd_ratio(u.last_backward);
    info.set_trigger(ToProto(u.last_trigger));
    if (const RecoveryEntry* e = recovery_entry(id)) {
      info.set_action(ToProto(e->action));
      info.set_since(e->since);
      info.set_until(e->until);
      info.set_trigger(ToProto(e->reason.trigger));
    }
    // A repeated field's element costs its size, its length prefix (<= 5
    // bytes) and a tag byte.
    const uint64_t cost = info.ByteSizeLong() + 6;
    if (query.max_bytes > 0 && !page.units.empty() && bytes + cost > query.max_bytes) break;
    bytes += cost;
    page.units.push_back(std::move(info));
  }
  page.next_offset = i < ids.size() ? static_cast<uint32_t>(i) : 0;
  return page;
}

ControllerConfig Job::config() const { return view_.config(); }

uint64_t Job::config_version() const { return view_.config_version(); }

Status Job::SetConfig(const ControllerConfig& config) {
  MutexLock lock(mu_);
  GNMR_RETURN_IF_ERROR(config.Validate());
  GNMR_RETURN_IF_ERROR(
      reservation_.Reserve(ShapeWith(config, ActionResolver(config).MemoryBytes())));
  ApplyConfigLocked(config);
  return Status::Ok();
}

void Job::ApplyConfigLocked(const ControllerConfig& config) {
  Status s = controller_.SetConfig(config);  // validated by the caller: cannot fail
  if (!s.ok()) {
    spdlog::error("job {}: a checked config was refused: {}", id_, s.ToString());
    return;
  }
  // Admin calls see the config before any rank is told of its roles: a
  // client that waits for its role and then asks gnmrd must read this config.
  PublishView(Now());
  SyncReportMode();
  imported_state_.clear();  // a repeated import would now change the state
  if (listener_) {
    v1::Event e;
    e.set_observed_step(controller_.last_step().value_or(-1));
    e.set_kind(v1::EVENT_KIND_CONFIG_CHANGE);
    e.set_time_unix(options_.clock->UnixSeconds());
    e.set_detail("config_version=" + std::to_string(controller_.config_version()) +
                 " max_o=" + std::to_string(config.max_o) + " lag=" + std::to_string(config.lag) +
                 " lock_steps=" + std::to_string(config.lock_steps) +
                 " tau=" + std::to_string(config.tau) + " report=" + ReportModeName(config.report));
    listener_->OnEvents(id_, {e});
  }
  if (listener_) listener_->OnControllerChanged(id_, controller_);
  RequestSnapshot();
}

Status Job::ReleaseUnit(const std::string& unit) {
  MutexLock lock(mu_);
  std::optional<uint32_t> id = controller_.FindUnit(unit);
  if (!id) return NotFound("job '" + id_ + "' has no unit '" + unit + "'");
  Status s = controller_.Release(*id);
  if (!s.ok()) return NotFound("unit '" + unit + "' is not in recovery");
  imported_state_.clear();
  if (listener_) {
    v1::Event e;
    e.set_observed_step(controller_.last_step().value_or(-1));
    e.set_kind(v1::EVENT_KIND_ADMIN_RELEASE);
    e.set_unit(unit);
    e.set_time_unix(options_.clock->UnixSeconds());
    listener_->OnEvents(id_, {e});
  }
  if (listener_) listener_->OnControllerChanged(id_, controller_);
  RequestSnapshot();
  return Status::Ok();
}

v1::ControllerState Job::ExportState() const {
  MutexLock lock(mu_);
  v1::ControllerState state;
  ControllerStateCodec::Save(controller_, &state);
  return state;
}

Status Job::ImportState(const v1::ControllerState& state, uint64_t* generation, bool resume) {
  MutexLock lock(mu_);
  std::string bytes = state.SerializeAsString();
  if (!imported_state_.empty() && bytes == imported_state_) {
    if (generation) *generation = generations_.generation();  // a repeat: already in force
    return Status::Ok();
  }
  StatusOr<Controller> c = ControllerStateCodec::Restore(state);
  if (!c.ok()) return Status(StatusCode::kInvalidArgument, c.status().message());
  // The imported state must name the job's units in the job's id order, so
  // the ids the ranks hold stay valid; it may add units after them.
  const size_t n = topology_.num_units();
  if (c->num_units() < n) {
    return Status(StatusCode::kFailedPrecondition, "imported state has " +
                                                       std::to_string(c->num_units()) +
                                                       " units, the job has " + std::to_string(n));
  }
  for (uint32_t id = 0; id < n; ++id) {
    if (c->unit(id).name != topology_.unit(id).name) {
      return Status(StatusCode::kFailedPrecondition,
                    "imported state has unit '" + c->unit(id).name + "' at id " +
                        std::to_string(id) + ", the job has '" + topology_.unit(id).name + "'");
    }
  }
  // The added units go into a copy of the layout: a failure half-way (too
  // many units) must leave the layout as it was, never ahead of the
  // controller (every later step would then fail to decide).
  JobTopology layout = topology_;
  for (uint32_t id = static_cast<uint32_t>(n); id < c->num_units(); ++id) {
    Status s = layout.RestoreUnit(c->unit(id).name, 1, {0});
    if (!s.ok()) {
      const StatusCode code =
          s.code() == StatusCode::kDataLoss ? StatusCode::kInvalidArgument : s.code();
      return Status(code, "imported state cannot be added to job '" + id_ + "': " + s.message());
    }
  }
  JobShape next = ShapeWith(c->config(), c->action_rule_bytes());
  next.units = layout.num_units();
  next.name_bytes = layout.name_bytes();
  next.slots = layout.num_slots();
  GNMR_RETURN_IF_ERROR(reservation_.Reserve(next));  // the caps and the memory budget
  // Nothing below fails.
  topology_ = std::move(layout);
  controller_ = std::move(c).value();
  SyncReportMode();
  if (listener_) {
    v1::Event e;
    e.set_observed_step(controller_.last_step().value_or(-1));
    e.set_kind(v1::EVENT_KIND_IMPORT);
    e.set_time_unix(options_.clock->UnixSeconds());
    e.set_detail("units=" + std::to_string(controller_.num_units()));
    listener_->OnEvents(id_, {e});
  }
  if (listener_) listener_->OnControllerChanged(id_, controller_);
  StartGeneration(resume ? GenerationCause::kResume : GenerationCause::kImport,
                  "controller state imported");
  imported_state_ = std::move(bytes);
  PublishView(Now());  // GetConfig shows the imported config at once
  if (generation) *generation = generations_.generation();
  return Status::Ok();
}

Status Job::Rewind(int64_t first_step, uint64_t* generation) {
  if (first_step < 0 || first_step > kMaxStep) {
    return InvalidArgument("rewind: first step " + std::to_string(first_step) + " is outside [0, " +
                           std::to_string(kMaxStep) + "]");
  }
  MutexLock lock(mu_);
  StartGeneration(GenerationCause::kRewind,
                  first_step == 0 ? "an operator rewound the job: reports of any step are accepted"
                                  : "an operator rewound the job: reports of step " +
                                        std::to_string(first_step) + " and later are accepted",
                  first_step);
  if (listener_) listener_->OnControllerChanged(id_, controller_);
  PublishView(Now());
  if (generation) *generation = generations_.generation();
  return Status::Ok();
}

}  // namespace gnmr
