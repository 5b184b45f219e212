// DeviceForward: forward tensors on a CUDA device (Client::ObserveForward
// with device tensors; docs/statistics.md, "Forward columns").
//
// Why at the call: a forward tensor (an activation, the quantized input of
// a low-precision matmul) may be freed as soon as the module's backward has
// run, before the step's Observe. So each call enqueues its statistics at
// once, on the caller's stream: stream order keeps the memory valid until
// the kernels have read it (the caching allocator reuses a block on its
// stream only after the work queued there). Nothing waits for the GPU.
//
// Backends: each call runs the statistics kernels (gnmr::GpuStats behind a
// DeviceStatsBackend) on a one-unit table of that call's layout (numel,
// dtype, scales and saturation magnitude per tensor); only the pointers
// change between calls of one layout. Per unit at most kBackendsPerUnit
// backends, each with at most DeviceStatsBackend::kMaxPending launches in
// flight (one more would overwrite an unread result). A call takes a
// backend of its layout with a free slot, else a new one (up to
// kBackendsPerUnit, and kMaxBackends in all), else the least recently used
// idle one (its table is rebuilt; nothing of its own is in flight, so that
// does not wait for the GPU). If none of those is possible (a unit called
// more than kBackendsPerUnit * kMaxPending times ahead of the GPU, or
// shapes that change faster than the GPU drains), the call is dropped, and
// with it the unit's row of that step: fwd_numel 0, "no forward
// statistics", never a partial row. Drops are counted (dropped()).
//
// Windows: the calls between two Observe calls belong to the second's step
// (CloseWindow). A window is ready when every call's results are in; its
// rows are then added in call order, as ForwardAccumulator adds host calls,
// so the same tensors give the same bits on either path.
//
// Threads: GpuPath calls every method under its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "client/src/device_backend.h"
#include "client/src/forward_stats.h"
#include "client/src/outbox.h"
#include "gnmr/status.h"
#include "gnmr/tensor.h"

namespace gnmr {

class DeviceForward {
 public:
  static constexpr int kBackendsPerUnit = 4;
  // Backends of all units together: each holds a CUDA stream, ~30 events
  // and ~13 small allocations, so a model with thousands of observed
  // modules stops here (logged once) and reuses idle ones of each unit.
  static constexpr size_t kMaxBackends = 1024;
  // Calls one window may hold; more are dropped (forward passes with no
  // Observe after them: evaluation loops that kept the hooks on).
  static constexpr size_t kMaxWindowCalls = size_t{1} << 16;

  using BackendFactory = std::function<StatusOr<std::unique_ptr<DeviceStatsBackend>>()>;
  DeviceForward(size_t units, BackendFactory factory);

  // Enqueues the statistics of `count` device tensors of `unit` (< units)
  // on `stream`. Not OK when the backend refused the tensors (a pointer the
  // device cannot read): the call is dropped, the caller reports why.
  Status Observe(uint32_t unit, const TensorRef* tensors, size_t count, void* stream);
  // The calls since the last CloseWindow belong to `step`.
  void CloseWindow(int64_t step);
  // Non-blocking: reads every completed launch.
  void Poll();
  // Whether window `step` has no call still waiting for its results (true
  // when there is no such window).
  bool Ready(int64_t step) const;
  // Adds window `step`'s rows to r's forward columns (after any host rows
  // already there) and forgets every window up to `step`.
  void MoveInto(int64_t step, Report* r);

  uint64_t dropped() const { return dropped_; }
  // GPU time of the launches read since the last call.
  double TakeGpuSeconds() { return std::exchange(gpu_seconds_, 0.0); }

 private:
  struct Backend {
    std::unique_ptr<DeviceStatsBackend> backend;
    std::vector<TensorRef> layout;  // pointers not part of it
    int pending = 0;
    uint64_t last_use = 0;  // 1 + the id of its newest launch
  };
  struct Call {
    uint32_t unit = 0;
    bool done = false;
    bool dropped = false;
    UnitStats stats;
  };
  struct Window {
    int64_t step = 0;
    uint64_t end = 0;       // one past its last call id
    bool overflow = false;  // more than kMaxWindowCalls calls: no rows
  };
  // A backend of `unit` for `tensors` with a free slot, or null.
  Backend* Acquire(uint32_t unit, const TensorRef* tensors, size_t count, Status* why);
  void Drop(uint32_t unit);
  // Reads the completed launches of `unit`'s backends.
  void PollUnit(uint32_t unit);
  // Forgets the calls with id < end.
  void ForgetCalls(uint64_t end);

  BackendFactory factory_;
  std::vector<std::vector<Backend>> backends_;  // per unit
  std::deque<Call> calls_;                      // ids first_id_, first_id_ + 1, ...
  uint64_t first_id_ = 0;
  std::deque<Window> windows_;
  uint64_t closed_end_ = 0;  // end of the newest closed window
  bool open_overflow_ = false;
  ForwardAccumulator rows_;  // MoveInto's scratch
  std::vector<char> unit_dropped_;
  std::vector<UnitStats> poll_scratch_;
  std::vector<const void*> pointer_scratch_;
  size_t backend_count_ = 0;
  bool warned_cap_ = false;
  uint64_t dropped_ = 0;
  double gpu_seconds_ = 0.0;
};

}  // namespace gnmr
