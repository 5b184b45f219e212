// Job::Register and its steps: the checks, which change nothing, then the
// rank's units, session and generation.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>

#include "daemon/job/job.h"
#include "daemon/job/unit_set_diff.h"

namespace gnmr {
namespace {

std::vector<RankUnitSpec> RankUnitSpecs(const v1::RegisterRequest& req) {
  std::vector<RankUnitSpec> specs;
  specs.reserve(req.units_size());
  for (const v1::UnitSpec& u : req.units()) {
    specs.push_back({u.name(), u.numel(), u.shard_index(), u.shard_count()});
  }
  return specs;
}

}  // namespace

StatusOr<RegisterResult> Job::Register(const v1::RegisterRequest& req) {
  MutexLock lock(mu_);
  if (!closed_.ok()) return closed_;
  GNMR_RETURN_IF_ERROR(CheckRegisterRequest(req));
  const std::vector<RankUnitSpec> specs = RankUnitSpecs(req);
  // Validate everything before changing anything: an error changes nothing,
  // so the layout and the controller never disagree (their unit ids must
  // match: a report names units by id).
  std::vector<std::string_view> new_units;  // views into specs
  JobTopology::Growth growth;
  GNMR_RETURN_IF_ERROR(CheckRankUnits(req.rank(), specs, &new_units, &growth));
  GNMR_RETURN_IF_ERROR(ReserveGrowth(growth, specs.size()));  // the last check

  RegisterResult result;
  GNMR_RETURN_IF_ERROR(AddRankUnits(req.rank(), specs, &result.unit_ids));
  RankSession& rs = OpenRankSession(req);
  JoinGeneration(req, rs, /*layout_changed=*/!new_units.empty());
  // The exact shape is at most what was reserved: shrinking cannot fail.
  Status s = reservation_.Reserve(ShapeLocked());
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
  result.generation = generations_.generation();
  if (listener_) listener_->OnSessions(id_, sessions_.connected());
  // Ranks and units changed: the view now, or soon for a large job
  // (job_view.h).
  const Clock::time_point view_now = Now();
  if (view_.PublishSoon(view_now, sessions_.size())) PublishView(view_now);
  return result;
}

Status Job::CheckRegisterRequest(const v1::RegisterRequest& req) const {
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
  return Status::Ok();
}

Status Job::CheckRankUnits(uint32_t rank, const std::vector<RankUnitSpec>& specs,
                           std::vector<std::string_view>* new_units,
                           JobTopology::Growth* growth) const {
  GNMR_RETURN_IF_ERROR(topology_.ValidateSpecs(specs));
  if (topology_.HasRank(rank)) {
    const std::vector<RankUnitSpec> before = topology_.SpecsOfRank(rank);
    const std::string diff = DescribeUnitSetChange(before, specs);
    if (!diff.empty()) {
      return Status(StatusCode::kFailedPrecondition,
                    "job '" + id_ + "' rank " + std::to_string(rank) + " registered " +
                        std::to_string(before.size()) +
                        " units before; this registration differs: " + diff +
                        ". A different model needs a new job id");
    }
  }
  GNMR_RETURN_IF_ERROR(topology_.CheckRank(specs, new_units, rank, growth));
  Status s = controller_.CheckNewUnits(*new_units);
  if (!s.ok() || topology_.num_units() != controller_.num_units()) {
    // Cannot happen while both change together; refuse rather than diverge.
    spdlog::error("job {}: layout ({} units) and controller ({} units) disagree: {}", id_,
                  topology_.num_units(), controller_.num_units(), s.ToString());
    return Internal("job '" + id_ + "': unit layout and controller disagree (a daemon bug)");
  }
  return Status::Ok();
}

Status Job::ReserveGrowth(const JobTopology::Growth& growth, size_t rank_units) {
  JobShape next = ShapeLocked();
  next.units += growth.units;
  next.name_bytes += growth.name_bytes;
  next.slots += growth.slots;
  next.rank_units =
      static_cast<uint64_t>(static_cast<int64_t>(next.rank_units) + growth.rank_units);
  // Whether the rank will share a replica's layout is known only once it
  // is built: reserve as if not, and settle after.
  next.layout_entries += rank_units;
  next.reported_rank_units += rank_units;
  next.ranks += growth.ranks;
  return reservation_.Reserve(next);  // the caps and the memory budget
}

Status Job::AddRankUnits(uint32_t rank, const std::vector<RankUnitSpec>& specs,
                         std::vector<uint32_t>* unit_ids) {
  std::vector<std::string> created;
  GNMR_RETURN_IF_ERROR(
      topology_.RegisterRank(rank, specs, unit_ids, &created));  // validated: cannot fail
  for (const std::string& name : created) {
    StatusOr<uint32_t> id = controller_.AddUnit(name);  // checked: cannot fail
    if (!id.ok()) spdlog::error("job {}: unit '{}': {}", id_, name, id.status().ToString());
  }
  if (!created.empty()) imported_state_.clear();
  return Status::Ok();
}

RankSession& Job::OpenRankSession(const v1::RegisterRequest& req) {
  RankSession& rs = sessions_.FindOrAdd(req.rank());
  sessions_.CloseSink(rs, Status(StatusCode::kAborted, "replaced by a new session of this rank"));
  sessions_.NewSessionId(rs);
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
  ReporterElection::Changes changes;
  election_.OnRegistered(req.rank(), req.can_stand_by(), &changes);
  ApplyRoleChanges(changes);  // not to this rank: it is not attached
  return rs;
}

void Job::JoinGeneration(const v1::RegisterRequest& req, RankSession& rs, bool layout_changed) {
  const bool new_generation = NewIncarnation(req.rank(), rs, req.instance());
  if (req.instance() != 0) rs.instance = req.instance();
  if (new_generation) {
    StartGeneration(GenerationCause::kIncarnation,
                    "rank " + std::to_string(req.rank()) + " registered as a new incarnation");
  } else if (layout_changed) {
    RequestSnapshot();
  }
  if (req.instance() != 0) rs.instance_generation = generations_.generation();
}

}  // namespace gnmr
