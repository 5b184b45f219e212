#include "daemon/store/event_log.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/unit_name.h"
#include "controller/publish/event_json.h"
#include "daemon/store/durable_file.h"
#include "daemon/store/event_file.h"
#include "daemon/store/job_dir.h"

namespace gnmr {
namespace store {
namespace {

constexpr char kEventsName[] = "events.jsonl";
constexpr char kRotatedSuffix[] = ".1";

// Unlinks `path`; a missing file is fine.
Status RemoveIfPresent(const std::string& path) {
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return Status::Ok();
  return ErrnoStatus("unlink " + path, errno);
}

// As the file caps them (event_json.cc); the unit is a unit name. Job ids
// are 1..128 bytes (the wire contract).
constexpr size_t kMaxDetailBytes = 1024;
constexpr size_t kMaxUnitBytes = kMaxUnitNameBytes;
constexpr size_t kMaxJobIdBytes = 128;

// A string's heap bytes: protobuf holds a non-empty string as a heap
// std::string, whose characters are on the heap beyond 15 bytes; each
// allocation costs its malloc header.
size_t StringBytes(size_t capacity) {
  if (capacity == 0) return 0;
  return sizeof(std::string) + 16 + (capacity > 15 ? capacity + 1 + 16 : 0);
}

}  // namespace

size_t EventMemoryBytes(const v1::Event& e) {
  return sizeof(v1::Event) + StringBytes(e.unit().capacity()) + StringBytes(e.detail().capacity());
}

size_t MaxEventMemoryBytes() {
  // Capacities may exceed sizes (growth): at most twice.
  return sizeof(v1::Event) + StringBytes(2 * kMaxUnitBytes) + StringBytes(2 * kMaxDetailBytes);
}

size_t RingMemoryBound(const EventLogOptions& o) {
  const size_t by_count = o.ring_capacity * MaxEventMemoryBytes();
  const size_t by_bytes = o.ring_bytes + MaxEventMemoryBytes();
  // The deque's own blocks: a few pointers per element.
  return std::min(by_count, by_bytes) + 16 * std::min(o.ring_capacity, o.ring_bytes / 64);
}

size_t EventLog::MemoryBound(const EventLogOptions& o) {
  // The buffer and the batch swapped out of it for the writer, each at most
  // max_buffered_bytes plus one event and its job id; the batch's lines
  // (JSON: at most kMaxEventLineBytes an event, and ~2 bytes per byte).
  const size_t one = MaxEventMemoryBytes() + StringBytes(kMaxJobIdBytes);
  const size_t buffered = std::min(o.max_buffered * one, o.max_buffered_bytes + one);
  return 2 * buffered + 2 * buffered;
}

void EventLog::Trim(Ring* ring) const {
  while (ring->events.size() > 1 &&
         (ring->events.size() > options_.ring_capacity || ring->bytes > options_.ring_bytes)) {
    ring->bytes -= EventMemoryBytes(ring->events.front());
    ring->events.pop_front();
  }
}

EventLog::EventLog(std::string state_dir, EventLogOptions options)
    : state_dir_(std::move(state_dir)), options_(options) {
  thread_ = std::thread([this] { Run(); });
}

EventLog::~EventLog() { Stop(); }

bool EventLog::Append(const std::string& job_id, v1::Event event) {
  return Append(job_id, std::vector<v1::Event>{std::move(event)}) == 1;
}

size_t EventLog::Append(const std::string& job_id, std::vector<v1::Event> events) {
  const double now = options_.clock->UnixSeconds();
  for (v1::Event& e : events) {
    if (e.time_unix() == 0) e.set_time_unix(now);
    // Internal strings, capped as the file caps them, so that an event's
    // bytes are bounded (MaxEventMemoryBytes).
    if (e.detail().size() > kMaxDetailBytes) {
      e.set_detail(SanitizeUtf8(e.detail(), kMaxDetailBytes));
    }
    if (e.unit().size() > kMaxUnitBytes) e.set_unit(SanitizeUtf8(e.unit(), kMaxUnitBytes));
  }
  size_t buffered = 0;
  bool wake = false;
  {
    MutexLock lock(mu_);
    Ring& ring = rings_[job_id];
    for (v1::Event& e : events) {
      ++counters_.appended;
      const size_t bytes = EventMemoryBytes(e);
      const size_t entry = bytes + StringBytes(job_id.capacity());
      if (!stopping_ && buffer_.size() < options_.max_buffered &&
          buffer_bytes_ + entry <= options_.max_buffered_bytes) {
        buffer_.push_back({job_id, e});
        buffer_bytes_ += entry;
        ++buffered_seq_;
        ++buffered;
      } else {
        ++counters_.dropped;
      }
      ring.events.push_back(std::move(e));
      ring.bytes += bytes;
      Trim(&ring);
    }
    wake = buffer_.size() >= options_.max_buffered / 2 ||
           buffer_bytes_ >= options_.max_buffered_bytes / 2;
  }
  if (wake) work_cv_.notify_one();
  return buffered;
}

std::vector<v1::Event> EventLog::List(const std::string& job_id, int64_t since_step,
                                      uint32_t limit) const {
  const size_t want = limit == 0 ? kDefaultListLimit : limit;
  std::vector<v1::Event> out;
  MutexLock lock(mu_);
  auto it = rings_.find(job_id);
  if (it == rings_.end()) return out;
  for (auto e = it->second.events.rbegin(); e != it->second.events.rend(); ++e) {
    if (out.size() >= want) break;
    if (e->observed_step() >= since_step) out.push_back(*e);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

Status EventLog::ReloadTail(const std::string& job_id) {
  auto ring_in_use = [&]() GNMR_REQUIRES(mu_) {
    auto it = rings_.find(job_id);
    return it != rings_.end() && !it->second.events.empty();
  };
  const Status in_use =
      FailedPrecondition("event log of job '" + job_id + "' already has events in memory");
  {
    MutexLock lock(mu_);
    if (ring_in_use()) return in_use;
  }
  // The newest events from the current file, then the rotated one for as
  // many more as the ring holds.
  const std::string path = EventsPath(job_id);
  std::deque<v1::Event> events;
  uint64_t skipped = 0;
  for (const std::string& file : {path, path + kRotatedSuffix}) {
    const size_t want = options_.ring_capacity - events.size();
    if (want == 0) break;
    StatusOr<std::vector<std::string>> lines = ReadTailLines(file, want, want * kMaxEventLineBytes);
    if (!lines.ok()) {
      if (lines.status().code() == StatusCode::kNotFound) continue;
      return lines.status();
    }
    uint64_t skipped_here = 0;
    for (auto line = lines->rbegin(); line != lines->rend(); ++line) {
      StatusOr<v1::Event> e = ParseEventJsonLine(*line);
      if (e.ok()) {
        events.push_front(std::move(e.value()));
      } else {
        ++skipped_here;
      }
    }
    if (skipped_here > 0) {
      spdlog::warn("{}: skipped {} unreadable event line(s)", file, skipped_here);
    }
    skipped += skipped_here;
  }
  // Oldest first, bounded as appends are (ring_capacity, ring_bytes).
  Ring ring;
  for (v1::Event& e : events) {
    ring.bytes += EventMemoryBytes(e);
    ring.events.push_back(std::move(e));
    Trim(&ring);
  }
  MutexLock lock(mu_);
  counters_.reload_skipped += skipped;
  if (ring_in_use()) return in_use;
  rings_[job_id] = std::move(ring);
  return Status::Ok();
}

Status EventLog::Flush() {
  MutexLock lock(mu_);
  const uint64_t target = buffered_seq_;
  flush_target_ = std::max(flush_target_, target);
  work_cv_.notify_one();
  done_cv_.wait(lock.native(), [&]() GNMR_REQUIRES(mu_) { return synced_seq_ >= target; });
  Status s = std::move(flush_error_);
  flush_error_ = Status::Ok();
  return s;
}

void EventLog::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status EventLog::RemoveJob(const std::string& job_id, bool delete_files) {
  MutexLock lock(mu_);
  rings_.erase(job_id);
  buffer_.erase(std::remove_if(buffer_.begin(), buffer_.end(),
                               [&](const Buffered& b) { return b.job_id == job_id; }),
                buffer_.end());
  if (writer_done_) {  // no writer, and it closed every file when it stopped
    lock.Unlock();
    if (!delete_files) return Status::Ok();
    Status s = RemoveIfPresent(EventsPath(job_id));
    Status t = RemoveIfPresent(EventsPath(job_id) + kRotatedSuffix);
    return s.ok() ? t : s;
  }
  removed_.erase(job_id);
  removals_.emplace_back(job_id, delete_files);
  work_cv_.notify_one();
  done_cv_.wait(lock.native(), [&]() GNMR_REQUIRES(mu_) { return removed_.count(job_id) > 0; });
  Status s = std::move(removed_[job_id]);
  removed_.erase(job_id);
  return s;
}

std::string EventLog::EventsPath(const std::string& job_id) const {
  return JobDir(state_dir_, job_id) + "/" + kEventsName;
}

EventLog::Counters EventLog::counters() const {
  MutexLock lock(mu_);
  return counters_;
}

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
  Status s = RemoveIfPresent(EventsPath(job_id));
  Status t = RemoveIfPresent(EventsPath(job_id) + kRotatedSuffix);
  return s.ok() ? t : s;
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
  if (::rename(path.c_str(), (path + kRotatedSuffix).c_str()) != 0) {
    return ErrnoStatus("rename " + path + " " + path + kRotatedSuffix, errno);
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
