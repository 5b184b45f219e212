// GpuBlockStats (kernels/gpu_block_stats.h): one request at a time, staged
// through pinned memory, results behind an event. Host code against the
// CUDA runtime only.
//
// Why one request: the descriptors are copied from pinned staging that the
// GPU reads asynchronously, and the scratch (item and segment sums, flags,
// counters) is shared; refusing a second Enqueue until Poll / Wait took the
// first result means neither is ever rewritten under a queued copy, with
// no host wait and no ring bookkeeping.
#include "kernels/gpu_block_stats.h"

#include <cstring>
#include <string>

#include <cuda_runtime.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "kernels/cuda/block_plan.h"
#include "kernels/cuda_util.h"

namespace gnmr {

using cuda::CudaError;
using cuda::DeviceGuard;
using cuda::RelaxedCaptureMode;

struct GpuBlockStats::Impl {
  int device = 0;
  uint32_t max_grid = 0;
  cudaEvent_t done = nullptr;
  bool pending GNMR_GUARDED_BY(mu) = false;  // an Enqueue whose result was not taken
  Mutex mu;
  cuda::PinnedBuf staging;  // descs then order
  cuda::PinnedBuf result;   // one BlockStats
  cuda::DevBuf descs, item_sums, seg_sums, block_partials, bseg_sums, flags, counters, out;

  ~Impl() {
    DeviceGuard guard(device);
    RelaxedCaptureMode relaxed;
    if (done != nullptr) {
      cudaEventSynchronize(done);  // nothing queued may use what is freed
      cudaEventDestroy(done);
    }
  }
};

GpuBlockStats::GpuBlockStats(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuBlockStats::~GpuBlockStats() = default;
int GpuBlockStats::device() const { return impl_->device; }

StatusOr<std::unique_ptr<GpuBlockStats>> GpuBlockStats::Create(int device) {
  GNMR_RETURN_IF_ERROR(cuda::CheckDeviceOrdinal(device));
  DeviceGuard guard(device);
  const int image = cuda::blk::CheckBlockKernelImage();
  if (image != 0) {
    return Status(StatusCode::kUnavailable,
                  std::string("the block-scaled kernels cannot run on CUDA device ") +
                      std::to_string(device) + ": " +
                      cudaGetErrorString(static_cast<cudaError_t>(image)));
  }
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  int sms = 0;
  cudaError_t r = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (r != cudaSuccess) return Status(StatusCode::kUnavailable, cudaGetErrorString(r));
  impl->max_grid = static_cast<uint32_t>(sms > 0 ? sms : 1) * 8;
  r = cudaEventCreateWithFlags(&impl->done, cudaEventDisableTiming);
  if (r != cudaSuccess) return CudaError(r, "cudaEventCreate");
  GNMR_RETURN_IF_ERROR(impl->result.Reserve(sizeof(BlockStats)));
  GNMR_RETURN_IF_ERROR(impl->out.Reserve(sizeof(BlockStats)));
  return std::unique_ptr<GpuBlockStats>(new GpuBlockStats(std::move(impl)));
}

Status GpuBlockStats::Enqueue(const BlockTensorRef* tensors, size_t count, void* stream) {
  Impl& m = *impl_;
  MutexLock lock(m.mu);
  if (m.pending) {
    return FailedPrecondition(
        "GpuBlockStats::Enqueue: the previous result was not taken (Poll / Wait)");
  }
  DeviceGuard guard(m.device);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(st, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusActive) {
    return FailedPrecondition("GpuBlockStats::Enqueue on a capturing stream");
  }
  cuda::blk::Plan plan;
  Status s = cuda::blk::BuildPlan(
      tensors, count, m.device,
      [&](const void* p, size_t bytes, size_t align, const void** dev) {
        return cuda::CheckDeviceReadable(p, bytes, m.device, align, dev);
      },
      &plan);
  if (!s.ok()) return s;
  // Scratch: grows to the largest request (the previous one has completed:
  // `pending` was cleared by Poll / Wait after its event).
  const size_t n = plan.descs.size();
  const size_t desc_bytes = n * sizeof(cuda::blk::BlockDesc);
  const size_t order_bytes = plan.order.size() * sizeof(uint32_t);
  const size_t flag_bytes = (plan.blocks + 7) / 8 * sizeof(uint32_t);
  const size_t counter_bytes = n * sizeof(cuda::blk::Counters);
  if (!(s = m.staging.Reserve(desc_bytes + order_bytes)).ok() ||
      !(s = m.descs.Reserve(desc_bytes + order_bytes + 8)).ok() ||
      !(s = m.item_sums.Reserve(plan.items * sizeof(cuda::blk::Sums) + 8)).ok() ||
      !(s = m.seg_sums.Reserve(plan.segs * sizeof(cuda::blk::Sums) + 8)).ok() ||
      !(s = m.block_partials.Reserve(plan.blocks * sizeof(double) + 8)).ok() ||
      !(s = m.bseg_sums.Reserve(plan.bsegs * sizeof(double) + 8)).ok() ||
      !(s = m.flags.Reserve(flag_bytes + 8)).ok() ||
      !(s = m.counters.Reserve(counter_bytes + 8)).ok()) {
    return s;
  }
  if (n > 0) std::memcpy(m.staging.p, plan.descs.data(), desc_bytes);
  if (order_bytes > 0) std::memcpy(m.staging.p + desc_bytes, plan.order.data(), order_bytes);
  unsigned char* dev_descs = static_cast<unsigned char*>(m.descs.p);
  cudaError_t e = cudaSuccess;
  if (desc_bytes + order_bytes > 0) {
    e = cudaMemcpyAsync(dev_descs, m.staging.p, desc_bytes + order_bytes, cudaMemcpyHostToDevice,
                        st);
  }
  if (e == cudaSuccess && flag_bytes > 0) e = cudaMemsetAsync(m.flags.p, 0, flag_bytes, st);
  if (e == cudaSuccess && counter_bytes > 0) {
    e = cudaMemsetAsync(m.counters.p, 0, counter_bytes, st);
  }
  if (e != cudaSuccess) return CudaError(e, "GpuBlockStats upload");
  cuda::blk::Launch l{};
  l.descs = reinterpret_cast<const cuda::blk::BlockDesc*>(dev_descs);
  l.order = reinterpret_cast<const uint32_t*>(dev_descs + desc_bytes);
  l.item_sums = static_cast<cuda::blk::Sums*>(m.item_sums.p);
  l.seg_sums = static_cast<cuda::blk::Sums*>(m.seg_sums.p);
  l.block_partials = static_cast<double*>(m.block_partials.p);
  l.bseg_sums = static_cast<double*>(m.bseg_sums.p);
  l.flags = static_cast<uint32_t*>(m.flags.p);
  l.counters = static_cast<cuda::blk::Counters*>(m.counters.p);
  l.out = static_cast<BlockStats*>(m.out.p);
  l.n_tensors = static_cast<uint32_t>(n);
  l.max_segs = plan.max_segs;
  l.max_bsegs = plan.max_bsegs;
  l.groups = plan.groups.data();
  l.n_groups = static_cast<uint32_t>(plan.groups.size());
  l.max_grid = m.max_grid;
  const int err = cuda::blk::LaunchBlockStats(l, st);
  if (err != 0) return CudaError(static_cast<cudaError_t>(err), "block statistics kernels");
  e = cudaMemcpyAsync(m.result.p, m.out.p, sizeof(BlockStats), cudaMemcpyDeviceToHost, st);
  if (e == cudaSuccess) e = cudaEventRecord(m.done, st);
  if (e != cudaSuccess) return CudaError(e, "GpuBlockStats result copy");
  m.pending = true;
  return Status::Ok();
}

bool GpuBlockStats::Poll(BlockStats* out) {
  Impl& m = *impl_;
  MutexLock lock(m.mu);
  if (!m.pending) return false;
  DeviceGuard guard(m.device);
  RelaxedCaptureMode relaxed;  // legal beside another thread's global-mode capture
  if (cudaEventQuery(m.done) != cudaSuccess) return false;
  std::memcpy(out, m.result.p, sizeof(BlockStats));
  m.pending = false;
  return true;
}

Status GpuBlockStats::Wait(BlockStats* out) {
  Impl& m = *impl_;
  MutexLock lock(m.mu);
  if (!m.pending) return FailedPrecondition("GpuBlockStats::Wait: nothing enqueued");
  DeviceGuard guard(m.device);
  RelaxedCaptureMode relaxed;
  const cudaError_t e = cudaEventSynchronize(m.done);
  m.pending = false;  // a failed request is not retried
  if (e != cudaSuccess) return CudaError(e, "GpuBlockStats::Wait");
  std::memcpy(out, m.result.p, sizeof(BlockStats));
  return Status::Ok();
}

}  // namespace gnmr
