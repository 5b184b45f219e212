// CuptiProfiler: ActivityProfiler on the CUPTI activity and callback APIs
// (built only when the toolkit has CUPTI; the client reaches it through
// CreateCuptiProfiler, which loads CUPTI at run time: cupti_library.h). Private header: it names
// CUPTI types, so that tests can inject the CUPTI entry points (CuptiApi) and check the ownership
// rules without a GPU.
//
// Ownership: CUPTI admits one subscriber per process. Start() first
// subscribes; if that fails — CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
// (39: another profiler such as Nsight or Kineto owns CUPTI), no driver,
// CUPTI_ERROR_UNKNOWN (999), anything — it backs off: returns Unavailable
// and touches nothing else. Only after a successful subscribe does it
// register activity buffers and enable kernel records.
//
// It never calls cuptiFinalize (that would detach CUPTI under trainer
// threads making CUDA calls, and under any tool that comes later). Stop()
// disables the kernel records only while its buffer callbacks are still
// the registered ones: a tool started later (torch.profiler / Kineto) may
// have registered its own and now rely on those records. The evidence is
// our buffers: a forced flush must hand every buffer of ours back to us,
// and statistics launched since our last buffer came back must have put
// their records in one of ours. Otherwise Stop() only unsubscribes.
//
// Statistics kernels are identified by correlation id: while
// BeginStatsLaunch .. EndStatsLaunch runs on a thread, the launch API
// callback (runtime and driver kernel launches only) records the
// correlation ids of that thread's launches; CUPTI gives each kernel
// record the same id. (External correlation records would need API
// activity records, which are off: they cost every API call.)
//
// Records: CUPTI calls the buffer callbacks on its own threads and the
// launch callback on the launching thread. They only copy into
// mutex-protected queues (bounded; overflow is counted) and never log,
// throw or call CUDA; Collect() moves the queues out on the I/O thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include <cupti.h>

#include "client/src/activity_profiler.h"
#include "client/src/cupti_library.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace gnmr {

class CuptiProfiler : public ActivityProfiler {
 public:
  // Records kept between two Collect calls; more are dropped and counted.
  static constexpr size_t kMaxQueued = size_t{1} << 20;

  // `api`: LoadCupti()'s entry points, or a simulated CUPTI (tests).
  explicit CuptiProfiler(CuptiApi api);
  ~CuptiProfiler() override;  // Stop()

  Status Start() override;
  void Stop() override;
  void BeginStatsLaunch(int64_t step) override;
  void EndStatsLaunch() override;
  void Collect(std::vector<KernelActivity>* kernels, std::vector<StatsCorrelation>* correlations,
               uint64_t* dropped) override;

  bool owns_cupti() const { return owns_; }
  // After Stop: whether it found its buffer callbacks replaced (and so
  // left the activity kinds enabled).
  bool displaced() const { return displaced_; }

  // The CUPTI callbacks (static: the buffer callbacks get no user pointer).
  static void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records);
  static void CUPTIAPI BufferCompleted(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size,
                                       size_t valid);
  static void CUPTIAPI OnLaunch(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                const void* data);
  // Parses one completed buffer into the active profiler's queue (tests
  // feed synthetic buffers through it).
  static void ParseBuffer(uint8_t* buffer, size_t valid);
  // Tests with a simulated CUPTI: forgets the buffers it gave to another
  // tool's callbacks (they will never come back here).
  static void ForgetHeldBuffersForTesting();

 private:
  void EnableLaunchCallbacks(int* runtime_enabled) GNMR_REQUIRES(control_mu_);
  // Forces a flush; see the header comment.
  bool OurCallbacksRegistered() GNMR_REQUIRES(control_mu_);
  void Release() GNMR_REQUIRES(control_mu_);  // unsubscribes; owns_ must be true

  const CuptiApi api_;
  Mutex control_mu_;  // Start, Stop and Collect's flush
  CUpti_SubscriberHandle subscriber_ GNMR_GUARDED_BY(control_mu_) = nullptr;
  // Written with control_mu_ held; owns_cupti() and displaced() read them
  // without it (after Stop, on the thread that stopped it).
  bool owns_ = false;  // subscribed
  std::atomic<bool> running_{false};
  bool displaced_ = false;

  Mutex mu_;  // the queues, filled by the callbacks
  std::vector<KernelActivity> kernels_ GNMR_GUARDED_BY(mu_);
  std::vector<StatsCorrelation> correlations_ GNMR_GUARDED_BY(mu_);
  uint64_t dropped_ GNMR_GUARDED_BY(mu_) = 0;
};

}  // namespace gnmr
