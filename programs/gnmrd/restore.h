// Restoring gnmrd's jobs from the state dir at start-up (docs/architecture.md,
// "gnmrd: jobs and the store": a snapshot that fails to restore falls back to
// the previous one).
//
// For each job with a snapshot, in order:
//   1. the newest intact generation (SnapshotStore::Load) is restored;
//   2. if that fails (its job layout does not match its controller state,
//      its metadata does not parse) and it was the newest file, the
//      previous generation is tried, and on success it replaces the newest
//      on disk (the newest is kept as snapshot.pb.unrestorable-<ms>), so the
//      next snapshot does not push the good generation out;
//   3. if no generation restores, both files are moved aside
//      (*.unrestorable-<ms>) and an error is logged: the job is not served,
//      and a new registration of it starts afresh without overwriting them.
// Never fatal: one bad job does not keep the others down.
#pragma once

#include <memory>
#include <vector>

#include "daemon/job/job.h"
#include "daemon/store/snapshot_store.h"

namespace gnmr {

std::vector<std::unique_ptr<Job>> RestoreJobs(store::SnapshotStore& store,
                                              const JobOptions& options, JobListener* listener);

}  // namespace gnmr
