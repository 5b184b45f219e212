#include "daemon/job/job_reservation.h"

#include <utility>

namespace gnmr {
namespace {

JobCaps EffectiveCaps(const JobOptions& options) {
  JobCaps caps = options.caps;
  caps.max_open_step_bytes = options.aggregation.max_open_bytes;
  caps.decision_history_bytes = options.decision_history_bytes;
  return caps;
}

}  // namespace

JobReservation::JobReservation(std::string job_id, const JobOptions& options)
    : job_id_(std::move(job_id)), caps_(EffectiveCaps(options)), budget_(options.budget) {}

JobReservation::~JobReservation() {
  if (budget_) budget_->ForceResize(bytes_, 0);
}

Status JobReservation::Reserve(const JobShape& next) {
  Status s = CheckJobCaps(next, caps_);
  if (!s.ok()) return Status(s.code(), "job '" + job_id_ + "': " + s.message());
  const uint64_t bytes = JobFootprint(next, caps_);
  if (budget_) {
    GNMR_RETURN_IF_ERROR(budget_->Resize("job '" + job_id_ + "'", bytes_, bytes));
  }
  bytes_ = bytes;
  return Status::Ok();
}

Status JobReservation::ForceReserve(const JobShape& shape) {
  const Status caps = CheckJobCaps(shape, caps_);
  const uint64_t bytes = JobFootprint(shape, caps_);
  if (budget_) budget_->ForceResize(bytes_, bytes);
  bytes_ = bytes;
  return caps;
}

}  // namespace gnmr
