#include "daemon/store/event_log.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "common/unit_name.h"
#include "common/wall_clock.h"
#include "daemon/store/durable_file.h"
#include "daemon/store/event_file.h"
#include "daemon/store/event_json.h"
#include "daemon/store/job_dir.h"

namespace gnmr {
namespace store {
namespace {

constexpr char kEventsName[] = "events.jsonl";
// As the file caps them (event_json.cc); the unit is a unit name and the
// kind one of a few words. Job ids are 1..128 bytes (the wire contract).
constexpr size_t kMaxDetailBytes = 1024;
constexpr size_t kMaxUnitBytes = kMaxUnitNameBytes;
constexpr size_t kMaxKindBytes = 64;
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
  return sizeof(v1::Event) + StringBytes(e.kind().capacity()) +
         StringBytes(e.unit().capacity()) + StringBytes(e.detail().capacity());
}

size_t MaxEventMemoryBytes() {
  // Capacities may exceed sizes (growth): at most twice.
  return sizeof(v1::Event) + StringBytes(2 * kMaxKindBytes) + StringBytes(2 * kMaxUnitBytes) +
         StringBytes(2 * kMaxDetailBytes);
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
  while (ring->events.size() > 1 && (ring->events.size() > options_.ring_capacity ||
                                     ring->bytes > options_.ring_bytes)) {
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

size_t EventLog::Append(const std::string& job_id,
                        std::vector<v1::Event> events) {
  const double now = UnixNowSeconds();
  for (v1::Event& e : events) {
    if (e.time_unix() == 0) e.set_time_unix(now);
    // Internal strings, capped as the file caps them, so that an event's
    // bytes are bounded (MaxEventMemoryBytes).
    if (e.detail().size() > kMaxDetailBytes) {
      e.set_detail(SanitizeUtf8(e.detail(), kMaxDetailBytes));
    }
    if (e.unit().size() > kMaxUnitBytes) e.set_unit(SanitizeUtf8(e.unit(), kMaxUnitBytes));
    if (e.kind().size() > kMaxKindBytes) e.set_kind(SanitizeUtf8(e.kind(), kMaxKindBytes));
  }
  size_t buffered = 0;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
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

std::vector<v1::Event> EventLog::List(const std::string& job_id,
                                      int64_t since_step,
                                      uint32_t limit) const {
  const size_t want = limit == 0 ? kDefaultListLimit : limit;
  std::vector<v1::Event> out;
  std::lock_guard<std::mutex> lock(mu_);
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
  auto ring_in_use = [&] {
    auto it = rings_.find(job_id);
    return it != rings_.end() && !it->second.events.empty();
  };
  const Status in_use = FailedPrecondition("event log of job '" + job_id +
                                           "' already has events in memory");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ring_in_use()) return in_use;
  }
  const std::string path = JobDir(state_dir_, job_id) + "/" + kEventsName;
  StatusOr<std::vector<std::string>> lines =
      ReadTailLines(path, options_.ring_capacity,
                    options_.ring_capacity * kMaxEventLineBytes);
  if (!lines.ok()) {
    return lines.status().code() == StatusCode::kNotFound ? Status::Ok()
                                                          : lines.status();
  }
  Ring ring;
  uint64_t skipped = 0;
  for (const std::string& line : *lines) {
    StatusOr<v1::Event> e = ParseEventJsonLine(line);
    if (e.ok()) {
      ring.bytes += EventMemoryBytes(*e);
      ring.events.push_back(std::move(e.value()));
      Trim(&ring);
    } else {
      ++skipped;
    }
  }
  if (skipped > 0) {
    spdlog::warn("{}: skipped {} unreadable event line(s)", path, skipped);
  }
  std::lock_guard<std::mutex> lock(mu_);
  counters_.reload_skipped += skipped;
  if (ring_in_use()) return in_use;
  rings_[job_id] = std::move(ring);
  return Status::Ok();
}

Status EventLog::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = buffered_seq_;
  flush_target_ = std::max(flush_target_, target);
  work_cv_.notify_one();
  done_cv_.wait(lock, [&] { return synced_seq_ >= target; });
  Status s = std::move(flush_error_);
  flush_error_ = Status::Ok();
  return s;
}

void EventLog::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EventLog::ForgetJob(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  rings_.erase(job_id);
}

EventLog::Counters EventLog::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void EventLog::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait_for(lock, options_.flush_interval, [this] {
      return stopping_ || flush_target_ > synced_seq_ ||
             buffer_.size() >= options_.max_buffered / 2 ||
             buffer_bytes_ >= options_.max_buffered_bytes / 2;
    });
    const bool stop = stopping_;
    const bool sync = stop || flush_target_ > synced_seq_;
    std::vector<Buffered> batch;
    batch.swap(buffer_);
    buffer_bytes_ = 0;
    const uint64_t through = buffered_seq_;
    lock.unlock();

    BatchResult r;
    try {
      r = WriteBatch(batch);
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

    lock.lock();
    counters_.written += r.written;
    counters_.write_failures += r.failed;
    if (!r.error.ok() && flush_error_.ok()) flush_error_ = r.error;
    if (sync) {
      synced_seq_ = through;
      done_cv_.notify_all();
    }
    if (stop) return;  // stopping_: nothing more is buffered
  }
}

EventLog::BatchResult EventLog::WriteBatch(const std::vector<Buffered>& batch) {
  // Group by job, keeping each job's order: one write per job.
  std::vector<std::string> order;
  std::unordered_map<std::string, std::pair<std::string, uint64_t>> jobs;
  for (const Buffered& b : batch) {
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
  const std::string dir = JobDir(state_dir_, job_id);
  const std::string path = dir + "/" + kEventsName;
  auto it = files_.find(job_id);
  if (it == files_.end()) {
    if (files_.size() >= options_.max_open_files) {
      Status s = SyncOpenFiles();  // Flush must still cover them
      CloseFiles();
      if (!s.ok()) return s;
    }
    Status s = MakeDirs(dir);
    if (!s.ok()) return s;
    StatusOr<int> fd = OpenForAppend(path);
    if (!fd.ok()) return fd.status();
    it = files_.emplace(job_id, *fd).first;
  }
  Status s = WriteAll(it->second, lines, path);
  if (!s.ok()) {
    // Reopen next time: that also repairs a torn last line.
    ::close(it->second);
    files_.erase(it);
  }
  return s;
}

Status EventLog::SyncOpenFiles() {
  Status result;
  for (const auto& [job_id, fd] : files_) {
    if (::fdatasync(fd) != 0 && result.ok()) {
      result = Internal("fdatasync events of job '" + job_id + "' failed");
    }
  }
  return result;
}

void EventLog::CloseFiles() {
  for (const auto& [job_id, fd] : files_) ::close(fd);
  files_.clear();
}

}  // namespace store
}  // namespace gnmr
