// ActivityProfiler: GPU kernel activity for overhead accounting
// (docs/architecture.md, "The client library"), behind an interface so the
// client never names CUPTI and CPU-only tests drive the accounting with a
// fake.
//
// Protocol
// - Start() on the training thread at Client::Start. Unavailable means
//   "not measured" (another tool owns CUPTI, no driver, built without
//   CUPTI): the caller logs once and reports overhead_source UNAVAILABLE.
// - BeginStatsLaunch(step) / EndStatsLaunch() bracket the statistics launch
//   on the training thread, so the kernels launched in between are known as
//   the statistics kernels of `step` (CUPTI: the correlation ids its launch
//   callback sees on that thread meanwhile).
// - Collect() on the I/O thread: hands over the records gathered since the
//   last call. Implementations gather them in their own callbacks and must
//   neither log nor block there. Collect may run while the training thread
//   is inside Begin/EndStatsLaunch (GpuPath calls it outside its lock).
// - Stop() before destruction; idempotent; may overlap a Collect.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "gnmr/status.h"

namespace gnmr {

// One kernel execution, GPU timestamps in ns.
struct KernelActivity {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t correlation_id = 0;  // the launch's CUDA correlation id
};

// The launch with this correlation id belongs to the statistics of `step`.
struct StatsCorrelation {
  uint32_t correlation_id = 0;
  int64_t step = 0;
};

class ActivityProfiler {
 public:
  virtual ~ActivityProfiler() = default;
  virtual Status Start() = 0;
  virtual void Stop() = 0;
  virtual void BeginStatsLaunch(int64_t step) = 0;
  virtual void EndStatsLaunch() = 0;
  // Appends the records gathered since the last call; `dropped` (may be
  // null) gets the number of records lost since then (buffer limits).
  virtual void Collect(std::vector<KernelActivity>* kernels,
                       std::vector<StatsCorrelation>* correlations, uint64_t* dropped) = 0;
};

// The CUPTI implementation (cupti_profiler.cc), or Unavailable when the
// build found no CUPTI (cupti_profiler_none.cc). Start() may still fail.
StatusOr<std::unique_ptr<ActivityProfiler>> CreateCuptiProfiler();

// Tests: replaces CreateCuptiProfiler for clients created afterwards (an
// empty function restores it).
using ActivityProfilerFactory = std::function<StatusOr<std::unique_ptr<ActivityProfiler>>()>;
void SetActivityProfilerFactoryForTesting(ActivityProfilerFactory factory);
StatusOr<std::unique_ptr<ActivityProfiler>> CreateActivityProfiler();

}  // namespace gnmr
