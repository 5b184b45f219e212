// JobView: a job's published, read-only view (job.h, Job::Info): the
// JobInfo that Admin's ListJobs gets while the job is busy, when it was
// taken and last asked for, and the config in force that GetConfig reads.
//
// It also keeps the cadence of the view. A view is taken by the last
// Info() that found the job free, and by the job itself after every
// Register (a job of more than kAtOnceRanks ranks whose view is younger
// than kEvery: at its next tick or step after kEvery, as rebuilding it,
// O(ranks), at each of 16,384 registrations made registering quadratic),
// after a change an admin call must see at once (a config, an import, a
// rewind), at least once a second while it works and someone has asked
// for its view in the last Job::kViewWatched, and at the end of the
// operation during which an Info() found it busy. Nobody watching, the job
// builds none.
//
// Thread-safe, with a mutex of its own that is never held while a view is
// built (O(ranks)) and under which nothing else is called: the job
// publishes with its own mutex held (lock order: Job's mutex, then this
// one); Info() reads it when it cannot get the job's mutex, config() and
// config_version() always.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "common/mutex.h"
#include "gnmr/config.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

class JobView {
 public:
  using Clock = std::chrono::steady_clock;

  // Up to this many ranks a registration publishes the view at once (it is
  // cheap); above, at most one view per kEvery while ranks register.
  static constexpr size_t kAtOnceRanks = 256;
  static constexpr std::chrono::milliseconds kEvery{100};

  // ---- the job, with its mutex held
  // Publishes `info`, taken at `now`, and the config in force.
  void Publish(v1::JobInfo info, Clock::time_point now, const ControllerConfig& config,
               uint64_t config_version);
  // An Info() that found the job free: its answer `info`, taken at `now`,
  // is the view, asked for at `now`.
  void Answered(const v1::JobInfo& info, Clock::time_point now);
  // After a registration of a job with `ranks` ranks: true if the view is
  // to be published now; false if it is due at the next ShouldPublish
  // after kEvery (the view is younger than kEvery and the job large).
  bool PublishSoon(Clock::time_point now, size_t ranks);
  // After an operation: true if the view is to be published now (an
  // Info() found the job busy, a due view waited kEvery, or the view is a
  // second old and was asked for in the last `watched`).
  bool ShouldPublish(Clock::time_point now, Clock::duration watched);

  // ---- anyone
  // An Info() that found the job busy: the view, its ages advanced to
  // `now`, asked for at `now`; the job publishes one when it is done.
  v1::JobInfo Busy(Clock::time_point now);
  // The config in force (published at once on a change).
  ControllerConfig config() const;
  uint64_t config_version() const;

 private:
  mutable Mutex mu_;
  v1::JobInfo info_ GNMR_GUARDED_BY(mu_);
  Clock::time_point at_ GNMR_GUARDED_BY(mu_);          // when info_ was taken
  Clock::time_point asked_at_ GNMR_GUARDED_BY(mu_){};  // the last Info() call
  ControllerConfig config_ GNMR_GUARDED_BY(mu_);       // published at once on a change
  uint64_t config_version_ GNMR_GUARDED_BY(mu_) = 0;
  bool due_ GNMR_GUARDED_BY(mu_) = false;  // a PublishSoon waits
  std::atomic<bool> wanted_{false};        // an Info() call found the job busy
};

}  // namespace gnmr
