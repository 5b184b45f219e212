// JobRegistry: the daemon's jobs, created on first registration, removed
// by deletion (Admin.DeleteJob) or idle expiry (deploy/README.md, "Job
// lifecycle").
//
// Authentication lives here: a job's token is either configured (job_tokens)
// or bound by the job's first registration (trust on first use, when
// allow_unregistered_jobs is set); every later Register and Session of the
// job must present it.
//
// Removal: the job leaves the table, is closed (Job::Close: its streams end,
// it has no side effects any more), then the listener forgets its files and
// metrics (JobListener::OnJobRemoved). Until that returns, a Register of the
// id is refused with UNAVAILABLE (clients retry), so a new job of the same
// id never races the cleanup. A job id that comes back starts at the
// removed job's generation + 1 (remembered for the last kRetiredKept ids,
// in memory): its ranks may still hold the old job's decisions, and a
// client drops those only for a newer generation.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "daemon/job/job.h"
#include "gnmr/status.h"

namespace gnmr {

struct RegistryOptions {
  JobOptions job;
  size_t max_jobs = 1024;
  bool allow_unregistered_jobs = true;
  std::map<std::string, std::string> job_tokens;  // job id -> token
  ControllerConfig default_config;
  // A job with no stream attached and no report for this long is removed
  // (ExpireIdle); zero: never.
  std::chrono::milliseconds idle_expiry{0};
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

  // Removes the job (see the top of this file): its streams end with `why`.
  // Returns the number of streams closed; NotFound for an unknown job,
  // UNAVAILABLE while it is being removed; an error from the listener's
  // cleanup (the job is gone from memory anyway) names what was left.
  StatusOr<uint32_t> Remove(const std::string& job_id, const Status& why);
  // Removes every job idle longer than idle_expiry, with an info line each.
  // Returns their ids.
  std::vector<std::string> ExpireIdle(Job::Clock::time_point now);

  const RegistryOptions& options() const { return options_; }

 private:
  Status CheckToken(const std::string& job_id, const Job* job, const std::string& token) const;

  static constexpr size_t kRetiredKept = 4096;

  const RegistryOptions options_;
  JobListener* const listener_;
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<Job>> jobs_ GNMR_GUARDED_BY(mu_);
  std::set<std::string> removing_ GNMR_GUARDED_BY(mu_);  // removed, cleanup still running
  // Removed job ids -> their last generation; oldest first in retired_order_.
  std::map<std::string, uint64_t> retired_ GNMR_GUARDED_BY(mu_);
  std::deque<std::string> retired_order_ GNMR_GUARDED_BY(mu_);
};

}  // namespace gnmr
