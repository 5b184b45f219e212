// Fakes for the client's GPU path, so CPU-only tests drive it: a
// DeviceStatsBackend whose "device" memory is host memory (statistics by
// the CPU path at Launch, results held back until released), and an
// ActivityProfiler that feeds synthetic kernel records. Both report into a
// FakeGpuState the test owns; install them with Install().
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "client/src/activity_profiler.h"
#include "client/src/device_backend.h"
#include "kernels/cpu_stats.h"

namespace gnmr::testing {

struct FakeGpuState {
  std::mutex mu;
  bool hold = false;         // Poll reports nothing while true
  bool fail_launch = false;  // the next Launch fails
  // The first backend made (GpuPath's, the gradients'):
  std::vector<std::vector<TensorRef>> table;
  std::vector<std::vector<const void*>> refreshes;  // every RefreshPointers
  int launches = 0;
  // The others (DeviceForward's, one per unit and layout):
  int backends = 0;            // made so far, the first included
  bool hold_forward = false;   // their Poll reports nothing while true
  int forward_set_tables = 0;  // SetTable calls
  int forward_launches = 0;
  // Profiler
  Status profiler_start = Status::Ok();
  bool tag_stats = true;  // false: records never name the stats launches
  int profiler_starts = 0;
  int profiler_stops = 0;
  std::vector<int64_t> launched_steps;  // BeginStatsLaunch
  // Collect blocks while true (a CUPTI flush parsing big buffers), after
  // counting itself in collects_entered and notifying `cv`.
  bool block_collect = false;
  int collects_entered = 0;
  std::condition_variable cv;
};

class FakeBackend : public DeviceStatsBackend {
 public:
  explicit FakeBackend(FakeGpuState* s) : s_(s) {
    std::lock_guard<std::mutex> lock(s_->mu);
    forward_ = s_->backends++ > 0;
  }
  Status SetTable(const std::vector<std::vector<TensorRef>>& units) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    table_ = units;
    if (forward_) {
      ++s_->forward_set_tables;
    } else {
      s_->table = units;
    }
    return Status::Ok();
  }
  Status RefreshPointers(const std::vector<const void*>& pointers) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (!forward_) s_->refreshes.push_back(pointers);
    size_t k = 0;
    for (auto& unit : table_) {
      for (TensorRef& t : unit) t.data = pointers.at(k++);
    }
    return Status::Ok();
  }
  Status Launch(void*, int64_t step) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->fail_launch) {
      s_->fail_launch = false;
      return Internal("fake launch failure");
    }
    ++(forward_ ? s_->forward_launches : s_->launches);
    Done d;
    d.step = step;
    for (const auto& unit : table_) {
      std::vector<TensorRef> host = unit;
      for (TensorRef& t : host) t.device = kHostDevice;
      UnitStats st;
      GNMR_RETURN_IF_ERROR(cpu::ComputeStats(host.data(), host.size(), &st));
      d.stats.push_back(st);
    }
    if (done_.size() == static_cast<size_t>(kMaxPending)) done_.pop_front();
    done_.push_back(std::move(d));
    return Status::Ok();
  }
  bool Poll(int64_t* step, std::vector<UnitStats>* stats, double* gpu_seconds) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->hold || (forward_ && s_->hold_forward) || done_.empty()) return false;
    *step = done_.front().step;
    *stats = done_.front().stats;
    *gpu_seconds = 1e-5;
    done_.pop_front();
    return true;
  }
  // Results are ready at Launch unless held: nothing to wait for (a held
  // result stays unread, as a GPU that never finishes would).
  void WaitOldest() override {}

 private:
  struct Done {
    int64_t step;
    std::vector<UnitStats> stats;
  };
  FakeGpuState* s_;
  bool forward_ = false;
  std::vector<std::vector<TensorRef>> table_;
  std::deque<Done> done_;
};

// Per launch of step s (s >= 0): a training kernel of 900 ns, then the
// statistics kernel of 100 ns, so every measured step has ratio 0.1.
class FakeProfiler : public ActivityProfiler {
 public:
  explicit FakeProfiler(FakeGpuState* s) : s_(s) {}
  Status Start() override {
    std::lock_guard<std::mutex> lock(s_->mu);
    ++s_->profiler_starts;
    return s_->profiler_start;
  }
  void Stop() override {
    std::lock_guard<std::mutex> lock(s_->mu);
    ++s_->profiler_stops;
  }
  void BeginStatsLaunch(int64_t step) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->launched_steps.push_back(step);
    pending_.push_back(step);
  }
  void EndStatsLaunch() override {}
  void Collect(std::vector<KernelActivity>* kernels, std::vector<StatsCorrelation>* corr,
               uint64_t* dropped) override {
    std::unique_lock<std::mutex> lock(s_->mu);
    ++s_->collects_entered;
    s_->cv.notify_all();
    s_->cv.wait(lock, [this] { return !s_->block_collect; });
    for (int64_t step : pending_) {
      const uint64_t t0 = static_cast<uint64_t>(step) * 10000;
      const uint32_t id = static_cast<uint32_t>(2 * step + 1);
      kernels->push_back(KernelActivity{t0, t0 + 900, id + 100000});
      kernels->push_back(KernelActivity{t0 + 900, t0 + 1000, id});
      if (s_->tag_stats) corr->push_back(StatsCorrelation{id, step});
    }
    pending_.clear();
    if (dropped != nullptr) *dropped = 0;
  }

 private:
  FakeGpuState* s_;
  std::vector<int64_t> pending_;
};

// Installs the fakes for clients created while it lives.
class FakeGpuInstall {
 public:
  explicit FakeGpuInstall(FakeGpuState* s) {
    SetDeviceBackendFactoryForTesting([s](int) -> StatusOr<std::unique_ptr<DeviceStatsBackend>> {
      return std::unique_ptr<DeviceStatsBackend>(new FakeBackend(s));
    });
    SetActivityProfilerFactoryForTesting([s]() -> StatusOr<std::unique_ptr<ActivityProfiler>> {
      return std::unique_ptr<ActivityProfiler>(new FakeProfiler(s));
    });
  }
  ~FakeGpuInstall() {
    SetDeviceBackendFactoryForTesting(nullptr);
    SetActivityProfilerFactoryForTesting(nullptr);
  }
};

}  // namespace gnmr::testing
