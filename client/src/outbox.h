// Outbox: what the training thread hands to the I/O thread — step reports
// and acks — in bounded queues that drop their oldest entry when full.
//
// Design notes
// - Reports are preallocated slots (one column per statistic, one row per
//   unit), so the training thread never allocates: it Acquires a free slot,
//   fills it without holding the lock, and Publishes it. Capacity + 2 +
//   `parked` slots exist: `capacity` queued, one being filled, one being
//   sent, `parked` waiting for GPU results (GpuPath), so Acquire always
//   finds one.
// - The queues are fixed rings (no allocation after construction).
// - The I/O thread waits in Wait() until work arrives or Wake() is called
//   (stop, broken stream).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "gnmr/export.h"

namespace gnmr {

// Report::overhead_source values: the numbers of gnmr.v1.OverheadSource
// and of the public OverheadSource (report_wire.cc static_asserts both).
constexpr int kOverheadHostWall = 1;
constexpr int kOverheadCupti = 2;
constexpr int kOverheadUnavailable = 3;

struct Report {
  int64_t step = 0;
  std::vector<double> sumsq;
  std::vector<double> amax;
  std::vector<uint64_t> nonfinite;
  std::vector<uint64_t> zeros;
  // UnitStats::saturated per unit (0 for units without counting tensors);
  // not on the wire yet (StepStats gains its forward columns separately).
  std::vector<uint64_t> saturated;
  // Forward statistics per unit (Client::ObserveForward), for the report's
  // forward columns (docs/statistics.md, "Forward columns"). Sized on first
  // use (ForwardAccumulator::MoveInto); fwd_numel 0: none for that unit.
  // fwd_units == 0: the report carries no forward columns at all.
  std::vector<double> fwd_sumsq;
  std::vector<double> fwd_amax;
  std::vector<uint64_t> fwd_saturated;
  std::vector<uint64_t> fwd_zeros;
  std::vector<uint64_t> fwd_numel;
  // Position of the unit's first forward call among this report's forward
  // units, from 1 (host calls first, then device calls); 0: none.
  std::vector<uint32_t> fwd_order;
  size_t fwd_units = 0;
  // Block figures of the units whose forward tensors were block-scaled
  // (Client::ObserveForwardBlocks; fwd_blocks 0: none), for the report's
  // block columns, sent only when fwd_block_units > 0 (docs/statistics.md,
  // "Block columns"). Sized with the forward columns.
  std::vector<uint64_t> fwd_blocks;
  std::vector<uint64_t> fwd_saturated_blocks;
  std::vector<uint64_t> fwd_dead_blocks;
  std::vector<uint64_t> fwd_scale_clamps;
  size_t fwd_block_units = 0;
  // Source figures of the units whose block-scaled tensors came with their
  // source (fwd_source_numel 0: none), for the report's source columns,
  // sent only when fwd_source_units > 0 (docs/statistics.md, "Source
  // columns"). Sized with the forward columns.
  std::vector<uint64_t> fwd_source_numel;
  std::vector<uint64_t> fwd_underflow;
  std::vector<double> fwd_error_sumsq;
  std::vector<double> fwd_source_sumsq;
  size_t fwd_source_units = 0;
  // Backward statistics per unit (Client::ObserveBackward), for the
  // report's backward columns (docs/statistics.md, "Backward columns"):
  // sized on first use (BackwardAccumulator::MoveInto); bwd_numel 0: none
  // for that unit; bwd_units == 0: no backward columns at all. bwd_order:
  // the position of the unit's first backward call, from 1.
  std::vector<double> bwd_sumsq;
  std::vector<uint64_t> bwd_saturated;
  std::vector<uint64_t> bwd_zeros;
  std::vector<uint64_t> bwd_numel;
  std::vector<uint32_t> bwd_order;
  size_t bwd_units = 0;
  // Per unit: 1 if marked inactive (Client::MarkInactive): left out of the
  // report, which is then sent in the sparse form (docs/statistics.md).
  std::vector<uint8_t> inactive;
  size_t inactive_count = 0;
  double stats_seconds = 0.0;
  double overhead_ratio = 0.0;
  double stats_gpu_seconds = 0.0;           // GPU path: CUDA-event time of the launch
  int overhead_source = kOverheadHostWall;  // gnmr.v1.OverheadSource
  int64_t overhead_step = -1;               // CUPTI: the step overhead_ratio measures
  uint64_t dropped_reports = 0;
  uint64_t missed_decisions = 0;
};

struct AckItem {
  int64_t step = 0;
  uint64_t sequence = 0;
  uint64_t digest = 0;
  bool has_decision = false;
  uint64_t generation = 0;
  bool skip_step = false;
};

// A fixed-capacity FIFO.
template <typename T>
class Ring {
 public:
  explicit Ring(size_t capacity) : items_(capacity) {}
  bool empty() const { return size_ == 0; }
  bool full() const { return size_ == items_.size(); }
  size_t size() const { return size_; }
  const T& front() const { return items_[head_]; }
  void push_back(const T& v) { items_[(head_ + size_++) % items_.size()] = v; }
  void pop_front() {
    head_ = (head_ + 1) % items_.size();
    --size_;
  }

 private:
  std::vector<T> items_;
  size_t head_ = 0;
  size_t size_ = 0;
};

// GNMR_EXPORT: client/local/ calls it across the shared libraries (transport.h).
class GNMR_EXPORT Outbox {
 public:
  Outbox(size_t report_capacity, size_t units, size_t ack_capacity = 256, size_t parked = 0);

  // Training thread.
  Report* Acquire();
  void Abandon(Report* r);  // give back an acquired slot unpublished
  void Drop(Report* r);     // the same, counted as a dropped report
  // Queues `r`, dropping the oldest queued report if full; stamps
  // r->dropped_reports with the cumulative drop count.
  void Publish(Report* r);
  void PushAck(const AckItem& a);  // may drop the oldest queued ack

  // I/O thread. Pop* return false / null when empty; a popped report goes
  // back with Release once written (sent) or lost with its stream (counted
  // as dropped); a popped ack is finished with AckDone. Until then they
  // count as in flight (WaitEmpty waits for them).
  bool PopAck(AckItem* out);
  void AckDone();
  Report* PopReport();
  void Release(Report* r, bool sent);
  // Drops queued reports with step <= `step` (the daemon has decided them
  // already); they count as dropped. Returns how many.
  size_t DropUpTo(int64_t step);
  // Drops everything queued (stop).
  void Clear();

  // Blocks until something is queued, Wake() is called, or `timeout`.
  void Wait(std::chrono::microseconds timeout);
  void Wake();

  // Until nothing is queued nor being sent, or the timeout; true if empty.
  bool WaitEmpty(std::chrono::milliseconds timeout);

  uint64_t reports_dropped() const;
  uint64_t acks_dropped() const;
  size_t queued_reports() const;

 private:
  bool HasWorkLocked() const GNMR_REQUIRES(mu_) { return !reports_.empty() || !acks_.empty(); }

  mutable Mutex mu_;
  std::condition_variable cv_;        // work or wake, for the I/O thread
  std::condition_variable empty_cv_;  // for WaitEmpty
  std::vector<Report> slots_;
  std::vector<Report*> free_ GNMR_GUARDED_BY(mu_);
  Ring<Report*> reports_ GNMR_GUARDED_BY(mu_);
  Ring<AckItem> acks_ GNMR_GUARDED_BY(mu_);
  size_t in_flight_ GNMR_GUARDED_BY(mu_) = 0;
  bool woken_ GNMR_GUARDED_BY(mu_) = false;
  uint64_t reports_dropped_ GNMR_GUARDED_BY(mu_) = 0;
  uint64_t acks_dropped_ GNMR_GUARDED_BY(mu_) = 0;
};

}  // namespace gnmr
