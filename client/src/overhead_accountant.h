// OverheadAccountant: turns kernel activity records into the per-step
// overhead_ratio = GPU time of the statistics kernels / GPU time of all
// kernels of the step. Pure logic (no CUDA), fed by an ActivityProfiler on
// the I/O thread; not thread-safe.
//
// Attribution
// - A step's statistics kernels are those whose correlation id was tagged
//   with the step (StatsCorrelation). Its boundary B(s) is the latest end
//   of those kernels: the statistics launch closes the step on the
//   caller's stream.
// - Step s owns every kernel, on any stream, that ends in (B(prev), B(s)],
//   prev being the previous step with a boundary. Durations are summed, so
//   concurrent streams count fully (the ratio is a share of GPU work, not
//   of wall time). The first step seen only opens the first window: it has
//   no ratio.
// - Records arrive late and out of order (CUPTI delivers whole buffers,
//   a correlation tag may come after its kernels). A step is final once
//   kSettleSteps later steps have a boundary, so overhead_ratio trails the
//   observed step by that much. A kernel that ends inside a window already
//   final is late: counted and ignored.
// - Bounded memory: at most kMaxKernels unattributed records; beyond that
//   they are discarded. Steps that may miss a lost record (open ones and the
//   next) are reported as not measured (valid = false) rather than wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <unordered_map>
#include <vector>

#include "client/src/activity_profiler.h"

namespace gnmr {

struct StepOverhead {
  int64_t step = -1;
  bool valid = false;  // false: records were lost, ratio unknown
  double ratio = 0.0;  // stats / total, in [0, 1]
  double stats_gpu_seconds = 0.0;
  double total_gpu_seconds = 0.0;
};

class OverheadAccountant {
 public:
  static constexpr size_t kSettleSteps = 2;
  static constexpr size_t kMaxKernels = size_t{1} << 20;

  // Correlations before the kernels they tag, within one Add call or
  // across calls; a kernel whose tag comes later counts as non-statistics.
  void Add(const std::vector<KernelActivity>& kernels,
           const std::vector<StatsCorrelation>& correlations);
  // Records lost upstream: the steps they may belong to are not measured.
  void AddDropped(uint64_t n);

  // Pops the oldest final step; false if none.
  bool Next(StepOverhead* out);

  uint64_t late_records() const { return late_; }
  uint64_t discarded_records() const { return discarded_; }

 private:
  struct OpenStep {
    uint64_t stats_ns = 0;
    uint64_t boundary_ns = 0;  // 0 until a statistics kernel is seen
  };
  bool TakeStats(const KernelActivity& k);  // true: a statistics kernel
  void MarkLost();
  void Finalize(int64_t step, const OpenStep& s);
  void FinalizeReady();

  std::unordered_map<uint32_t, int64_t> tags_;  // correlation id -> step
  std::deque<uint32_t> tag_order_;              // bounds tags_
  std::map<int64_t, OpenStep> open_;            // steps with a boundary
  std::vector<KernelActivity> kernels_;         // non-statistics, unattributed
  std::deque<StepOverhead> done_;
  bool have_boundary_ = false;
  uint64_t last_boundary_ns_ = 0;  // B of the last final step
  int64_t last_final_step_ = -1;
  // Steps up to this one may miss lost records: reported as not measured.
  int64_t lost_through_ = -1;
  uint64_t late_ = 0;
  uint64_t discarded_ = 0;
};

}  // namespace gnmr
