// JobReservation: a job's share of the daemon's memory budget
// (resource_caps.h, docs/limits.md "Memory"): the caps the job's shape
// must stay within, and the bytes reserved for its footprint, given back
// when the reservation (the job) goes.
//
// Not thread-safe: called with Job's mutex held (the MemoryBudget it
// reserves from is shared by every job and thread-safe itself).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "daemon/job/job_options.h"
#include "daemon/job/resource_caps.h"
#include "gnmr/status.h"

namespace gnmr {

class JobReservation {
 public:
  // The caps are options.caps with the open-step and history bytes the
  // job runs with (options.aggregation.max_open_bytes,
  // options.decision_history_bytes); the budget is options.budget (null:
  // only the caps are checked).
  JobReservation(std::string job_id, const JobOptions& options);
  ~JobReservation();  // gives the bytes back
  JobReservation(const JobReservation&) = delete;
  JobReservation& operator=(const JobReservation&) = delete;

  // Checks `next` against the caps and the budget and reserves its
  // footprint: the last check before a change (all or nothing).
  Status Reserve(const JobShape& next);
  // Reserves `shape`'s footprint whatever the caps and the budget say (a
  // restored job, served even past a cap or the budget lowered since it
  // was saved); returns what the caps say of it.
  Status ForceReserve(const JobShape& shape);

  const JobCaps& caps() const { return caps_; }
  uint64_t bytes() const { return bytes_; }

 private:
  const std::string job_id_;
  const JobCaps caps_;
  const std::shared_ptr<MemoryBudget> budget_;
  uint64_t bytes_ = 0;  // this job's share of budget_
};

}  // namespace gnmr
