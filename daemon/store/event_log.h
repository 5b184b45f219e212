// EventLog: the append-only per-job event log (docs/metrics.md, "Event log") and the
// in-memory window of recent events that Admin.ListEvents serves.
//
//   <state_dir>/jobs/<escaped job id>/events.jsonl     one JSON object a line
//   <state_dir>/jobs/<escaped job id>/events.jsonl.1   the one before it
//
// Every admission, release, denial, config change, admin release and import
// is one gnmr.v1.Event with the statistics that caused it (event_json.h
// gives the line format).
//
// Design
// - Append never touches the disk: it puts the event into the job's ring
//   (the last `ring_capacity` events, for ListEvents) and into a bounded
//   write buffer shared by all jobs, then returns. The decision path pays a
//   mutex and a copy, nothing more.
// - Memory is bounded in bytes too (docs/limits.md, "Memory"): a job's ring
//   holds at most `ring_bytes` of events (EventMemoryBytes; the newest is
//   always kept), the write buffer `max_buffered_bytes`; an event's detail
//   is capped at 1024 bytes as in the file. MemoryBound() is what the log
//   holds at most besides its rings.
// - A writer thread drains the buffer every `flush_interval` (sooner when it
//   is half full), groups events by job and appends their lines with one
//   write(2) per job. Files stay open (at most `max_open_files`).
// - When the buffer is full an event is dropped from the file (still in the
//   ring) and counted; a write error (unwritable directory, full disk) is
//   counted, logged once per job until it recovers, and returned by the
//   next Flush. Nothing here can crash the daemon: the thread catches all.
// - Flush waits until everything appended before it is written and
//   fdatasync'ed; Stop (and the destructor) flushes and joins the thread.
// - ReloadTail refills a job's ring from the end of its file after a
//   restart, so ListEvents still shows the events before it; when the file
//   holds fewer events than the ring, it reads on into events.jsonl.1.
// - Rotation by size: before a write would take a job's events.jsonl past
//   max_file_bytes, the file is renamed to events.jsonl.1 (replacing the
//   previous one) and a new one is started. A job's event log thus takes at
//   most about 2 x max_file_bytes (a single write may exceed the bound by
//   its own size).
// - RemoveJob (a deleted or expired job) drops the job's ring and its
//   buffered events; the writer closes its file and deletes both files.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "common/time_source.h"
#include "gnmr/status.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {
namespace store {

struct EventLogOptions {
  size_t ring_capacity = 10000;           // events kept in memory per job
  size_t ring_bytes = 512u << 10;         // ... and their bytes
  size_t max_buffered = 65536;            // events waiting for the writer, all jobs
  size_t max_buffered_bytes = 32u << 20;  // ... and their bytes
  std::chrono::milliseconds flush_interval{200};
  size_t max_open_files = 128;
  uint64_t max_file_bytes = uint64_t{64} << 20;  // rotate past this (above)
  // gnmrd's clock (common/time_source.h): the time of an event appended
  // without one. Never null; it must outlive the log.
  const TimeSource* clock = &TimeSource::Real();
};

// The bytes `e` holds in memory (the message and its strings).
size_t EventMemoryBytes(const v1::Event& e);
// At most what one event in a ring holds (strings capped as Append caps
// them), and what one job's ring holds.
size_t MaxEventMemoryBytes();
size_t RingMemoryBound(const EventLogOptions& options);

class EventLog {
 public:
  static constexpr uint32_t kDefaultListLimit = 1000;

  // Starts the writer thread. Directories are created on first write.
  explicit EventLog(std::string state_dir, EventLogOptions options = {});
  ~EventLog();  // Stop()
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Records an event of the job; a zero time_unix is set to now. Returns
  // false if it could not be buffered for the file (buffer full or
  // stopped); it is in the ring regardless.
  bool Append(const std::string& job_id, v1::Event event);
  // The same for several events of one job, in order, under one lock.
  // Returns how many were buffered for the file.
  size_t Append(const std::string& job_id, std::vector<v1::Event> events);

  // The newest `limit` (0: kDefaultListLimit) events of the job with
  // observed_step >= since_step, oldest first. Empty for an unknown job.
  std::vector<v1::Event> List(const std::string& job_id, int64_t since_step, uint32_t limit) const;

  // Fills the job's ring with the last ring_capacity events of its file
  // (lines that do not parse are skipped and counted). Call when restoring
  // a job, before its first Append: FailedPrecondition if the ring already
  // has events. A job without a file is OK (nothing to load).
  Status ReloadTail(const std::string& job_id);

  // Waits until every event appended before the call is on disk. OK, or
  // the first write error since the previous Flush.
  Status Flush();

  // Flushes, then stops the writer; later Appends only reach the ring.
  void Stop();

  // Forgets a deleted job: its ring and buffered events are dropped, and
  // its file is closed and (with `delete_files`) its files events.jsonl and
  // events.jsonl.1 deleted before this returns; without, the caller removes
  // them (store::RemoveJobDir takes the whole directory at once). Appends
  // for the job afterwards start it anew. The error of a failed deletion
  // (a missing file is none).
  Status RemoveJob(const std::string& job_id, bool delete_files = true);

  // Upper bound of the bytes of buffered events and of the batch being
  // written (its lines included): a daemon-wide term of the memory formula.
  static size_t MemoryBound(const EventLogOptions& options);

  struct Counters {
    uint64_t appended = 0;
    uint64_t written = 0;         // lines written to files
    uint64_t dropped = 0;         // not buffered: buffer full or stopped
    uint64_t write_failures = 0;  // events lost to write errors
    uint64_t reload_skipped = 0;  // unparsable lines seen by ReloadTail
    uint64_t rotations = 0;       // events.jsonl renamed to events.jsonl.1
  };
  Counters counters() const;

 private:
  struct Buffered {
    std::string job_id;
    v1::Event event;
  };
  struct Ring {
    std::deque<v1::Event> events;
    size_t bytes = 0;  // EventMemoryBytes, summed
  };
  // Drops the oldest events beyond ring_capacity or ring_bytes, keeping
  // the newest.
  void Trim(Ring* ring) const;

  struct BatchResult {
    uint64_t written = 0;
    uint64_t failed = 0;
    Status error;  // the first
  };

  struct OpenFile {
    int fd = -1;
    uint64_t size = 0;
  };

  void Run();
  // Writes one batch, grouped by job, leaving out the jobs in `removed`.
  // Writer thread only, as are the next four.
  BatchResult WriteBatch(const std::vector<Buffered>& batch,
                         const std::vector<std::pair<std::string, bool>>& removed);
  Status WriteJob(const std::string& job_id, const std::string& lines);
  // Renames the job's full file to events.jsonl.1 and opens a new one.
  Status Rotate(const std::string& job_id, OpenFile* file);
  Status SyncOpenFiles();
  void CloseFiles();
  // Closes the job's file (if open) and deletes its files if asked to.
  Status RemoveFiles(const std::string& job_id, bool delete_files);
  // Runs the removals taken from removals_ and books them (mu_ not held).
  void CompleteRemovals(const std::vector<std::pair<std::string, bool>>& removals);
  std::string EventsPath(const std::string& job_id) const;

  const std::string state_dir_;
  const EventLogOptions options_;

  mutable Mutex mu_;
  std::condition_variable work_cv_;  // writer: work, flush request or stop
  std::condition_variable done_cv_;  // flushers: a sync completed
  std::unordered_map<std::string, Ring> rings_ GNMR_GUARDED_BY(mu_);
  std::vector<Buffered> buffer_ GNMR_GUARDED_BY(mu_);
  size_t buffer_bytes_ GNMR_GUARDED_BY(mu_) = 0;
  uint64_t buffered_seq_ GNMR_GUARDED_BY(mu_) = 0;  // events ever buffered
  uint64_t flush_target_ GNMR_GUARDED_BY(mu_) = 0;  // a Flush wants events <= this synced
  uint64_t synced_seq_ GNMR_GUARDED_BY(mu_) = 0;    // events <= this are written and synced
  Status flush_error_ GNMR_GUARDED_BY(mu_);         // first write error since the last Flush
  Counters counters_ GNMR_GUARDED_BY(mu_);
  bool stopping_ GNMR_GUARDED_BY(mu_) = false;
  // The thread has returned: RemoveJob works alone.
  bool writer_done_ GNMR_GUARDED_BY(mu_) = false;
  // RemoveJob requests: job ids (and delete_files) for the writer, their
  // outcome for the caller.
  std::vector<std::pair<std::string, bool>> removals_ GNMR_GUARDED_BY(mu_);
  std::unordered_map<std::string, Status> removed_ GNMR_GUARDED_BY(mu_);

  // Writer thread only.
  std::unordered_map<std::string, OpenFile> files_;  // job id -> open file
  std::unordered_map<std::string, bool> failing_;    // job id -> last failed
  std::unordered_set<std::string> rotation_failing_;
  std::thread thread_;
};

}  // namespace store
}  // namespace gnmr
