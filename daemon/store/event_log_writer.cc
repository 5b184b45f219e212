// EventLog's writer thread (event_log.h): it takes the buffered events in
// batches, appends each job's lines to its events.jsonl, rotates full files,
// syncs for Flush and closes or deletes a removed job's files. Apart from
// event_log.cc, which holds what the callers' threads run (Append, List,
// ReloadTail, Flush, RemoveJob), because everything here runs on the writer
// alone and touches the open files (files_, failing_, rotation_failing_)
// that no other thread reads.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <unordered_map>
#include <utility>

#include <spdlog/spdlog.h>

#include "controller/publish/event_json.h"
#include "daemon/store/durable_file.h"
#include "daemon/store/event_file.h"
#include "daemon/store/event_log.h"
#include "daemon/store/job_dir.h"

namespace gnmr {
namespace store {

void EventLog::Run() {
  MutexLock lock(mu_);
  for (;;) {
    work_cv_.wait_for(lock.native(), options_.flush_interval, [this]() GNMR_REQUIRES(mu_) {
      return stopping_ || flush_target_ > synced_seq_ ||
             buffer_.size() >= options_.max_buffered / 2 ||
             buffer_bytes_ >= options_.max_buffered_bytes / 2 || !removals_.empty();
    });
    const bool stop = stopping_;
    const bool sync = stop || flush_target_ > synced_seq_;
    std::vector<Buffered> batch;
    batch.swap(buffer_);
    std::vector<std::pair<std::string, bool>> removals;
    removals.swap(removals_);
    buffer_bytes_ = 0;
    const uint64_t through = buffered_seq_;
    lock.Unlock();

    BatchResult r;
    try {
      r = WriteBatch(batch, removals);
      if (sync) {
        Status s = SyncOpenFiles();
        if (r.error.ok()) r.error = s;
      }
      if (stop) CloseFiles();
    } catch (const std::exception& e) {
      r.error = Internal(std::string("event log writer: ") + e.what());
    } catch (...) {
      r.error = Internal("event log writer: unknown exception");
    }
    batch.clear();
    CompleteRemovals(removals);

    lock.Lock();
    counters_.written += r.written;
    counters_.write_failures += r.failed;
    if (!r.error.ok() && flush_error_.ok()) flush_error_ = r.error;
    if (sync) {
      synced_seq_ = through;
      done_cv_.notify_all();
    }
    if (stop) {  // stopping_: nothing more is buffered
      // A removal requested since the swap above is done here: from now on
      // RemoveJob works alone (writer_done_).
      while (!removals_.empty()) {
        removals.clear();
        removals.swap(removals_);
        lock.Unlock();
        CompleteRemovals(removals);
        lock.Lock();
      }
      writer_done_ = true;
      return;
    }
  }
}

void EventLog::CompleteRemovals(const std::vector<std::pair<std::string, bool>>& removals) {
  if (removals.empty()) return;
  std::vector<Status> outcomes;
  for (const auto& [job_id, delete_files] : removals) {
    try {
      outcomes.push_back(RemoveFiles(job_id, delete_files));
    } catch (...) {
      outcomes.push_back(Internal("event log of job '" + job_id + "': removal failed"));
    }
  }
  MutexLock lock(mu_);
  for (size_t i = 0; i < removals.size(); ++i) removed_[removals[i].first] = outcomes[i];
  done_cv_.notify_all();
}

Status EventLog::RemoveFiles(const std::string& job_id, bool delete_files) {
  auto it = files_.find(job_id);
  if (it != files_.end()) {
    ::close(it->second.fd);
    files_.erase(it);
  }
  failing_.erase(job_id);
  rotation_failing_.erase(job_id);
  if (!delete_files) return Status::Ok();
  return RemoveWithRotated(EventsPath(job_id));
}

EventLog::BatchResult EventLog::WriteBatch(
    const std::vector<Buffered>& batch, const std::vector<std::pair<std::string, bool>>& removed) {
  // Group by job, keeping each job's order: one write per job.
  std::vector<std::string> order;
  std::unordered_map<std::string, std::pair<std::string, uint64_t>> jobs;
  for (const Buffered& b : batch) {
    if (std::any_of(removed.begin(), removed.end(),
                    [&](const auto& r) { return r.first == b.job_id; })) {
      continue;
    }
    auto [it, added] = jobs.try_emplace(b.job_id);
    if (added) order.push_back(b.job_id);
    AppendEventJsonLine(b.job_id, b.event, &it->second.first);
    ++it->second.second;
  }
  BatchResult r;
  for (const std::string& job_id : order) {
    const auto& [lines, count] = jobs[job_id];
    Status s = WriteJob(job_id, lines);
    bool& failing = failing_[job_id];
    if (s.ok()) {
      r.written += count;
      if (failing) spdlog::info("event log of job '{}' writable again", job_id);
    } else {
      r.failed += count;
      if (!failing) {
        spdlog::error(
            "event log of job '{}': {} (its events reach only the "
            "in-memory window until writes succeed again)",
            job_id, s.ToString());
      }
      if (r.error.ok()) r.error = s;
    }
    failing = !s.ok();
  }
  return r;
}

Status EventLog::WriteJob(const std::string& job_id, const std::string& lines) {
  const std::string path = EventsPath(job_id);
  auto it = files_.find(job_id);
  if (it == files_.end()) {
    if (files_.size() >= options_.max_open_files) {
      Status s = SyncOpenFiles();  // Flush must still cover them
      CloseFiles();
      if (!s.ok()) return s;
    }
    GNMR_RETURN_IF_ERROR(MakeDirs(JobDir(state_dir_, job_id)));
    OpenFile file;
    StatusOr<int> fd = OpenForAppend(path, &file.size);
    if (!fd.ok()) return fd.status();
    file.fd = *fd;
    it = files_.emplace(job_id, file).first;
  }
  if (it->second.size > 0 && it->second.size + lines.size() > options_.max_file_bytes) {
    Status s = Rotate(job_id, &it->second);
    // On failure the full file takes the events rather than lose them, and
    // the next write tries again (logged once until a rotation succeeds).
    if (!s.ok() && rotation_failing_.insert(job_id).second) {
      spdlog::warn("event log of job '{}': rotation failed: {}", job_id, s.ToString());
    }
    if (s.ok()) rotation_failing_.erase(job_id);
    it = files_.find(job_id);  // a failed reopen left no file
    if (it == files_.end()) return s;
  }
  Status s = WriteAll(it->second.fd, lines, path);
  if (!s.ok()) {
    // Reopen next time: that also repairs a torn last line.
    ::close(it->second.fd);
    files_.erase(it);
    return s;
  }
  it->second.size += lines.size();
  return s;
}

Status EventLog::Rotate(const std::string& job_id, OpenFile* file) {
  const std::string path = EventsPath(job_id);
  // Synced first: the rotated file is complete on disk before its name
  // changes (a Flush after this covers only the new file).
  if (::fdatasync(file->fd) != 0) return ErrnoStatus("fdatasync " + path, errno);
  const std::string rotated = RotatedPath(path);
  if (::rename(path.c_str(), rotated.c_str()) != 0) {
    return ErrnoStatus("rename " + path + " " + rotated, errno);
  }
  ::close(file->fd);
  file->fd = -1;
  file->size = 0;
  StatusOr<int> fd = OpenForAppend(path, &file->size);
  if (!fd.ok()) {
    files_.erase(job_id);  // `file` is gone: WriteJob must not use it
    return fd.status();
  }
  file->fd = *fd;
  MutexLock lock(mu_);
  ++counters_.rotations;
  return Status::Ok();
}

Status EventLog::SyncOpenFiles() {
  Status result;
  for (const auto& [job_id, file] : files_) {
    if (::fdatasync(file.fd) != 0 && result.ok()) {
      result = Internal("fdatasync events of job '" + job_id + "' failed");
    }
  }
  return result;
}

void EventLog::CloseFiles() {
  for (const auto& [job_id, file] : files_) ::close(file.fd);
  files_.clear();
}

}  // namespace store
}  // namespace gnmr
