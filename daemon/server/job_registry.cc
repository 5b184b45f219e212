#include "daemon/server/job_registry.h"

#include "common/secret.h"
#include "daemon/controller/state_codec.h"

namespace gnmr {

Status JobRegistry::CheckToken(const std::string& job_id, const Job* job,
                               const std::string& token) const {
  if (job != nullptr) {
    if (!job->TokenMatches(token)) {
      return Status(StatusCode::kUnauthenticated, "wrong or missing token for job '" + job_id + "'");
    }
    return Status::Ok();
  }
  auto configured = options_.job_tokens.find(job_id);
  if (configured != options_.job_tokens.end()) {
    if (!SameSecret(configured->second, token)) {
      return Status(StatusCode::kUnauthenticated, "wrong or missing token for job '" + job_id + "'");
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
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(req.job_id());
  if (it != jobs_.end()) {
    Status s = CheckToken(req.job_id(), it->second.get(), token);
    if (!s.ok()) return s;
    return it->second;
  }
  Status s = CheckToken(req.job_id(), nullptr, token);
  if (!s.ok()) return s;
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
  StatusOr<std::unique_ptr<Job>> job =
      Job::Create(req.job_id(), req.world_size(), token, config, options_.job, listener_);
  if (!job.ok()) return job.status();
  std::shared_ptr<Job> shared = std::move(job).value();
  jobs_.emplace(req.job_id(), shared);
  return shared;
}

StatusOr<std::shared_ptr<Job>> JobRegistry::Authenticate(const std::string& job_id,
                                                         const std::string& token) const {
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return NotFound("unknown job '" + job_id + "'; register first");
    job = it->second;
  }
  Status s = CheckToken(job_id, job.get(), token);
  if (!s.ok()) return s;
  return job;
}

StatusOr<std::shared_ptr<Job>> JobRegistry::Find(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotFound("unknown job '" + job_id + "'");
  return it->second;
}

std::vector<std::shared_ptr<Job>> JobRegistry::All() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Job>> out;
  for (const auto& [id, job] : jobs_) out.push_back(job);
  return out;
}

Status JobRegistry::Adopt(std::unique_ptr<Job> job) {
  std::lock_guard<std::mutex> lock(mu_);
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

}  // namespace gnmr
