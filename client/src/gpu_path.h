// GpuPath: the device half of the client (docs/statistics.md, "What a rank
// computes per unit"). Units whose tensors live on a CUDA device are computed
// by a DeviceStatsBackend on the caller's stream; the report slot of that step
// waits here ("parked", host units already filled in) until the I/O thread, or
// the next Observe, finds the launch complete, copies the device columns in,
// and, once the step's device forward tensors (DeviceForward) have their
// results too, adds their rows and publishes the report. Nothing here waits for
// the GPU.
//
// Overhead: the backend times every launch with CUDA events
// (stats_gpu_seconds). With ClientOptions::profile_gpu_overhead an
// ActivityProfiler (CUPTI) also reports the statistics kernels' share of
// all kernel time per step (OverheadAccountant). If the profiler cannot
// start (another tool owns CUPTI, no driver) or its records stop making
// sense (no statistics kernels seen for kBackoffLaunches launches), this
// backs off: logs once, stops the profiler and reports the ratio as
// unavailable.
//
// Threads: Launch/SetPointers on the training thread, Drain on either
// thread; one mutex serialises every backend call (each is short and
// non-blocking, except WaitOldest, the same-step guard's one host
// synchronisation). The profiler is never flushed under that mutex: its
// Collect and Stop (a CUPTI flush parses whole buffers, milliseconds) run
// on a shared reference taken out of it, so the training thread's Launch
// and PlanFor never wait behind them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "client/src/activity_profiler.h"
#include "client/src/device_backend.h"
#include "client/src/forward_device.h"
#include "client/src/outbox.h"
#include "client/src/overhead_accountant.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "gnmr/client.h"

namespace gnmr {

// GNMR_EXPORT: client/local/ calls it across the shared libraries (transport.h).
class GNMR_EXPORT GpuPath {
 public:
  // Profiler-less launches after which missing records mean "back off".
  static constexpr uint64_t kBackoffLaunches = 32;
  // Reports parked at most: kMaxPending waiting for their launch, the
  // others for their forward rows (DeviceForward).
  static constexpr size_t kMaxParked = 2 * DeviceStatsBackend::kMaxPending;

  // Unavailable (with the reason) when the device cannot be used.
  static StatusOr<std::unique_ptr<GpuPath>> Create(int device);
  ~GpuPath();

  int device() const { return device_; }

  // Client::Start: `units` are the client handles of the device units,
  // `tensors` theirs; `shard_count` per client unit (norms).
  Status Start(const std::vector<UnitHandle>& units,
               const std::vector<std::vector<TensorRef>>& tensors,
               const std::vector<uint32_t>& shard_count, bool profile, Outbox* outbox);
  // New pointers of client unit `unit` (layout already checked).
  void SetPointers(UnitHandle unit, const TensorRef* tensors, size_t count);
  // Launches on `stream` and parks `r` until the results are in; on error
  // `r` is given back to the outbox. Either way `r` is no longer the
  // caller's when this returns (the I/O thread may publish and send it at
  // once), so its host time is set here: from `observe_start` to the end of
  // the enqueue. Training thread.
  Status Launch(void* stream, int64_t step, std::chrono::steady_clock::time_point observe_start,
                Report* r);
  // Forward tensors of client unit `unit` on this device, enqueued on
  // `stream` (DeviceForward); their rows travel with the report of the
  // next Launch, which waits for them. Training thread.
  Status ObserveForward(UnitHandle unit, const TensorRef* tensors, size_t count, void* stream);
  // Forward calls dropped so far (DeviceForward::dropped).
  uint64_t forward_dropped() const;
  // Publishes every completed parked report; `collect`: also read the
  // profiler's records (I/O thread only: it flushes CUPTI buffers).
  void Drain(bool collect);
  size_t pending() const;
  // This rank's norm of device unit `unit` at `step`, if its results are in.
  bool NormAt(int64_t step, UnitHandle unit, double* norm) const;
  // Same-step guard: whether a device unit had NaN/Inf at `step`. Waits for
  // that launch to complete if it has not (one host synchronisation, as
  // GradScaler's found_inf). False if `step` was not launched or its
  // results were lost.
  bool NonfiniteAt(int64_t step);
  // Stops the profiler; parked reports are given back. Further launches
  // are refused (fail-open: the client keeps running).
  void Stop();

  double stats_gpu_seconds() const { return static_cast<double>(gpu_nanos_.load()) * 1e-9; }
  // The newest measured overhead: false if none (not profiling, or
  // nothing final yet).
  bool LastOverhead(double* ratio, int64_t* step) const;

 private:
  struct Parked {
    int64_t step = 0;
    Report* report = nullptr;
    bool grads_in = false;  // its gradient columns are filled in
  };
  explicit GpuPath(int device, std::unique_ptr<DeviceStatsBackend> backend);
  // Feeds collected records to the accountant; on back-off moves the
  // profiler into *to_stop (the caller stops it outside mu_).
  void AccountLocked(uint64_t dropped, std::shared_ptr<ActivityProfiler>* to_stop)
      GNMR_REQUIRES(mu_);
  // Fills in the gradient columns of every completed launch, then
  // publishes the parked reports, in order, whose forward rows are in too.
  void PollLocked() GNMR_REQUIRES(mu_);
  void FillLocked(Parked* p, double gpu_seconds) GNMR_REQUIRES(mu_);
  void PublishLocked(const Parked& p) GNMR_REQUIRES(mu_);

  const int device_;
  // Every backend call is made with mu_ held.
  std::unique_ptr<DeviceStatsBackend> backend_ GNMR_PT_GUARDED_BY(mu_);
  std::unique_ptr<DeviceForward> forward_ GNMR_GUARDED_BY(mu_);  // created by Start
  // Null unless profiling. Collect and Stop run on a copy of the pointer,
  // outside mu_.
  std::shared_ptr<ActivityProfiler> profiler_ GNMR_GUARDED_BY(mu_);
  OverheadAccountant accountant_ GNMR_GUARDED_BY(mu_);
  Outbox* outbox_ GNMR_GUARDED_BY(mu_) = nullptr;

  mutable Mutex mu_;
  std::vector<int> index_ GNMR_GUARDED_BY(mu_);             // client unit -> device unit, -1 host
  std::vector<UnitHandle> handles_ GNMR_GUARDED_BY(mu_);    // device unit -> client unit
  std::vector<size_t> first_ptr_ GNMR_GUARDED_BY(mu_);      // device unit -> first pointer
  std::vector<uint32_t> shard_count_ GNMR_GUARDED_BY(mu_);  // client unit
  std::vector<const void*> pointers_ GNMR_GUARDED_BY(mu_);  // SetTable order
  bool dirty_ GNMR_GUARDED_BY(mu_) = false;
  bool stopped_ GNMR_GUARDED_BY(mu_) = false;
  std::deque<Parked> parked_ GNMR_GUARDED_BY(mu_);
  std::vector<UnitStats> stats_ GNMR_GUARDED_BY(mu_);  // Poll scratch
  std::vector<double> norms_ GNMR_GUARDED_BY(mu_);     // device unit, at norms_step_
  int64_t norms_step_ GNMR_GUARDED_BY(mu_) = -1;
  bool nonfinite_ GNMR_GUARDED_BY(mu_) = false;                // any device unit, at norms_step_
  uint64_t launches_since_overhead_ GNMR_GUARDED_BY(mu_) = 0;  // polled since a step was final
  uint64_t uncollected_launches_ GNMR_GUARDED_BY(mu_) = 0;     // launched since the last Collect
  bool have_overhead_ GNMR_GUARDED_BY(mu_) = false;
  double last_ratio_ GNMR_GUARDED_BY(mu_) = 0.0;
  int64_t last_overhead_step_ GNMR_GUARDED_BY(mu_) = -1;
  std::vector<KernelActivity> kernel_scratch_;  // I/O thread only (Drain(true))
  std::vector<StatsCorrelation> corr_scratch_;  // I/O thread only

  std::atomic<int64_t> gpu_nanos_{0};
};

}  // namespace gnmr
