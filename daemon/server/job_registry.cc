#include "daemon/server/job_registry.h"

#include <spdlog/spdlog.h>

#include "common/secret.h"
#include "common/text.h"
#include "controller/state_codec.h"

namespace gnmr {
namespace {

// How much of an unknown job id a NotFound message echoes. The id comes
// from a peer and may be anything a request's size allows (8 KiB of it in
// gRPC's status trailer made the client see RESOURCE_EXHAUSTED instead of
// NOT_FOUND): escaped and cut, like in the log.
constexpr size_t kIdShown = 128;

// "7d 0h", "2h 5m", "3m 20s", "1.5s": idle times for the log.
std::string HumanDuration(std::chrono::milliseconds d) {
  const int64_t ms = d.count();
  const int64_t s = ms / 1000;
  if (s >= 86400) return std::to_string(s / 86400) + "d " + std::to_string(s % 86400 / 3600) + "h";
  if (s >= 3600) return std::to_string(s / 3600) + "h " + std::to_string(s % 3600 / 60) + "m";
  if (s >= 60) return std::to_string(s / 60) + "m " + std::to_string(s % 60) + "s";
  return std::to_string(s) + "." + std::to_string(ms % 1000 / 100) + "s";
}

}  // namespace

Status JobRegistry::CheckToken(const std::string& job_id, const Job* job,
                               const std::string& token) const {
  if (job != nullptr) {
    if (!job->TokenMatches(token)) {
      return Status(StatusCode::kUnauthenticated,
                    "wrong or missing token for job '" + job_id + "'");
    }
    return Status::Ok();
  }
  auto configured = options_.job_tokens.find(job_id);
  if (configured != options_.job_tokens.end()) {
    if (!SameSecret(configured->second, token)) {
      return Status(StatusCode::kUnauthenticated,
                    "wrong or missing token for job '" + job_id + "'");
    }
    return Status::Ok();
  }
  if (!options_.allow_unregistered_jobs) {
    return Status(StatusCode::kPermissionDenied,
                  "job '" + job_id + "' is not configured on this daemon");
  }
  return Status::Ok();
}

StatusOr<std::shared_ptr<Job>> JobRegistry::ForRegister(const v1::RegisterRequest& req,
                                                        const std::string& token) {
  MutexLock lock(mu_);
  auto it = jobs_.find(req.job_id());
  if (it != jobs_.end()) {
    GNMR_RETURN_IF_ERROR(CheckToken(req.job_id(), it->second.get(), token));
    return it->second;
  }
  if (removing_.count(req.job_id())) {
    return Status(StatusCode::kUnavailable,
                  "job '" + req.job_id() + "' is being deleted; register again in a moment");
  }
  GNMR_RETURN_IF_ERROR(CheckToken(req.job_id(), nullptr, token));
  if (jobs_.size() >= options_.max_jobs) {
    return Status(StatusCode::kResourceExhausted,
                  "daemon already serves " + std::to_string(options_.max_jobs) + " jobs");
  }
  ControllerConfig config = options_.default_config;
  if (req.has_config()) {
    StatusOr<ControllerConfig> c = ConfigFromProto(req.config());
    if (!c.ok()) return InvalidArgument("config: " + c.status().message());
    config = *c;
  }
  auto retired = retired_.find(req.job_id());
  const uint64_t first_generation = retired == retired_.end() ? 1 : retired->second + 1;
  StatusOr<std::unique_ptr<Job>> job = Job::Create(req.job_id(), req.world_size(), token, config,
                                                   options_.job, listener_, first_generation);
  if (!job.ok()) return job.status();
  std::shared_ptr<Job> shared = std::move(job).value();
  jobs_.emplace(req.job_id(), shared);
  return shared;
}

StatusOr<std::shared_ptr<Job>> JobRegistry::Authenticate(const std::string& job_id,
                                                         const std::string& token) const {
  std::shared_ptr<Job> job;
  {
    MutexLock lock(mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      return NotFound("unknown job '" + EscapeForLog(job_id, kIdShown) + "'; register first");
    }
    job = it->second;
  }
  GNMR_RETURN_IF_ERROR(CheckToken(job_id, job.get(), token));
  return job;
}

StatusOr<std::shared_ptr<Job>> JobRegistry::Find(const std::string& job_id) const {
  MutexLock lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotFound("unknown job '" + EscapeForLog(job_id, kIdShown) + "'");
  return it->second;
}

std::vector<std::shared_ptr<Job>> JobRegistry::All() const {
  MutexLock lock(mu_);
  std::vector<std::shared_ptr<Job>> out;
  for (const auto& [id, job] : jobs_) out.push_back(job);
  return out;
}

Status JobRegistry::Adopt(std::unique_ptr<Job> job) {
  MutexLock lock(mu_);
  const std::string id = job->id();
  if (jobs_.count(id)) return Status(StatusCode::kAlreadyExists, "job '" + id + "' exists");
  jobs_.emplace(id, std::move(job));
  return Status::Ok();
}

void JobRegistry::TickAll(Job::Clock::time_point now) const {
  for (const std::shared_ptr<Job>& job : All()) job->Tick(now);
}

void JobRegistry::SnapshotAll() const {
  for (const std::shared_ptr<Job>& job : All()) job->SnapshotNow();
}

StatusOr<uint32_t> JobRegistry::Remove(const std::string& job_id, const Status& why) {
  std::shared_ptr<Job> job;
  {
    MutexLock lock(mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      if (removing_.count(job_id)) {
        return Status(StatusCode::kUnavailable, "job '" + job_id + "' is being deleted already");
      }
      return NotFound("unknown job '" + EscapeForLog(job_id, kIdShown) + "'");
    }
    job = std::move(it->second);
    jobs_.erase(it);
    removing_.insert(job_id);
  }
  const uint32_t streams = job->Close(why);
  const uint64_t generation = job->generation();
  Status cleanup;
  try {
    if (listener_) cleanup = listener_->OnJobRemoved(job_id);
  } catch (const std::exception& e) {  // never leave the id blocked
    cleanup = Internal(e.what());
  } catch (...) {
    cleanup = Internal("unknown exception");
  }
  {
    MutexLock lock(mu_);
    removing_.erase(job_id);
    if (retired_.insert_or_assign(job_id, generation).second) retired_order_.push_back(job_id);
    while (retired_order_.size() > kRetiredKept) {
      retired_.erase(retired_order_.front());
      retired_order_.pop_front();
    }
  }
  if (!cleanup.ok()) {
    return Status(cleanup.code(), "job '" + job_id +
                                      "' is closed and forgotten, but removing its files "
                                      "failed (a restart may restore it): " +
                                      cleanup.message());
  }
  return streams;
}

std::vector<std::string> JobRegistry::ExpireIdle(Job::Clock::time_point now) {
  std::vector<std::string> expired;
  if (options_.idle_expiry <= std::chrono::milliseconds::zero()) return expired;
  for (const std::shared_ptr<Job>& job : All()) {
    const auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(job->IdleFor(now));
    if (idle < options_.idle_expiry) continue;
    const std::string& id = job->id();
    // A rank that registers between the check and the removal still finds
    // its stream ended (ABORTED, with the reason) and registers anew.
    const Status why(StatusCode::kAborted,
                     "job '" + id + "' expired: idle (no stream, no report) for " +
                         HumanDuration(idle) + ", job_idle_expiry is " +
                         HumanDuration(options_.idle_expiry) +
                         "; a rank still running registers it again as a new job");
    StatusOr<uint32_t> removed = Remove(id, why);
    if (removed.status().code() == StatusCode::kNotFound ||
        removed.status().code() == StatusCode::kUnavailable) {
      continue;  // deleted meanwhile
    }
    if (removed.ok()) {
      spdlog::info(
          "job {}: expired after {} idle (job_idle_expiry {}); its snapshots, event "
          "log and metric series are removed",
          EscapeForLog(id), HumanDuration(idle), HumanDuration(options_.idle_expiry));
    } else {
      spdlog::error("job {}: expired after {} idle: {}", EscapeForLog(id), HumanDuration(idle),
                    EscapeMessageForLog(removed.status().message()));
    }
    expired.push_back(id);
  }
  return expired;
}

}  // namespace gnmr
