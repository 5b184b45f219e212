// CuptiProfiler (see cupti_profiler.h for the ownership rules).
#include "client/src/cupti_profiler.h"

#include <cstdlib>
#include <string>
#include <unordered_set>

#include "common/mutex.h"

namespace gnmr {
namespace {

// The kernel record layout of this toolkit (start, end and correlationId
// are common to all versions; only the struct name moves).
#if CUPTI_API_VERSION >= 130000
using KernelRecord = CUpti_ActivityKernel10;
#else
using KernelRecord = CUpti_ActivityKernel9;
#endif

constexpr size_t kBufferBytes = size_t{1} << 20;
constexpr size_t kBufferAlign = 8;  // CUPTI requires 8-byte aligned buffers

// The launch APIs whose correlation ids can name a statistics kernel.
// GpuStats launches through cudaLaunchKernel; the rest cover other paths
// (per-thread default stream, CUDA 13's triple-chevron entry, the driver).
struct LaunchApi {
  CUpti_CallbackDomain domain;
  CUpti_CallbackId cbid;
};
constexpr LaunchApi kLaunchApis[] = {
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060},
#if CUPTI_API_VERSION >= 130000
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000},
#endif
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz},
};

// Process-wide state the CUPTI callbacks read. Never destroyed: CUPTI may
// still hand buffers back while the process exits.
struct Shared {
  // The profiler that owns CUPTI in this process (at most one: a second
  // subscribe fails).
  Mutex mu;
  CuptiProfiler* active GNMR_GUARDED_BY(mu) = nullptr;
  // Our activity buffers: those CUPTI holds, and what came back (buffers
  // outlive a profiler).
  Mutex book_mu;
  // Handed to CUPTI, not back yet.
  std::unordered_set<const uint8_t*> held GNMR_GUARDED_BY(book_mu);
  uint64_t returned GNMR_GUARDED_BY(book_mu) = 0;            // buffers of ours CUPTI gave back
  uint64_t launches_at_return GNMR_GUARDED_BY(book_mu) = 0;  // stats_launches then
  std::atomic<uint64_t> stats_launches{0};                   // EndStatsLaunch calls, all profilers
};
Shared& G() {
  static Shared* s = new Shared;
  return *s;
}

// The launching thread's statistics launch (BeginStatsLaunch..End).
thread_local int64_t t_stats_step = -1;
thread_local std::vector<uint32_t> t_correlation_ids;

std::string ResultName(const CuptiApi& api, CUptiResult r) {
  const char* s = nullptr;
  if (api.get_result_string == nullptr || api.get_result_string(r, &s) != CUPTI_SUCCESS ||
      s == nullptr) {
    s = "unknown CUPTI error";
  }
  return std::string(s) + " (" + std::to_string(static_cast<int>(r)) + ")";
}

}  // namespace

CuptiProfiler::CuptiProfiler(CuptiApi api) : api_(api) {}

CuptiProfiler::~CuptiProfiler() { Stop(); }

Status CuptiProfiler::Start() {
  MutexLock control(control_mu_);
  if (running_ || owns_) return FailedPrecondition("CUPTI profiler already started");
  if (api_.subscribe == nullptr || api_.unsubscribe == nullptr || api_.enable_callback == nullptr ||
      api_.register_callbacks == nullptr || api_.enable == nullptr || api_.disable == nullptr ||
      api_.flush_all == nullptr) {
    return Status(StatusCode::kUnavailable, "CUPTI unavailable: entry points not loaded");
  }
  const CUptiResult r = api_.subscribe(&subscriber_, OnLaunch, this);
  if (r != CUPTI_SUCCESS) {
    subscriber_ = nullptr;
    // Back off without touching CUPTI again: another tool may own it.
    std::string why = "CUPTI unavailable: cuptiSubscribe: " + ResultName(api_, r);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      why += "; another tool (a profiler) owns CUPTI";
    }
    return Status(StatusCode::kUnavailable, why);
  }
  owns_ = true;
  displaced_ = false;
  {
    MutexLock lock(G().mu);
    G().active = this;
  }
  CUptiResult e = api_.register_callbacks(BufferRequested, BufferCompleted);
  if (e != CUPTI_SUCCESS) {
    Release();
    return Status(StatusCode::kUnavailable,
                  "CUPTI unavailable: cuptiActivityRegisterCallbacks: " + ResultName(api_, e));
  }
  e = api_.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  int runtime_enabled = 0;
  if (e == CUPTI_SUCCESS) EnableLaunchCallbacks(&runtime_enabled);
  if (e != CUPTI_SUCCESS || runtime_enabled == 0) {
    if (e == CUPTI_SUCCESS) {
      // Ours, registered a moment ago: switch the records off again.
      api_.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
      api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    }
    Release();
    return Status(
        StatusCode::kUnavailable,
        e != CUPTI_SUCCESS
            ? "CUPTI unavailable: cuptiActivityEnable(CONCURRENT_KERNEL): " + ResultName(api_, e)
            : std::string("CUPTI unavailable: no kernel launch callback could be enabled"));
  }
  running_ = true;
  return Status::Ok();
}

void CuptiProfiler::EnableLaunchCallbacks(int* runtime_enabled) {
  for (const LaunchApi& a : kLaunchApis) {
    if (api_.enable_callback(1, subscriber_, a.domain, a.cbid) == CUPTI_SUCCESS &&
        a.domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
      ++*runtime_enabled;
    }
  }
}

void CuptiProfiler::Stop() {
  MutexLock control(control_mu_);
  if (!owns_) return;  // never started, or backed off: CUPTI is not ours
  if (running_) {
    running_ = false;
    if (OurCallbacksRegistered()) {
      api_.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
      api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // what came in meanwhile
    } else {
      displaced_ = true;  // another tool's records now: leave the kinds alone
    }
  }
  Release();
}

bool CuptiProfiler::OurCallbacksRegistered() {
  std::unordered_set<const uint8_t*> held_before;
  uint64_t returned_before = 0, launches_at_return = 0;
  {
    MutexLock lock(G().book_mu);
    held_before = G().held;
    returned_before = G().returned;
    launches_at_return = G().launches_at_return;
  }
  const uint64_t launches = G().stats_launches.load();
  api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // to the registered callbacks
  MutexLock lock(G().book_mu);
  if (!held_before.empty()) {
    for (const uint8_t* b : held_before) {
      if (G().held.count(b) != 0) return false;  // went to someone else's callback
    }
    return true;
  }
  // Nothing of ours was out: statistics launched since our last buffer
  // came back must have had their records flushed to us now.
  if (launches > launches_at_return) return G().returned > returned_before;
  return true;  // nothing happened since our callbacks last proved registered
}

void CuptiProfiler::Release() {
  {
    MutexLock lock(G().mu);
    if (G().active == this) G().active = nullptr;
  }
  api_.unsubscribe(subscriber_);  // also drops the launch callbacks
  subscriber_ = nullptr;
  owns_ = false;
}

void CuptiProfiler::BeginStatsLaunch(int64_t step) {
  if (!running_ || step < 0) return;
  t_stats_step = step;
  t_correlation_ids.clear();
}

void CuptiProfiler::EndStatsLaunch() {
  if (t_stats_step < 0) return;
  const int64_t step = t_stats_step;
  t_stats_step = -1;
  G().stats_launches.fetch_add(1);
  MutexLock lock(mu_);
  for (uint32_t id : t_correlation_ids) {
    if (kernels_.size() + correlations_.size() >= kMaxQueued) {
      ++dropped_;
      continue;
    }
    correlations_.push_back(StatsCorrelation{id, step});
  }
  t_correlation_ids.clear();
}

void CUPTIAPI CuptiProfiler::OnLaunch(void* /*userdata*/, CUpti_CallbackDomain domain,
                                      CUpti_CallbackId cbid, const void* data) {
  // The launching thread, inside the launch call: no locks, no CUDA.
  if (t_stats_step < 0 || data == nullptr) return;
  const auto* d = static_cast<const CUpti_CallbackData*>(data);
  if (d->callbackSite != CUPTI_API_ENTER) return;
  bool launch = false;
  for (const LaunchApi& a : kLaunchApis) launch = launch || (a.domain == domain && a.cbid == cbid);
  if (!launch) return;
  try {
    t_correlation_ids.push_back(d->correlationId);
  } catch (...) {
  }
}

void CuptiProfiler::Collect(std::vector<KernelActivity>* kernels,
                            std::vector<StatsCorrelation>* correlations, uint64_t* dropped) {
  {
    // Delivers the buffers whose records are complete; blocking but no CUDA
    // synchronisation (I/O thread, never under GpuPath's mutex).
    MutexLock control(control_mu_);
    if (running_) api_.flush_all(0);
  }
  MutexLock lock(mu_);
  kernels->insert(kernels->end(), kernels_.begin(), kernels_.end());
  correlations->insert(correlations->end(), correlations_.begin(), correlations_.end());
  kernels_.clear();
  correlations_.clear();
  if (dropped != nullptr) *dropped = dropped_;
  dropped_ = 0;
}

void CUPTIAPI CuptiProfiler::BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
  if (*buffer == nullptr) return;
  try {
    MutexLock lock(G().book_mu);
    G().held.insert(*buffer);
  } catch (...) {
  }
}

void CUPTIAPI CuptiProfiler::BufferCompleted(CUcontext ctx, uint32_t stream, uint8_t* buffer,
                                             size_t /*size*/, size_t valid) {
  // No logging, no exceptions, no CUDA here (CUPTI's thread).
  try {
    bool ours = false;
    {
      MutexLock lock(G().book_mu);
      ours = G().held.erase(buffer) > 0;
      if (ours) {
        ++G().returned;
        G().launches_at_return = G().stats_launches.load();
      }
    }
    if (!ours) return;  // not allocated here: not ours to read or free
    if (valid > 0) ParseBuffer(buffer, valid);
    size_t lost = 0;
    MutexLock lock(G().mu);
    CuptiProfiler* p = G().active;
    if (p != nullptr && p->api_.get_num_dropped_records != nullptr &&
        p->api_.get_num_dropped_records(ctx, stream, &lost) == CUPTI_SUCCESS && lost > 0) {
      MutexLock q(p->mu_);
      p->dropped_ += lost;
    }
  } catch (...) {
  }
  std::free(buffer);
}

void CuptiProfiler::ParseBuffer(uint8_t* buffer, size_t valid) {
  MutexLock lock(G().mu);
  CuptiProfiler* p = G().active;
  if (p == nullptr) return;
  MutexLock q(p->mu_);
  CUpti_Activity* rec = nullptr;
  if (p->api_.get_next_record == nullptr) return;
  while (p->api_.get_next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) {
      continue;
    }
    if (p->kernels_.size() + p->correlations_.size() >= kMaxQueued) {
      ++p->dropped_;
      continue;
    }
    const auto* k = reinterpret_cast<const KernelRecord*>(rec);
    p->kernels_.push_back(KernelActivity{k->start, k->end, k->correlationId});
  }
}

void CuptiProfiler::ForgetHeldBuffersForTesting() {
  MutexLock lock(G().book_mu);
  G().held.clear();
}

StatusOr<std::unique_ptr<ActivityProfiler>> CreateCuptiProfiler() {
  StatusOr<CuptiApi> api = LoadCupti();
  if (!api.ok())
    return Status(StatusCode::kUnavailable, "CUPTI unavailable: " + api.status().message());
  return std::unique_ptr<ActivityProfiler>(new CuptiProfiler(*api));
}

}  // namespace gnmr
