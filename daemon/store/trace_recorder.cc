#include "daemon/store/trace_recorder.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <exception>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/glob.h"
#include "common/text.h"
#include "controller/replay/trace_csv.h"
#include "daemon/store/durable_file.h"
#include "daemon/store/event_file.h"
#include "daemon/store/job_dir.h"

namespace gnmr {
namespace store {
namespace {

constexpr char kRotatedSuffix[] = ".1";
constexpr uint64_t kHeaderBytes = sizeof(kTraceHeader) - 1;
// A queued step's bytes besides its samples (the entry, the job id).
constexpr size_t kEntryOverhead = 128;
// About what a row takes besides its unit name (for the file size bound).
constexpr size_t kRowBytes = 128;

// Shortest round-trip text, so the replay reads the very double; the reader
// takes nan and inf in any case and sign.
void AppendValue(std::string* out, double v) {
  if (std::isnan(v)) {
    out->append("nan");
  } else {
    AppendDouble(out, v);  // inf, -inf included
  }
}

// The forward columns: empty for 0 (the reader reads an empty field as 0;
// -0.0 is written), so a sample without forward statistics costs commas.
void AppendForwardValue(std::string* out, double v) {
  out->push_back(',');
  if (v != 0.0 || std::signbit(v)) AppendValue(out, v);
}
void AppendForwardCount(std::string* out, uint64_t v) {
  out->push_back(',');
  if (v != 0) AppendUint(out, v);
}

// One row in kTraceHeader's column order.
void AppendRow(std::string* out, int64_t step, std::string_view unit, const UnitSample& s) {
  AppendInt(out, step);
  out->push_back(',');
  AppendCsvField(out, unit);
  out->push_back(',');
  AppendValue(out, s.sumsq);
  out->push_back(',');
  AppendValue(out, s.amax);
  out->push_back(',');
  AppendUint(out, s.nonfinite);
  out->push_back(',');
  AppendUint(out, s.zeros);
  out->push_back(',');
  AppendUint(out, s.numel);
  AppendForwardValue(out, s.fwd_sumsq);
  AppendForwardValue(out, s.fwd_amax);
  AppendForwardCount(out, s.fwd_saturated);
  AppendForwardCount(out, s.fwd_zeros);
  AppendForwardCount(out, s.fwd_numel);
  AppendForwardCount(out, s.fwd_order);
  AppendForwardCount(out, s.fwd_blocks);
  AppendForwardCount(out, s.fwd_saturated_blocks);
  AppendForwardCount(out, s.fwd_dead_blocks);
  AppendForwardCount(out, s.fwd_scale_clamps);
  AppendForwardCount(out, s.fwd_source_numel);
  AppendForwardCount(out, s.fwd_underflow);
  AppendForwardValue(out, s.fwd_error_sumsq);
  AppendForwardValue(out, s.fwd_source_sumsq);
  AppendForwardValue(out, s.bwd_sumsq);
  AppendForwardCount(out, s.bwd_saturated);
  AppendForwardCount(out, s.bwd_zeros);
  AppendForwardCount(out, s.bwd_numel);
  AppendForwardCount(out, s.bwd_order);
  out->push_back('\n');
}

}  // namespace

TraceRecorder::TraceRecorder(TraceRecorderOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { Run(); });
}

TraceRecorder::~TraceRecorder() { Stop(); }

std::string TraceRecorder::TracePath(const std::string& dir, const std::string& job_id) {
  return dir + "/" + EscapeJobId(job_id) + ".csv";
}

TraceRecorder::Outcome TraceRecorder::Record(const std::string& job_id, int64_t step,
                                             const std::vector<UnitSample>& samples,
                                             const Controller& controller) {
  MutexLock lock(mu_);
  JobState* job = nullptr;
  try {
    auto [it, added] = jobs_.try_emplace(job_id);
    job = &it->second;
    if (added) job->matched = GlobMatch(options_.jobs, job_id);
    if (!job->matched) return Outcome::kNotRecorded;
    const size_t bytes = samples.size() * sizeof(UnitSample) + kEntryOverhead + job_id.size();
    if (!stopping_ && queued_bytes_ + bytes <= options_.max_queued_bytes) {
      // Units are only added while the names hold (an import that replaces
      // them calls ForgetNames), so a changed count is the one sign to watch.
      if (!job->names || job->names->size() != controller.num_units()) {
        auto names = std::make_shared<Names>();
        names->reserve(controller.num_units());
        for (uint32_t id = 0; id < controller.num_units(); ++id) {
          names->push_back(controller.unit(id).name);
        }
        job->names = std::move(names);
      }
      queue_.push_back(Queued{job_id, step, samples, job->names, bytes});
      job->in_gap = false;
      queued_bytes_ += bytes;
      ++queued_seq_;
      ++counters_.steps_queued;
      if (queued_bytes_ * 2 > options_.max_queued_bytes) work_cv_.notify_one();
      return Outcome::kQueued;
    }
  } catch (const std::exception&) {
    // Out of memory: the step is dropped like one that finds the queue
    // full; the decision path goes on.
  }
  ++counters_.steps_dropped;
  if (job == nullptr || job->in_gap) return Outcome::kDropped;
  job->in_gap = true;
  return Outcome::kGapStarted;
}

void TraceRecorder::ForgetNames(const std::string& job_id) {
  MutexLock lock(mu_);
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) it->second.names.reset();
}

void TraceRecorder::RemoveJob(const std::string& job_id) {
  MutexLock lock(mu_);
  jobs_.erase(job_id);
  auto gone = std::remove_if(queue_.begin(), queue_.end(),
                             [&](const Queued& q) { return q.job_id == job_id; });
  for (auto q = gone; q != queue_.end(); ++q) {
    queued_bytes_ -= q->bytes;
    ++done_seq_;
  }
  queue_.erase(gone, queue_.end());
  removals_.push_back(job_id);
  work_cv_.notify_one();
  done_cv_.notify_all();
}

Status TraceRecorder::Flush() {
  MutexLock lock(mu_);
  const uint64_t target = queued_seq_;
  flush_target_ = std::max(flush_target_, target);
  work_cv_.notify_one();
  done_cv_.wait(lock.native(), [&]() GNMR_REQUIRES(mu_) { return done_seq_ >= target; });
  Status s = flush_error_;
  flush_error_ = Status::Ok();
  return s;
}

void TraceRecorder::Stop() {
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    work_cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

TraceRecorder::Counters TraceRecorder::counters() const {
  MutexLock lock(mu_);
  return counters_;
}

void TraceRecorder::Run() {
  for (;;) {
    std::vector<Queued> batch;
    std::vector<std::string> removals;
    bool stop = false;
    {
      MutexLock lock(mu_);
      work_cv_.wait_for(lock.native(), options_.flush_interval, [&]() GNMR_REQUIRES(mu_) {
        return stopping_ || !removals_.empty() || flush_target_ > done_seq_ ||
               queued_bytes_ * 2 > options_.max_queued_bytes;
      });
      batch.swap(queue_);
      removals.swap(removals_);
      queued_bytes_ = 0;
      stop = stopping_;
    }
    try {
      for (const std::string& job_id : removals) CloseJob(job_id);
      WriteBatch(&batch);
    } catch (const std::exception& e) {
      spdlog::error("trace recorder: {} ({} step(s) lost)", e.what(), batch.size());
      MutexLock lock(mu_);
      counters_.steps_failed += batch.size();
    } catch (...) {
      spdlog::error("trace recorder: unknown error ({} step(s) lost)", batch.size());
      MutexLock lock(mu_);
      counters_.steps_failed += batch.size();
    }
    {
      MutexLock lock(mu_);
      done_seq_ += batch.size();
      done_cv_.notify_all();
      if (stop && queue_.empty()) break;
    }
  }
  try {
    for (auto& [job_id, f] : files_) CloseFile(&f);
    files_.clear();
  } catch (...) {
  }
  MutexLock lock(mu_);
  done_seq_ = queued_seq_;  // nothing is written after this
  done_cv_.notify_all();
}

void TraceRecorder::WriteBatch(std::vector<Queued>* batch) {
  std::vector<std::string> touched;
  for (const Queued& q : *batch) {
    auto [it, added] = files_.try_emplace(q.job_id);
    if (it->second.pending.empty()) touched.push_back(q.job_id);
    Add(q, &it->second);
  }
  for (const std::string& job_id : touched) {
    auto it = files_.find(job_id);
    if (it != files_.end()) WritePending(job_id, &it->second);
  }
}

void TraceRecorder::Add(const Queued& q, File* f) {
  size_t estimate = 0;
  for (const UnitSample& s : q.samples) {
    estimate += kRowBytes + (s.unit_id < q.names->size() ? 2 * (*q.names)[s.unit_id].size() : 0);
  }
  const bool first_in_process = f->last_step < 0;
  const bool steps_back = f->last_step >= 0 && q.step <= f->last_step;
  // A step larger than the bound still goes into a file of its own.
  const uint64_t used = f->size + f->pending.size();
  const bool full = used > kHeaderBytes && used + estimate > options_.max_file_bytes;
  if (first_in_process || steps_back || full) {
    WritePending(q.job_id, f);  // the steps before it end the current file
    f->start_new = true;
    f->size = kHeaderBytes;
  }
  for (const UnitSample& s : q.samples) {
    if (s.unit_id >= q.names->size()) continue;  // cannot happen: names follow the controller
    AppendRow(&f->pending, q.step, (*q.names)[s.unit_id], s);
  }
  f->last_step = q.step;
  ++f->pending_steps;
}

void TraceRecorder::WritePending(const std::string& job_id, File* f) {
  if (f->pending.empty() && f->pending_steps == 0) return;
  const std::string path = TracePath(options_.dir, job_id);
  Status s;
  if (f->start_new) {
    s = OpenFile(job_id, f, /*rotate=*/true);
  } else if (f->fd < 0) {  // closed over the budget or after a write error: append
    s = OpenFile(job_id, f, /*rotate=*/false);
  }
  if (s.ok()) s = WriteAll(f->fd, f->pending, path);
  if (s.ok()) {
    f->size += f->pending.size();
    open_.splice(open_.end(), open_, f->lru);  // the most recently written
  } else {
    CloseFile(f);  // reopened (appending) by the next step: that repairs a torn line
  }
  Book(job_id, s, f->pending_steps, s.ok() ? f->pending.size() : 0);
  f->pending.clear();
  f->pending_steps = 0;
}

Status TraceRecorder::OpenFile(const std::string& job_id, File* f, bool rotate) {
  CloseFile(f);
  // Within the budget: the least recently written file makes room.
  while (!open_.empty() && open_.size() >= std::max<size_t>(options_.max_open_files, 1)) {
    auto lru = files_.find(open_.front());
    if (lru == files_.end()) {
      open_.pop_front();  // cannot happen: a job leaves open_ when its file closes
    } else {
      CloseFile(&lru->second);
    }
  }
  GNMR_RETURN_IF_ERROR(MakeDirs(options_.dir));
  const std::string path = TracePath(options_.dir, job_id);
  if (rotate) {
    if (::rename(path.c_str(), (path + kRotatedSuffix).c_str()) == 0) {
      MutexLock lock(mu_);
      ++counters_.rotations;
    } else if (errno != ENOENT) {
      return ErrnoStatus("rename " + path + " " + path + kRotatedSuffix, errno);
    }
    // Done: should the open fail, the next write appends to the new file
    // rather than rotate again, which would move it over the old one.
    f->start_new = false;
  }
  uint64_t size = 0;
  StatusOr<int> fd = OpenForAppend(path, &size);
  if (!fd.ok()) return fd.status();
  f->fd = *fd;
  f->lru = open_.insert(open_.end(), job_id);
  f->size = size;
  if (size == 0) {
    Status s = WriteAll(f->fd, kTraceHeader, path);
    if (!s.ok()) {
      CloseFile(f);
      return s;
    }
    f->size = kHeaderBytes;
  }
  return Status::Ok();
}

void TraceRecorder::CloseFile(File* f) {
  if (f->fd < 0) return;
  ::close(f->fd);
  f->fd = -1;
  open_.erase(f->lru);
}

void TraceRecorder::CloseJob(const std::string& job_id) {
  auto it = files_.find(job_id);
  if (it == files_.end()) return;
  CloseFile(&it->second);
  files_.erase(it);
  failing_.erase(job_id);
}

void TraceRecorder::Book(const std::string& job_id, const Status& s, uint64_t steps,
                         uint64_t bytes) {
  bool& failing = failing_[job_id];
  if (s.ok() && failing) {
    spdlog::info("trace of job '{}' writable again", EscapeForLog(job_id));
  } else if (!s.ok() && !failing) {
    spdlog::error(
        "trace of job '{}': {} (its steps are missing from the trace until writes "
        "succeed again)",
        EscapeForLog(job_id), s.ToString());
  }
  failing = !s.ok();
  MutexLock lock(mu_);
  if (s.ok()) {
    counters_.steps_written += steps;
    counters_.bytes_written += bytes;
  } else {
    counters_.steps_failed += steps;
    if (flush_error_.ok()) flush_error_ = s;
  }
}

}  // namespace store
}  // namespace gnmr
