// SnapshotWriter: writes controller snapshots on a background thread, so
// the decision path never waits for the disk.
//
// Design
// - Latest wins: Submit replaces any write still pending for the same job;
//   a job has at most one pending snapshot, so memory is bounded by the
//   number of jobs however fast snapshots are submitted or slow the disk is.
// - Fair: jobs are written in the order they became pending; resubmitting
//   a pending job does not move it, so a busy job cannot starve the others.
// - Submit only takes a mutex and moves the state in; all I/O is on the
//   writer thread. Flush waits for everything submitted before the call.
// - The thread catches every exception (a failed write is counted and
//   logged, never fatal). Stop (and the destructor) writes what is pending,
//   then joins: this is the snapshot at shutdown (docs/architecture.md,
//   "gnmrd: jobs and the store").
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "daemon/store/snapshot_store.h"
#include "gnmr/status.h"
#include "gnmr/v1/controller.pb.h"

namespace gnmr {
namespace store {

class SnapshotWriter {
 public:
  // `store` must outlive the writer. Starts the thread.
  explicit SnapshotWriter(SnapshotStore* store);
  ~SnapshotWriter();  // Stop()
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  // Queues a snapshot of the job, replacing one still pending. Returns
  // false (and drops it) after Stop.
  bool Submit(const std::string& job_id, v1::ControllerState state, std::string job_meta);

  // Waits until every snapshot submitted before the call is written or has
  // failed. OK if the latest write of every job succeeded, else the error
  // of a job whose latest write failed.
  Status Flush();

  // Writes everything pending, then stops the thread. Idempotent.
  void Stop();

  struct Counters {
    uint64_t submitted = 0;
    uint64_t superseded = 0;  // replaced while pending, never written
    uint64_t writes = 0;      // successful
    uint64_t failures = 0;
  };
  Counters counters() const;

  // Wall-clock time (Unix seconds) of the job's last successful write in
  // this process; nullopt if none yet. For the snapshot-age metric.
  std::optional<double> LastSuccessUnix(const std::string& job_id) const;

  // Forgets a removed job's records (a pending write still happens).
  void Forget(const std::string& job_id);

  // For a deleted job (its Job is closed: nothing more is submitted for
  // it): drops its pending snapshot, waits until a write of it in progress
  // has finished, and forgets its records. Afterwards no write of the job
  // happens, so its files can be removed.
  void CancelJob(const std::string& job_id);

 private:
  struct Pending {
    v1::ControllerState state;
    std::string meta;
    uint64_t oldest_seq = 0;  // first unwritten submission merged here
  };
  struct JobRecord {
    std::optional<double> last_success_unix;
    Status last_status;
  };

  void Run();
  // Books the outcome of one write.
  void Record(const std::string& job_id, const Status& s, double now) GNMR_REQUIRES(mu_);
  // Outstanding work submitted at or before `seq`.
  bool OutstandingAtOrBefore(uint64_t seq) const GNMR_REQUIRES(mu_);

  SnapshotStore* store_;
  mutable Mutex mu_;
  std::condition_variable work_cv_;  // pending work or stop
  std::condition_variable done_cv_;  // a write finished
  std::unordered_map<std::string, Pending> pending_ GNMR_GUARDED_BY(mu_);
  std::deque<std::string> order_ GNMR_GUARDED_BY(mu_);  // pending job ids, oldest first
  uint64_t next_seq_ GNMR_GUARDED_BY(mu_) = 0;          // last sequence number handed out
  uint64_t in_flight_seq_ GNMR_GUARDED_BY(mu_) = 0;     // oldest_seq being written, 0 if idle
  std::string in_flight_job_ GNMR_GUARDED_BY(mu_);      // the job being written ("" if idle)
  std::unordered_map<std::string, JobRecord> records_ GNMR_GUARDED_BY(mu_);
  Counters counters_ GNMR_GUARDED_BY(mu_);
  bool stopping_ GNMR_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace store
}  // namespace gnmr
