// CuptiProfiler: ActivityProfiler on the CUPTI activity API (built only
// when the toolkit has CUPTI; the client reaches it through
// CreateCuptiProfiler). Private header: it names CUPTI types, so that tests
// can inject the CUPTI entry points (CuptiApi) and check the ownership
// rules without a GPU.
//
// Ownership: CUPTI admits one subscriber per process. Start() first
// subscribes; if that fails — CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
// (39: another profiler such as Nsight or Kineto owns CUPTI), no driver,
// CUPTI_ERROR_UNKNOWN (999), anything — it backs off: returns Unavailable
// and touches nothing else. Only after a successful subscribe does it
// register activity buffers (which would otherwise steal another tool's),
// and only then will Stop() call cuptiFinalize.
//
// Records: CUPTI calls the buffer callbacks on its own threads. They only
// copy kernel and external-correlation records into a mutex-protected
// queue (bounded; overflow is counted) and never log, throw or call CUDA;
// Collect() moves the queue out on the I/O thread.
#pragma once

#include <cupti.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "client/src/activity_profiler.h"

namespace gnmr {

struct CuptiApi {
  CUptiResult (*subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) = cuptiSubscribe;
  CUptiResult (*unsubscribe)(CUpti_SubscriberHandle) = cuptiUnsubscribe;
  CUptiResult (*finalize)() = cuptiFinalize;
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                    CUpti_BuffersCallbackCompleteFunc) =
      cuptiActivityRegisterCallbacks;
  CUptiResult (*enable)(CUpti_ActivityKind) = cuptiActivityEnable;
  CUptiResult (*disable)(CUpti_ActivityKind) = cuptiActivityDisable;
  CUptiResult (*flush_all)(uint32_t) = cuptiActivityFlushAll;
  CUptiResult (*push_external)(CUpti_ExternalCorrelationKind, uint64_t) =
      cuptiActivityPushExternalCorrelationId;
  CUptiResult (*pop_external)(CUpti_ExternalCorrelationKind, uint64_t*) =
      cuptiActivityPopExternalCorrelationId;
};

class CuptiProfiler : public ActivityProfiler {
 public:
  // Records kept between two Collect calls; more are dropped and counted.
  static constexpr size_t kMaxQueued = size_t{1} << 20;

  explicit CuptiProfiler(CuptiApi api = CuptiApi());
  ~CuptiProfiler() override;  // Stop()

  Status Start() override;
  void Stop() override;
  void BeginStatsLaunch(int64_t step) override;
  void EndStatsLaunch() override;
  void Collect(std::vector<KernelActivity>* kernels, std::vector<StatsCorrelation>* correlations,
               uint64_t* dropped) override;

  bool owns_cupti() const { return owns_; }

  // The buffer callbacks (static: CUPTI passes no user pointer).
  static void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records);
  static void CUPTIAPI BufferCompleted(CUcontext ctx, uint32_t stream, uint8_t* buffer,
                                       size_t size, size_t valid);
  // Parses one completed buffer into the active profiler's queue (tests
  // feed synthetic buffers through it).
  static void ParseBuffer(uint8_t* buffer, size_t valid);

 private:
  void Teardown();  // unsubscribe, finalize; owns_ must be true

  const CuptiApi api_;
  CUpti_SubscriberHandle subscriber_ = nullptr;
  bool owns_ = false;    // subscribed: this object owns CUPTI
  bool running_ = false;

  std::mutex mu_;  // the queue, filled by BufferCompleted
  std::vector<KernelActivity> kernels_;
  std::vector<StatsCorrelation> correlations_;
  uint64_t dropped_ = 0;
};

}  // namespace gnmr
