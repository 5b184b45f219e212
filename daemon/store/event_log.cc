// EventLog (event_log.h), what the callers' threads run: appending to the
// buffer and the in-memory rings, List, ReloadTail, Flush, RemoveJob and
// the memory bounds. The writer thread is in event_log_writer.cc.
#include "daemon/store/event_log.h"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/unit_name.h"
#include "controller/publish/event_json.h"
#include "daemon/store/event_file.h"
#include "daemon/store/job_dir.h"

namespace gnmr {
namespace store {
namespace {

constexpr char kEventsName[] = "events.jsonl";

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
  for (const std::string& file : {path, RotatedPath(path)}) {
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
    return RemoveWithRotated(EventsPath(job_id));
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

}  // namespace store
}  // namespace gnmr
