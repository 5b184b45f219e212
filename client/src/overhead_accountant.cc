#include "client/src/overhead_accountant.h"

#include <algorithm>

namespace gnmr {
namespace {

// Correlation ids remembered: far more than the kernels of a few steps.
constexpr size_t kMaxTags = 4096;

}  // namespace

bool OverheadAccountant::TakeStats(const KernelActivity& k) {
  auto tag = tags_.find(k.correlation_id);
  if (tag == tags_.end()) return false;
  if (tag->second <= last_final_step_) {
    ++late_;
    return true;
  }
  OpenStep& s = open_[tag->second];
  s.stats_ns += k.end_ns - k.start_ns;
  s.boundary_ns = std::max(s.boundary_ns, k.end_ns);
  return true;
}

void OverheadAccountant::Add(const std::vector<KernelActivity>& kernels,
                             const std::vector<StatsCorrelation>& correlations) {
  bool new_tags = false;
  for (const StatsCorrelation& c : correlations) {
    if (c.step <= last_final_step_) continue;  // a step already reported
    if (tags_.emplace(c.correlation_id, c.step).second) {
      tag_order_.push_back(c.correlation_id);
      new_tags = true;
    }
    while (tag_order_.size() > kMaxTags) {
      tags_.erase(tag_order_.front());
      tag_order_.pop_front();
    }
  }
  if (new_tags && !kernels_.empty()) {
    // A tag may come after its kernels (they sit in different buffers).
    kernels_.erase(std::remove_if(kernels_.begin(), kernels_.end(),
                                  [&](const KernelActivity& k) { return TakeStats(k); }),
                   kernels_.end());
  }
  for (const KernelActivity& k : kernels) {
    if (k.end_ns < k.start_ns) continue;  // not a usable record
    if (TakeStats(k)) continue;
    if (have_boundary_ && k.end_ns <= last_boundary_ns_) {
      ++late_;
      continue;
    }
    if (kernels_.size() >= kMaxKernels) {
      ++discarded_;
      MarkLost();
      continue;
    }
    kernels_.push_back(k);
  }
  FinalizeReady();
}

void OverheadAccountant::AddDropped(uint64_t n) {
  if (n == 0) return;
  discarded_ += n;
  MarkLost();
}

void OverheadAccountant::MarkLost() {
  // A lost record may belong to any open step or to the next one.
  const int64_t newest = open_.empty() ? last_final_step_ : open_.rbegin()->first;
  lost_through_ = std::max(lost_through_, newest + 1);
}

void OverheadAccountant::FinalizeReady() {
  // The oldest open step is final once kSettleSteps later steps have a
  // boundary: by then its kernels on other streams have been delivered.
  while (open_.size() > kSettleSteps) {
    auto first = open_.begin();
    Finalize(first->first, first->second);
    open_.erase(first);
  }
}

void OverheadAccountant::Finalize(int64_t step, const OpenStep& s) {
  // Boundaries never go backwards (statistics launched on another stream
  // may finish early): an earlier B makes an empty window.
  const uint64_t lo = last_boundary_ns_;
  const uint64_t hi = std::max(s.boundary_ns, lo);
  uint64_t others_ns = 0;
  size_t kept = 0;
  for (const KernelActivity& k : kernels_) {
    if (have_boundary_ && k.end_ns <= lo) continue;  // cannot happen: filtered on entry
    if (k.end_ns <= hi) {
      others_ns += k.end_ns - k.start_ns;
    } else {
      kernels_[kept++] = k;
    }
  }
  kernels_.resize(kept);
  if (have_boundary_) {
    StepOverhead o;
    o.step = step;
    o.valid = step > lost_through_;
    o.stats_gpu_seconds = static_cast<double>(s.stats_ns) * 1e-9;
    o.total_gpu_seconds = static_cast<double>(s.stats_ns + others_ns) * 1e-9;
    o.ratio = s.stats_ns + others_ns > 0
                  ? static_cast<double>(s.stats_ns) / static_cast<double>(s.stats_ns + others_ns)
                  : 0.0;
    done_.push_back(o);
  }
  // The first step only opens the first window (kernels before it belong
  // to no measured step).
  have_boundary_ = true;
  last_boundary_ns_ = hi;
  last_final_step_ = step;
  for (auto it = tags_.begin(); it != tags_.end();) {
    it = it->second <= step ? tags_.erase(it) : std::next(it);
  }
  tag_order_.erase(std::remove_if(tag_order_.begin(), tag_order_.end(),
                                  [&](uint32_t id) { return tags_.count(id) == 0; }),
                   tag_order_.end());
}

bool OverheadAccountant::Next(StepOverhead* out) {
  if (done_.empty()) return false;
  *out = done_.front();
  done_.pop_front();
  return true;
}

}  // namespace gnmr
