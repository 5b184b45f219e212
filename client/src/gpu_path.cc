#include "client/src/gpu_path.h"

#include <cmath>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/mutex.h"

namespace gnmr {
namespace {

Mutex g_factory_mu;
DeviceBackendFactory g_backend_factory GNMR_GUARDED_BY(g_factory_mu);
ActivityProfilerFactory g_profiler_factory GNMR_GUARDED_BY(g_factory_mu);

}  // namespace

void SetDeviceBackendFactoryForTesting(DeviceBackendFactory factory) {
  MutexLock lock(g_factory_mu);
  g_backend_factory = std::move(factory);
}

StatusOr<std::unique_ptr<DeviceStatsBackend>> CreateDeviceStatsBackend(int device) {
  DeviceBackendFactory f;
  {
    MutexLock lock(g_factory_mu);
    f = g_backend_factory;
  }
  return f ? f(device) : CreateCudaStatsBackend(device);
}

void SetActivityProfilerFactoryForTesting(ActivityProfilerFactory factory) {
  MutexLock lock(g_factory_mu);
  g_profiler_factory = std::move(factory);
}

StatusOr<std::unique_ptr<ActivityProfiler>> CreateActivityProfiler() {
  ActivityProfilerFactory f;
  {
    MutexLock lock(g_factory_mu);
    f = g_profiler_factory;
  }
  return f ? f() : CreateCuptiProfiler();
}

StatusOr<std::unique_ptr<GpuPath>> GpuPath::Create(int device) {
  StatusOr<std::unique_ptr<DeviceStatsBackend>> b = CreateDeviceStatsBackend(device);
  if (!b.ok()) return b.status();
  if (*b == nullptr) return Status(StatusCode::kUnavailable, "no GPU statistics backend");
  return std::unique_ptr<GpuPath>(new GpuPath(device, std::move(b).value()));
}

GpuPath::GpuPath(int device, std::unique_ptr<DeviceStatsBackend> backend)
    : device_(device), backend_(std::move(backend)) {}

GpuPath::~GpuPath() { Stop(); }

Status GpuPath::Start(const std::vector<UnitHandle>& units,
                      const std::vector<std::vector<TensorRef>>& tensors,
                      const std::vector<uint32_t>& shard_count, bool profile, Outbox* outbox) {
  MutexLock lock(mu_);
  outbox_ = outbox;
  shard_count_ = shard_count;
  index_.assign(shard_count.size(), -1);
  handles_ = units;
  first_ptr_.clear();
  pointers_.clear();
  for (size_t d = 0; d < units.size(); ++d) {
    index_[units[d]] = static_cast<int>(d);
    first_ptr_.push_back(pointers_.size());
    for (const TensorRef& t : tensors[d]) pointers_.push_back(t.data);
  }
  norms_.assign(units.size(), std::nan(""));
  const int device = device_;
  forward_ = std::make_unique<DeviceForward>(shard_count.size(),
                                             [device] { return CreateDeviceStatsBackend(device); });
  Status s = backend_->SetTable(tensors);
  if (!s.ok()) return Status(s.code(), "GPU statistics tables: " + s.message());
  if (profile) {
    StatusOr<std::unique_ptr<ActivityProfiler>> p = CreateActivityProfiler();
    Status ps = p.ok() ? (*p)->Start() : p.status();
    if (ps.ok()) {
      profiler_ = std::move(p).value();
    } else {
      // Quiet back-off: training goes on, the ratio is reported unavailable.
      spdlog::warn("gnmr client: GPU overhead profiling off ({}); overhead_ratio unavailable",
                   ps.message());
    }
  }
  return Status::Ok();
}

void GpuPath::SetPointers(UnitHandle unit, const TensorRef* tensors, size_t count) {
  MutexLock lock(mu_);
  if (unit >= index_.size() || index_[unit] < 0) return;
  const size_t first = first_ptr_[static_cast<size_t>(index_[unit])];
  for (size_t i = 0; i < count && first + i < pointers_.size(); ++i) {
    pointers_[first + i] = tensors[i].data;
  }
  dirty_ = true;
}

Status GpuPath::Launch(void* stream, int64_t step,
                       std::chrono::steady_clock::time_point observe_start, Report* r) {
  MutexLock lock(mu_);
  if (stopped_) {
    outbox_->Abandon(r);
    return Status::Ok();  // stopped: fail-open, nothing to report
  }
  // This step's forward calls are those since the last Launch, whatever
  // becomes of its report.
  if (forward_) forward_->CloseWindow(step);
  if (dirty_) {
    Status s = backend_->RefreshPointers(pointers_);
    if (!s.ok()) {
      outbox_->Abandon(r);
      return Status(s.code(), "GPU statistics: pointer refresh: " + s.message());
    }
    dirty_ = false;
  }
  if (profiler_) profiler_->BeginStatsLaunch(step);
  Status s = backend_->Launch(stream, step);
  if (profiler_) profiler_->EndStatsLaunch();
  if (!s.ok()) {
    outbox_->Abandon(r);
    return Status(s.code(), "GPU statistics: " + s.message());
  }
  size_t unread = 0;
  for (const Parked& p : parked_) unread += p.grads_in ? 0 : 1;
  if (unread == static_cast<size_t>(DeviceStatsBackend::kMaxPending)) {
    // The backend has just overwritten the oldest unread result.
    for (auto it = parked_.begin(); it != parked_.end(); ++it) {
      if (!it->grads_in) {
        outbox_->Drop(it->report);
        parked_.erase(it);
        break;
      }
    }
  }
  while (parked_.size() >= kMaxParked) {
    // Forward results that never come (a launch lost with its device):
    // the oldest report gives up waiting for them.
    outbox_->Drop(parked_.front().report);
    parked_.pop_front();
  }
  r->stats_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - observe_start).count();
  parked_.push_back(Parked{step, r});
  ++uncollected_launches_;
  return Status::Ok();
}

void GpuPath::Drain(bool collect) {
  // Records first, so reports published now carry the newest ratio. Only
  // after launches: each collection flushes CUPTI's buffers, outside mu_.
  std::shared_ptr<ActivityProfiler> profiler;
  {
    MutexLock lock(mu_);
    if (stopped_) return;
    if (collect && profiler_ && uncollected_launches_ > 0) {
      uncollected_launches_ = 0;
      profiler = profiler_;
    }
  }
  uint64_t dropped = 0;
  if (profiler) {
    kernel_scratch_.clear();
    corr_scratch_.clear();
    profiler->Collect(&kernel_scratch_, &corr_scratch_, &dropped);
  }
  std::shared_ptr<ActivityProfiler> to_stop;
  {
    MutexLock lock(mu_);
    if (!stopped_) {
      if (profiler && profiler == profiler_) AccountLocked(dropped, &to_stop);
      PollLocked();
    }
  }
  if (to_stop) to_stop->Stop();
}

void GpuPath::PollLocked() {
  int64_t step = -1;
  double gpu_seconds = -1.0;
  while (backend_->Poll(&step, &stats_, &gpu_seconds)) {
    ++launches_since_overhead_;
    // Results come in launch order: the first report still without its
    // results is this launch's, unless older ones lost theirs (ring
    // overwrite).
    auto it = parked_.begin();
    while (it != parked_.end() && it->grads_in) ++it;
    while (it != parked_.end() && it->step < step) {
      outbox_->Drop(it->report);
      it = parked_.erase(it);
    }
    if (it == parked_.end() || it->step != step) continue;
    FillLocked(&*it, gpu_seconds);
  }
  if (forward_) {
    forward_->Poll();
    const double forward_seconds = forward_->TakeGpuSeconds();
    gpu_nanos_.fetch_add(static_cast<int64_t>(forward_seconds * 1e9), std::memory_order_relaxed);
  }
  while (!parked_.empty() && parked_.front().grads_in &&
         (!forward_ || forward_->Ready(parked_.front().step))) {
    const Parked p = parked_.front();
    parked_.pop_front();
    if (forward_) forward_->MoveInto(p.step, p.report);
    PublishLocked(p);
  }
}

Status GpuPath::ObserveForward(UnitHandle unit, const TensorRef* tensors, size_t count,
                               void* stream) {
  MutexLock lock(mu_);
  if (stopped_ || !forward_) return Status::Ok();  // fail-open, as Launch
  return forward_->Observe(unit, tensors, count, stream);
}

uint64_t GpuPath::forward_dropped() const {
  MutexLock lock(mu_);
  return forward_ ? forward_->dropped() : 0;
}

void GpuPath::AccountLocked(uint64_t dropped, std::shared_ptr<ActivityProfiler>* to_stop) {
  accountant_.Add(kernel_scratch_, corr_scratch_);
  accountant_.AddDropped(dropped);
  StepOverhead o;
  while (accountant_.Next(&o)) {
    launches_since_overhead_ = 0;
    if (!o.valid) continue;
    have_overhead_ = true;
    last_ratio_ = o.ratio;
    last_overhead_step_ = o.step;
  }
  if (launches_since_overhead_ > kBackoffLaunches) {
    // Launches complete but no statistics kernel is ever attributed (the
    // records are not ours, or another tool took CUPTI over): stop paying
    // for the profiler.
    spdlog::warn(
        "gnmr client: no GPU overhead measured for {} launches; CUPTI profiling off, "
        "overhead_ratio unavailable",
        kBackoffLaunches);
    *to_stop = std::move(profiler_);
    have_overhead_ = false;
  }
}

void GpuPath::FillLocked(Parked* p, double gpu_seconds) {
  Report* r = p->report;
  p->grads_in = true;
  nonfinite_ = false;
  for (size_t d = 0; d < handles_.size() && d < stats_.size(); ++d) {
    const UnitHandle u = handles_[d];
    UnitStats st = stats_[d];
    if (r->inactive[u]) st = UnitStats{};  // marked inactive: not reported, no norm
    r->sumsq[u] = st.sumsq;
    r->amax[u] = st.amax;
    r->nonfinite[u] = st.nonfinite;
    r->zeros[u] = st.zeros;
    r->saturated[u] = st.saturated;
    norms_[d] = std::sqrt(st.sumsq * shard_count_[u]);
    nonfinite_ = nonfinite_ || st.nonfinite > 0 || !std::isfinite(st.sumsq);
  }
  norms_step_ = p->step;
  if (gpu_seconds >= 0.0) {
    r->stats_gpu_seconds = gpu_seconds;
    gpu_nanos_.fetch_add(static_cast<int64_t>(gpu_seconds * 1e9), std::memory_order_relaxed);
  }
}

void GpuPath::PublishLocked(const Parked& p) {
  Report* r = p.report;
  if (profiler_ && have_overhead_) {
    r->overhead_source = kOverheadCupti;
    r->overhead_ratio = last_ratio_;
    r->overhead_step = last_overhead_step_;
  } else {
    r->overhead_source = kOverheadUnavailable;
    r->overhead_ratio = 0.0;
    r->overhead_step = -1;
  }
  outbox_->Publish(r);
}

size_t GpuPath::pending() const {
  MutexLock lock(mu_);
  return parked_.size();
}

bool GpuPath::NormAt(int64_t step, UnitHandle unit, double* norm) const {
  MutexLock lock(mu_);
  if (step != norms_step_ || unit >= index_.size() || index_[unit] < 0) return false;
  *norm = norms_[static_cast<size_t>(index_[unit])];
  return true;
}

bool GpuPath::NonfiniteAt(int64_t step) {
  MutexLock lock(mu_);
  for (;;) {
    if (norms_step_ == step) return nonfinite_;
    if (stopped_ || norms_step_ > step) return false;
    bool launched = false;
    for (const Parked& p : parked_) launched = launched || p.step == step;
    if (!launched) return false;
    // Block until the oldest pending launch completes, then publish it.
    backend_->WaitOldest();
    const int64_t before = norms_step_;
    PollLocked();
    if (norms_step_ == before && !parked_.empty() && parked_.front().step <= step) {
      return false;  // the backend could not wait: give up rather than spin
    }
  }
}

bool GpuPath::LastOverhead(double* ratio, int64_t* step) const {
  MutexLock lock(mu_);
  if (!profiler_ || !have_overhead_) return false;
  *ratio = last_ratio_;
  *step = last_overhead_step_;
  return true;
}

void GpuPath::Stop() {
  std::shared_ptr<ActivityProfiler> profiler;
  {
    MutexLock lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    profiler = std::move(profiler_);
    for (const Parked& p : parked_) {
      if (outbox_ != nullptr) outbox_->Abandon(p.report);
    }
    parked_.clear();
  }
  if (profiler) profiler->Stop();  // flushes CUPTI: outside mu_
}

}  // namespace gnmr
