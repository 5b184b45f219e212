#include "daemon/store/snapshot_writer.h"

#include <algorithm>
#include <exception>

#include <spdlog/spdlog.h>

namespace gnmr {
namespace store {

SnapshotWriter::SnapshotWriter(SnapshotStore* store) : store_(store), thread_([this] { Run(); }) {}

SnapshotWriter::~SnapshotWriter() { Stop(); }

bool SnapshotWriter::Submit(const std::string& job_id, v1::ControllerState state,
                            std::string job_meta) {
  {
    MutexLock lock(mu_);
    if (stopping_) return false;
    ++counters_.submitted;
    const uint64_t seq = ++next_seq_;
    auto it = pending_.find(job_id);
    if (it != pending_.end()) {
      ++counters_.superseded;
      it->second.state = std::move(state);
      it->second.meta = std::move(job_meta);
    } else {
      pending_.emplace(job_id, Pending{std::move(state), std::move(job_meta), seq});
      order_.push_back(job_id);
    }
  }
  work_cv_.notify_one();
  return true;
}

bool SnapshotWriter::OutstandingAtOrBefore(uint64_t seq) const {
  if (in_flight_seq_ != 0 && in_flight_seq_ <= seq) return true;
  for (const auto& [job, p] : pending_) {
    if (p.oldest_seq <= seq) return true;
  }
  return false;
}

Status SnapshotWriter::Flush() {
  MutexLock lock(mu_);
  const uint64_t target = next_seq_;
  done_cv_.wait(lock.native(), [&]() GNMR_REQUIRES(mu_) { return !OutstandingAtOrBefore(target); });
  for (const auto& [job, record] : records_) {
    if (!record.last_status.ok()) return record.last_status;
  }
  return Status::Ok();
}

void SnapshotWriter::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

SnapshotWriter::Counters SnapshotWriter::counters() const {
  MutexLock lock(mu_);
  return counters_;
}

std::optional<double> SnapshotWriter::LastSuccessUnix(const std::string& job_id) const {
  MutexLock lock(mu_);
  auto it = records_.find(job_id);
  if (it == records_.end()) return std::nullopt;
  return it->second.last_success_unix;
}

void SnapshotWriter::Forget(const std::string& job_id) {
  MutexLock lock(mu_);
  records_.erase(job_id);
}

void SnapshotWriter::CancelJob(const std::string& job_id) {
  MutexLock lock(mu_);
  if (pending_.erase(job_id) > 0) {
    order_.erase(std::remove(order_.begin(), order_.end(), job_id), order_.end());
    done_cv_.notify_all();  // a Flush may have waited for it
  }
  done_cv_.wait(lock.native(), [&]() GNMR_REQUIRES(mu_) {
    return in_flight_seq_ == 0 || in_flight_job_ != job_id;
  });
  records_.erase(job_id);
}

void SnapshotWriter::Record(const std::string& job_id, const Status& s, double now) {
  JobRecord& record = records_[job_id];
  if (s.ok()) {
    ++counters_.writes;
    record.last_success_unix = now;
    if (!record.last_status.ok()) {
      spdlog::info("snapshot of job '{}' written again", job_id);
    }
  } else {
    ++counters_.failures;
    // Log a job's first failure, not every retry against a broken disk.
    if (record.last_status.ok()) {
      spdlog::error("snapshot of job '{}' failed: {}", job_id, s.ToString());
    }
  }
  record.last_status = s;
}

void SnapshotWriter::Run() {
  MutexLock lock(mu_);
  for (;;) {
    work_cv_.wait(lock.native(),
                  [this]() GNMR_REQUIRES(mu_) { return stopping_ || !order_.empty(); });
    if (order_.empty()) return;  // stopping, and everything is written
    const std::string job_id = std::move(order_.front());
    order_.pop_front();
    Pending p;
    auto it = pending_.find(job_id);
    if (it == pending_.end()) continue;  // cannot happen: order_ mirrors it
    p = std::move(it->second);
    pending_.erase(it);
    in_flight_seq_ = p.oldest_seq;
    in_flight_job_ = job_id;
    lock.Unlock();

    Status s;
    try {
      s = store_->Save(job_id, std::move(p.state), p.meta);
    } catch (const std::exception& e) {
      s = Internal("job " + job_id + ": snapshot write threw: " + e.what());
    } catch (...) {
      s = Internal("job " + job_id + ": snapshot write threw");
    }
    const double now = store_->clock().UnixSeconds();  // the store dates its snapshots
    p = Pending();                                     // free the state outside the lock

    lock.Lock();
    try {
      Record(job_id, s, now);
    } catch (...) {
      ++counters_.failures;  // out of memory while bookkeeping: still go on
    }
    in_flight_seq_ = 0;
    in_flight_job_.clear();
    done_cv_.notify_all();
  }
}

}  // namespace store
}  // namespace gnmr
