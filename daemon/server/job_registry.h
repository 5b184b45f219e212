// JobRegistry: the daemon's jobs, created on first registration.
//
// Authentication lives here: a job's token is either configured (job_tokens)
// or bound by the job's first registration (trust on first use, when
// allow_unregistered_jobs is set); every later Register and Session of the
// job must present it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/job/job.h"

namespace gnmr {

struct RegistryOptions {
  JobOptions job;
  size_t max_jobs = 1024;
  bool allow_unregistered_jobs = true;
  std::map<std::string, std::string> job_tokens;  // job id -> token
  ControllerConfig default_config;
};

class JobRegistry {
 public:
  JobRegistry(RegistryOptions options, JobListener* listener)
      : options_(std::move(options)), listener_(listener) {}

  // The job a Register request is for, created if new (with the request's
  // config when it carries one, else the default). UNAUTHENTICATED on a
  // wrong token, PERMISSION_DENIED for an unknown job when jobs must be
  // configured, RESOURCE_EXHAUSTED past max_jobs.
  StatusOr<std::shared_ptr<Job>> ForRegister(const v1::RegisterRequest& req,
                                             const std::string& token);
  // An existing job, after checking the token (Session streams).
  StatusOr<std::shared_ptr<Job>> Authenticate(const std::string& job_id,
                                              const std::string& token) const;
  // Existing job or NotFound (admin).
  StatusOr<std::shared_ptr<Job>> Find(const std::string& job_id) const;
  std::vector<std::shared_ptr<Job>> All() const;  // job id order

  // Adds a job restored from the store; AlreadyExists if present.
  Status Adopt(std::unique_ptr<Job> job);

  void TickAll(Job::Clock::time_point now) const;
  void SnapshotAll() const;

  const RegistryOptions& options() const { return options_; }

 private:
  Status CheckToken(const std::string& job_id, const Job* job, const std::string& token) const;

  const RegistryOptions options_;
  JobListener* const listener_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Job>> jobs_;
};

}  // namespace gnmr
