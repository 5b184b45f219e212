// TraceRecorder: records each job's per-step unit statistics - exactly the
// aggregated samples its controller observed - as a replay trace that
// `gnmrctl replay` reads directly (docs/replay.md, "Recording a live job").
//
//   <trace.dir>/<escaped job id>.csv     kTraceHeader, one row per unit and step
//   <trace.dir>/<escaped job id>.csv.1   the file before it
//
// The directory comes from the daemon's config (the operator), never from a
// peer; a job id is made a file name with store::EscapeJobId, so it cannot
// name another path.
//
// Format
// - Every field of UnitSample the controller reads, so a replay sees what
//   the live controller saw, the forward channel included. The reader finds
//   columns by name and ignores ones it does not know: columns are added at
//   the end, and `unit` stays second, never last (a trace with the unit
//   last is the old unquoted form, controller/replay/trace_reader.h).
// - Fields are RFC 4180 (controller/replay/trace_csv.h): a unit name with
//   a comma or a quote is quoted, its quotes doubled.
// - Numbers in their shortest round-trip form, so a replay reads the very
//   doubles; a forward column that is 0 is left empty (read back as 0), so
//   a unit without forward statistics costs six commas.
//
// Design
// - Off the decision path. Record is called under the job's lock after the
//   decision went out; it copies the samples into a bounded queue (bytes,
//   all jobs) and returns. When the queue is full the step is dropped and
//   counted (kGapStarted for the first of a run, so the caller writes one
//   event per gap, not one per step): recording never delays a decision.
// - A writer thread drains the queue every `flush_interval` (sooner when it
//   is half full), formats the CSV and writes each job's lines at once.
//   It catches everything; a write error is counted and logged once per job
//   until writes succeed again.
// - A budget of open files (`max_open_files`), not one per job: a job's
//   file is opened when its lines are written and stays open while it is
//   among the most recently written; past the budget the least recently
//   written is closed and reopened (appending) at its next write. So any
//   number of recorded jobs holds at most max_open_files descriptors
//   (docs/limits.md, "File descriptors").
// - Every file is a trace on its own (a header, steps increasing), so the
//   writer starts a new file (the current one becomes .csv.1, replacing the
//   one before) when the next write would take it past max_file_bytes, when
//   a job's steps go back (a new generation: import, rewind, restart), and
//   at a job's first step in this process. A job thus takes at most about
//   2 x max_file_bytes.
// - Unit names are copied once per job (and again when its controller's
//   units change, ForgetNames) and shared by the queued steps.
// - A removed job's queued steps are dropped and its file closed; its trace
//   files stay (they are the operator's recording, not the job's state).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "controller/controller.h"
#include "gnmr/status.h"

namespace gnmr {
namespace store {

struct TraceRecorderOptions {
  std::string dir;                                 // where the traces go (the daemon's trace.dir)
  std::string jobs = "*";                          // glob of the job ids recorded
  uint64_t max_file_bytes = uint64_t{256} << 20;   // start a new file past this
  uint64_t max_queued_bytes = uint64_t{64} << 20;  // steps waiting, all jobs
  std::chrono::milliseconds flush_interval{200};
  size_t max_open_files = 64;  // trace files held open at once, all jobs (at least 1)
};

// The first line of every trace file the recorder writes (Format, above).
inline constexpr char kTraceHeader[] =
    "step,unit,sumsq,amax,nonfinite,zeros,numel,"
    "fwd_sumsq,fwd_amax,fwd_saturated,fwd_zeros,fwd_numel,fwd_order,"
    "fwd_blocks,fwd_saturated_blocks,fwd_dead_blocks,fwd_scale_clamps,"
    "fwd_source_numel,fwd_underflow,fwd_error_sumsq,fwd_source_sumsq,"
    "bwd_sumsq,bwd_saturated,bwd_zeros,bwd_numel,bwd_order\n";

class TraceRecorder {
 public:
  // Starts the writer thread; the directory is created on first write.
  explicit TraceRecorder(TraceRecorderOptions options);
  ~TraceRecorder();  // Stop()
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  enum class Outcome {
    kQueued,
    kNotRecorded,  // the job does not match `jobs`
    kDropped,      // queue full (or stopped), in a gap already reported
    kGapStarted,   // queue full: the first step dropped since one was queued
  };
  // Queues one decided step of the job: `samples` as the controller
  // observed them, names from `controller`. Never blocks on I/O.
  Outcome Record(const std::string& job_id, int64_t step, const std::vector<UnitSample>& samples,
                 const Controller& controller);

  // The job's units may have changed (import): names are copied afresh.
  void ForgetNames(const std::string& job_id);
  // A removed job: drops its queued steps and state and closes its file.
  void RemoveJob(const std::string& job_id);

  // Waits until every step queued before the call is written (or failed).
  // OK, or the first write error since the previous Flush.
  Status Flush();
  // Flushes, then stops the writer; later Records are dropped. Idempotent.
  void Stop();

  // <dir>/<EscapeJobId(job_id)>.csv
  static std::string TracePath(const std::string& dir, const std::string& job_id);

  struct Counters {
    uint64_t steps_queued = 0;
    uint64_t steps_written = 0;
    uint64_t steps_dropped = 0;  // queue full or stopped
    uint64_t steps_failed = 0;   // lost to write errors
    uint64_t rotations = 0;      // new files started over an old one
    uint64_t bytes_written = 0;
  };
  Counters counters() const;

 private:
  using Names = std::vector<std::string>;
  struct Queued {
    std::string job_id;
    int64_t step = 0;
    std::vector<UnitSample> samples;
    std::shared_ptr<const Names> names;
    size_t bytes = 0;
  };
  struct JobState {        // under mu_
    bool matched = false;  // `jobs` matches the id
    bool in_gap = false;   // the last step was dropped
    std::shared_ptr<const Names> names;
  };
  struct File {   // writer thread only
    int fd = -1;  // -1: not open (over the budget, after an error, not yet)
    uint64_t size = 0;
    int64_t last_step = -1;
    bool start_new = false;  // the pending lines open a new file
    std::string pending;     // formatted lines not yet written
    uint64_t pending_steps = 0;
    std::list<std::string>::iterator lru;  // in open_ while fd >= 0
  };

  void Run();
  void WriteBatch(std::vector<Queued>* batch);
  // Formats one step into the job's pending lines; writes the lines before
  // it first when the step must open a new file.
  void Add(const Queued& q, File* f);
  // Writes f->pending (opening the file if it must); books the outcome.
  void WritePending(const std::string& job_id, File* f);
  // Opens the job's file within the budget: a new one (rotate: the old one
  // becomes .csv.1) or the existing one to append to.
  Status OpenFile(const std::string& job_id, File* f, bool rotate);
  void CloseFile(File* f);
  void CloseJob(const std::string& job_id);
  void Book(const std::string& job_id, const Status& s, uint64_t steps, uint64_t bytes);

  const TraceRecorderOptions options_;

  mutable Mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::unordered_map<std::string, JobState> jobs_ GNMR_GUARDED_BY(mu_);
  std::vector<Queued> queue_ GNMR_GUARDED_BY(mu_);
  uint64_t queued_bytes_ GNMR_GUARDED_BY(mu_) = 0;
  uint64_t queued_seq_ GNMR_GUARDED_BY(mu_) = 0;  // steps ever queued
  uint64_t done_seq_ GNMR_GUARDED_BY(mu_) = 0;    // of those, written or failed
  uint64_t flush_target_ GNMR_GUARDED_BY(mu_) = 0;
  std::vector<std::string> removals_ GNMR_GUARDED_BY(mu_);
  Status flush_error_ GNMR_GUARDED_BY(mu_);
  Counters counters_ GNMR_GUARDED_BY(mu_);
  bool stopping_ GNMR_GUARDED_BY(mu_) = false;

  // Writer thread only.
  std::unordered_map<std::string, File> files_;
  std::list<std::string> open_;  // jobs whose file is open, least recently written first
  std::unordered_map<std::string, bool> failing_;
  std::thread thread_;
};

}  // namespace store
}  // namespace gnmr
