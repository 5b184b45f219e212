// The end of a job: Close (deletion by an operator, idle expiry) and the
// idle time that expiry goes by (deploy/README.md, "Job lifecycle").
//
// Close is the point after which the job has no side effects: it drops the
// listener under the job's lock, so a report or an admin call still in
// flight on another thread (holding its shared_ptr) can neither recreate
// the job's metric series nor write its snapshot or events after the
// registry removed them.
#include <algorithm>

#include "daemon/job/job.h"

namespace gnmr {

uint32_t Job::Close(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_.ok()) return 0;
  closed_ = why.ok() ? Status(StatusCode::kAborted, "job '" + id_ + "' was closed") : why;
  listener_ = nullptr;
  uint32_t closed_streams = 0;
  sessions_.ForEach([&](uint32_t, RankSession& rs) {
    if (!rs.sink) return;
    rs.sink->Close(closed_);
    DropSink(rs);
    rs.stream_ended = true;
    ++closed_streams;
  });
  return closed_streams;
}

Job::Clock::duration Job::IdleFor(Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (ConnectedLocked() > 0 || now <= last_active_) return Clock::duration::zero();
  return now - last_active_;
}

double Job::LastActiveUnixLocked() const {
  const double now_unix = options_.clock->UnixSeconds();
  if (ConnectedLocked() > 0) return now_unix;
  const double idle = std::chrono::duration<double>(Now() - last_active_).count();
  return now_unix - std::max(0.0, idle);
}

Job::Clock::time_point Job::SteadyFromUnix(double unix_seconds, Clock::time_point fallback) const {
  if (!(unix_seconds > 0)) return fallback;  // unknown (an older snapshot), or NaN
  const double ago = options_.clock->UnixSeconds() - unix_seconds;
  if (!(ago > 0)) return fallback;  // the future: a clock that went back
  // Bounded, so a corrupt value cannot overflow the conversion: a year is
  // past any sensible idle expiry.
  const double bounded = std::min(ago, 366.0 * 24 * 3600);
  const auto back =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(bounded));
  return fallback - back;
}

}  // namespace gnmr
