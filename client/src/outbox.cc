#include "client/src/outbox.h"

namespace gnmr {

Outbox::Outbox(size_t report_capacity, size_t units, size_t ack_capacity, size_t parked)
    : slots_(report_capacity + 2 + parked), reports_(report_capacity), acks_(ack_capacity) {
  free_.reserve(slots_.size());
  for (Report& r : slots_) {
    r.sumsq.resize(units);
    r.amax.resize(units);
    r.nonfinite.resize(units);
    r.zeros.resize(units);
    r.saturated.resize(units);
    r.inactive.resize(units);
    free_.push_back(&r);
  }
}

Report* Outbox::Acquire() {
  MutexLock lock(mu_);
  Report* r = free_.back();  // never empty, see the header
  free_.pop_back();
  return r;
}

void Outbox::Abandon(Report* r) {
  MutexLock lock(mu_);
  free_.push_back(r);
}

void Outbox::Drop(Report* r) {
  MutexLock lock(mu_);
  free_.push_back(r);
  ++reports_dropped_;
}

void Outbox::Publish(Report* r) {
  {
    MutexLock lock(mu_);
    if (reports_.full()) {
      free_.push_back(reports_.front());
      reports_.pop_front();
      ++reports_dropped_;
    }
    r->dropped_reports = reports_dropped_;
    reports_.push_back(r);
  }
  cv_.notify_one();
}

void Outbox::PushAck(const AckItem& a) {
  {
    MutexLock lock(mu_);
    if (acks_.full()) {
      acks_.pop_front();
      ++acks_dropped_;
    }
    acks_.push_back(a);
  }
  cv_.notify_one();
}

bool Outbox::PopAck(AckItem* out) {
  MutexLock lock(mu_);
  if (acks_.empty()) return false;
  *out = acks_.front();
  acks_.pop_front();
  ++in_flight_;
  return true;
}

void Outbox::AckDone() {
  MutexLock lock(mu_);
  --in_flight_;
  if (!HasWorkLocked() && in_flight_ == 0) empty_cv_.notify_all();
}

Report* Outbox::PopReport() {
  MutexLock lock(mu_);
  if (reports_.empty()) return nullptr;
  Report* r = reports_.front();
  reports_.pop_front();
  ++in_flight_;
  return r;
}

void Outbox::Release(Report* r, bool sent) {
  MutexLock lock(mu_);
  free_.push_back(r);
  if (!sent) ++reports_dropped_;
  --in_flight_;
  if (!HasWorkLocked() && in_flight_ == 0) empty_cv_.notify_all();
}

size_t Outbox::DropUpTo(int64_t step) {
  MutexLock lock(mu_);
  size_t n = 0;
  while (!reports_.empty() && reports_.front()->step <= step) {
    free_.push_back(reports_.front());
    reports_.pop_front();
    ++n;
  }
  reports_dropped_ += n;
  if (!HasWorkLocked() && in_flight_ == 0) empty_cv_.notify_all();
  return n;
}

void Outbox::Clear() {
  MutexLock lock(mu_);
  reports_dropped_ += reports_.size();
  acks_dropped_ += acks_.size();
  while (!reports_.empty()) {
    free_.push_back(reports_.front());
    reports_.pop_front();
  }
  while (!acks_.empty()) acks_.pop_front();
  if (in_flight_ == 0) empty_cv_.notify_all();
}

void Outbox::Wait(std::chrono::microseconds timeout) {
  MutexLock lock(mu_);
  cv_.wait_for(lock.native(), timeout,
               [this]() GNMR_REQUIRES(mu_) { return HasWorkLocked() || woken_; });
  woken_ = false;
}

void Outbox::Wake() {
  {
    MutexLock lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
  empty_cv_.notify_all();
}

bool Outbox::WaitEmpty(std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  return empty_cv_.wait_for(lock.native(), timeout, [this]() GNMR_REQUIRES(mu_) {
    return !HasWorkLocked() && in_flight_ == 0;
  });
}

uint64_t Outbox::reports_dropped() const {
  MutexLock lock(mu_);
  return reports_dropped_;
}

uint64_t Outbox::acks_dropped() const {
  MutexLock lock(mu_);
  return acks_dropped_;
}

size_t Outbox::queued_reports() const {
  MutexLock lock(mu_);
  return reports_.size();
}

}  // namespace gnmr
