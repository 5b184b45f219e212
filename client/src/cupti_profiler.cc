// CuptiProfiler (see cupti_profiler.h for the ownership rules).
#include "client/src/cupti_profiler.h"

#include <cstdlib>
#include <string>

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
constexpr CUpti_ExternalCorrelationKind kStatsKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;

// The profiler that owns CUPTI in this process (at most one: a second
// subscribe fails), read by the buffer callbacks.
std::mutex g_mu;
CuptiProfiler* g_active = nullptr;

void CUPTIAPI NoCallback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

std::string ResultName(CUptiResult r) {
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || s == nullptr) s = "unknown CUPTI error";
  return std::string(s) + " (" + std::to_string(static_cast<int>(r)) + ")";
}

}  // namespace

CuptiProfiler::CuptiProfiler(CuptiApi api) : api_(api) {}

CuptiProfiler::~CuptiProfiler() { Stop(); }

Status CuptiProfiler::Start() {
  if (running_ || owns_) return FailedPrecondition("CUPTI profiler already started");
  const CUptiResult r = api_.subscribe(&subscriber_, NoCallback, nullptr);
  if (r != CUPTI_SUCCESS) {
    subscriber_ = nullptr;
    // Back off without touching CUPTI again: another tool may own it.
    std::string why = "CUPTI unavailable: cuptiSubscribe: " + ResultName(r);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      why += "; another tool (a profiler) owns CUPTI";
    }
    return Status(StatusCode::kUnavailable, why);
  }
  owns_ = true;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_active = this;
  }
  CUptiResult e = api_.register_callbacks(BufferRequested, BufferCompleted);
  const char* what = "cuptiActivityRegisterCallbacks";
  if (e == CUPTI_SUCCESS) {
    what = "cuptiActivityEnable(CONCURRENT_KERNEL)";
    e = api_.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  }
  if (e == CUPTI_SUCCESS) {
    what = "cuptiActivityEnable(EXTERNAL_CORRELATION)";
    e = api_.enable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
  }
  if (e != CUPTI_SUCCESS) {
    api_.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    Teardown();
    return Status(StatusCode::kUnavailable,
                  std::string("CUPTI unavailable: ") + what + ": " + ResultName(e));
  }
  running_ = true;
  return Status::Ok();
}

void CuptiProfiler::Stop() {
  if (!owns_) return;  // never started, or backed off: CUPTI is not ours
  if (running_) {
    api_.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    api_.disable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
    api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // returns our buffers
    running_ = false;
  }
  Teardown();
}

void CuptiProfiler::Teardown() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_active == this) g_active = nullptr;
  }
  api_.unsubscribe(subscriber_);
  subscriber_ = nullptr;
  // Ours to finalize: this object subscribed successfully. Detaches CUPTI
  // so that its instrumentation costs nothing once we are done.
  api_.finalize();
  owns_ = false;
}

void CuptiProfiler::BeginStatsLaunch(int64_t step) {
  if (running_ && step >= 0) api_.push_external(kStatsKind, static_cast<uint64_t>(step));
}

void CuptiProfiler::EndStatsLaunch() {
  uint64_t id = 0;
  if (running_) api_.pop_external(kStatsKind, &id);
}

void CuptiProfiler::Collect(std::vector<KernelActivity>* kernels,
                            std::vector<StatsCorrelation>* correlations, uint64_t* dropped) {
  // Delivers the buffers whose records are complete; blocking but no CUDA
  // synchronisation (I/O thread only).
  if (running_) api_.flush_all(0);
  std::lock_guard<std::mutex> lock(mu_);
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
}

void CUPTIAPI CuptiProfiler::BufferCompleted(CUcontext ctx, uint32_t stream, uint8_t* buffer,
                                             size_t /*size*/, size_t valid) {
  // No logging, no exceptions, no CUDA here (CUPTI's thread).
  try {
    if (buffer != nullptr && valid > 0) ParseBuffer(buffer, valid);
    size_t lost = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &lost) == CUPTI_SUCCESS && lost > 0) {
      std::lock_guard<std::mutex> lock(g_mu);
      if (g_active != nullptr) {
        std::lock_guard<std::mutex> q(g_active->mu_);
        g_active->dropped_ += lost;
      }
    }
  } catch (...) {
  }
  std::free(buffer);
}

void CuptiProfiler::ParseBuffer(uint8_t* buffer, size_t valid) {
  std::lock_guard<std::mutex> lock(g_mu);
  CuptiProfiler* p = g_active;
  if (p == nullptr) return;
  std::lock_guard<std::mutex> q(p->mu_);
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (p->kernels_.size() + p->correlations_.size() >= kMaxQueued) {
      ++p->dropped_;
      continue;
    }
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
        rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const KernelRecord*>(rec);
      p->kernels_.push_back(KernelActivity{k->start, k->end, k->correlationId});
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
      const auto* c = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
      if (c->externalKind == kStatsKind) {
        p->correlations_.push_back(
            StatsCorrelation{c->correlationId, static_cast<int64_t>(c->externalId)});
      }
    }
  }
}

StatusOr<std::unique_ptr<ActivityProfiler>> CreateCuptiProfiler() {
  return std::unique_ptr<ActivityProfiler>(new CuptiProfiler());
}

}  // namespace gnmr
