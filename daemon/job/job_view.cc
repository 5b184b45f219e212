#include "daemon/job/job_view.h"

#include <utility>

namespace gnmr {

void JobView::Publish(v1::JobInfo info, Clock::time_point now, const ControllerConfig& config,
                      uint64_t config_version) {
  MutexLock lock(mu_);
  due_ = false;
  info_ = std::move(info);
  at_ = now;
  if (config_version_ != config_version || config_ != config) {
    config_ = config;
    config_version_ = config_version;
  }
}

void JobView::Answered(const v1::JobInfo& info, Clock::time_point now) {
  MutexLock lock(mu_);
  info_ = info;
  at_ = now;
  asked_at_ = now;
}

bool JobView::PublishSoon(Clock::time_point now, size_t ranks) {
  MutexLock lock(mu_);
  const bool recent = now - at_ < kEvery;
  if (recent && ranks > kAtOnceRanks) {
    due_ = true;  // the next tick or step after kEvery publishes it
    return false;
  }
  return true;
}

bool JobView::ShouldPublish(Clock::time_point now, Clock::duration watched) {
  bool stale;
  {
    MutexLock lock(mu_);
    const bool is_watched = now - asked_at_ < watched;
    stale = (is_watched && now - at_ >= std::chrono::seconds(1)) || (due_ && now - at_ >= kEvery);
  }
  return wanted_.exchange(false) || stale;
}

v1::JobInfo JobView::Busy(Clock::time_point now) {
  wanted_ = true;  // the operation holding the job's mutex publishes one when done
  MutexLock lock(mu_);
  asked_at_ = now;
  v1::JobInfo info = info_;
  const double aged = std::chrono::duration<double>(now - at_).count();
  if (aged > 0) {
    for (v1::RankInfo& r : *info.mutable_ranks()) {
      r.set_last_seen_seconds_ago(r.last_seen_seconds_ago() + aged);
    }
  }
  return info;
}

ControllerConfig JobView::config() const {
  MutexLock lock(mu_);
  return config_;
}

uint64_t JobView::config_version() const {
  MutexLock lock(mu_);
  return config_version_;
}

}  // namespace gnmr
