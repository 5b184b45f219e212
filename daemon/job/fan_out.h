// FanOut: a few threads that share one broadcast's work with its caller.
//
// Broadcasting a decision to 16,384 ranks behind 2,048 relay streams means
// 2,048 gRPC writes, ~10 us of CPU each, started by the thread that closed
// the step while it holds the job's lock: that is most of the decision's
// latency (docs/perf.md). The writes are independent (each stream has its
// own lock and queue), so the job hands ranges of its sinks to this pool
// and works through ranges itself. Run returns only when every range is
// done, so what the ranges point at (the job's sinks, kept alive by the
// job's lock) outlives the work.
//
// One broadcast at a time uses the helpers; a second caller meanwhile (one
// more job deciding on another thread) does its own work alone rather than
// wait. Helpers catch everything: an exception escaping a thread would end
// gnmrd.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace gnmr {

class FanOut {
 public:
  // `helpers` threads besides the caller (0: the caller does everything).
  explicit FanOut(int helpers);
  ~FanOut();  // joins the helpers
  FanOut(const FanOut&) = delete;
  FanOut& operator=(const FanOut&) = delete;

  // Helpers for this machine: one per core but one, at most 3 (a relay
  // stream's write gains little from more).
  static int DefaultHelpers();

  // Calls work(begin, end) for consecutive ranges of [0, n), `grain` items
  // each (the last one shorter), on the caller and on helpers that are
  // free; returns when every range is done. `work` must be safe to call
  // concurrently on different ranges.
  void Run(size_t n, size_t grain, const std::function<void(size_t, size_t)>& work);

  int helpers() const { return static_cast<int>(threads_.size()); }
  // Run calls (n > 0), ranges done by helpers, and exceptions caught
  // (tests, logs).
  uint64_t runs() const { return runs_.load(); }
  uint64_t ranges_by_helpers() const { return ranges_by_helpers_.load(); }
  uint64_t exceptions() const { return exceptions_.load(); }

 private:
  struct Task {
    size_t n = 0;
    size_t grain = 1;
    const std::function<void(size_t, size_t)>* work = nullptr;
    std::atomic<size_t> next{0};
  };
  // Takes ranges of `task` until none is left; counts (and logs) a range
  // that throws. Returns the ranges done.
  uint64_t Drain(Task* task);
  void HelperLoop();

  Mutex run_mu_;  // one broadcast at a time on the helpers
  Mutex mu_;
  std::condition_variable wake_;                // a task was posted, or stopping
  std::condition_variable left_;                // a helper left the task
  Task* task_ GNMR_GUARDED_BY(mu_) = nullptr;   // the posted task
  uint64_t task_seq_ GNMR_GUARDED_BY(mu_) = 0;  // bumped per posted task
  int in_task_ GNMR_GUARDED_BY(mu_) = 0;        // helpers working on task_
  bool stopping_ GNMR_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> runs_{0};
  std::atomic<uint64_t> ranges_by_helpers_{0};
  std::atomic<uint64_t> exceptions_{0};
  std::vector<std::thread> threads_;
};

}  // namespace gnmr
