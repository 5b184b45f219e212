// Removing a deleted job's files from the state dir (deploy/README.md, "Job
// lifecycle").
//
//   <state_dir>/jobs/<escaped id>/             the job: snapshots, event log
//   <state_dir>/jobs/.deleted-<name>-<ms>/     the same, being removed
//
// RemoveJobDir first renames the job's directory to a ".deleted-" name, an
// atomic step: after a crash at any point a restart finds either the whole
// job (restored as before) or no job at all, never a job with half its
// files. The ".deleted-" name is never a job's (EscapeJobId never starts a
// name with '.'), so SnapshotStore::ListJobs skips it. Then it deletes the
// files and the directory; what a crash leaves of that is finished by
// RemoveDeletedJobDirs at the next start.
//
// Everything in the job's directory goes, also snapshot files kept as
// *.unrestorable-<ms>: deleting a job forgets it. Export it first
// (gnmrctl export) to keep its controller state.
#pragma once

#include <string>

#include "common/time_source.h"
#include "gnmr/status.h"

namespace gnmr {
namespace store {

// Removes the job's directory and everything in it (see above). OK if the
// job has none. Call only when nothing writes the job's files any more
// (SnapshotWriter::CancelJob, EventLog::RemoveJob). `clock` gives the
// <ms> of the ".deleted-" name.
Status RemoveJobDir(const std::string& state_dir, const std::string& job_id,
                    const TimeSource& clock = TimeSource::Real());

// Removes the ".deleted-*" directories a crash left under jobs/. At start,
// before any job is restored. Returns how many it removed, or the first
// error.
StatusOr<int> RemoveDeletedJobDirs(const std::string& state_dir);

}  // namespace store
}  // namespace gnmr
