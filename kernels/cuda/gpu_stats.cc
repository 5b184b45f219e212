// GpuStats: creation, tables, staging, apply (kernels/gpu_stats.h; the state
// is described in gpu_stats_impl.h, launches and results are in
// gpu_stats_launch.cc). Host code against the CUDA runtime only.
#include <cmath>
#include <cstring>
#include <string>

#include <cuda_runtime.h>

#include "kernels/cuda/gpu_stats_impl.h"
#include "kernels/cuda/table_builder.h"

namespace gnmr {

using cuda::CudaError;
using cuda::DeviceGuard;
using cuda::RelaxedCaptureMode;

cudaError_t RecordEvent(cudaEvent_t ev, cudaStream_t st, bool captured) {
  return captured ? cudaEventRecordWithFlags(ev, st, cudaEventRecordExternal)
                  : cudaEventRecord(ev, st);
}

bool IsCapturing(cudaStream_t st) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(st, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusActive;
}

GpuStats::Impl::~Impl() {
  DeviceGuard guard(device);
  RelaxedCaptureMode relaxed;
  WaitForOwnWork();  // nothing queued may still use what is freed below
  FreeAll();
  for (cudaEvent_t e : events) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  for (cudaEvent_t e : stage_events) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (order_event != nullptr) cudaEventDestroy(order_event);
  if (setup_stream != nullptr) cudaStreamDestroy(setup_stream);
}

void GpuStats::Impl::WaitForOwnWork() {
  if (order_event != nullptr) cudaEventSynchronize(order_event);
}

void GpuStats::Impl::FreeAll() {
  for (cuda::DevBuf* b : {&tensors, &ptrs, &items, &segs, &units, &item_out, &seg_out, &unit_out,
                          &scales, &replay_counter}) {
    b->Free();
  }
  ring_host.Free();
  stage_host.Free();
  graph_stage.Free();
}

uint64_t GpuStats::Impl::SlotStamp(int slot) const {
  uint64_t stamp = 0;
  std::memcpy(&stamp, ring_host.p + slot * slot_bytes + n_units * sizeof(UnitStats), 8);
  return stamp;
}

Status GpuStats::Impl::AcquireStage(unsigned char** slot, int* index) {
  const int k = static_cast<int>(stage_uses % kStaging);
  cudaError_t q;
  {
    RelaxedCaptureMode relaxed;           // legal beside another thread's capture
    q = cudaEventQuery(stage_events[k]);  // never recorded: done
  }
  if (q == cudaErrorNotReady) {
    return Status(StatusCode::kUnavailable,
                  "the device is " + std::to_string(kStaging) +
                      " uploads behind: this operation is skipped (GpuStats never waits)");
  }
  if (q != cudaSuccess) return CudaError(q, "cudaEventQuery");
  *slot = stage_host.p + k * stage_bytes;
  *index = k;
  return Status::Ok();
}

cudaError_t GpuStats::Impl::UploadStage(unsigned char* slot, int index, const float* scale_values,
                                        cudaStream_t st) {
  cudaError_t e = cudaSuccess;
  if (table_dirty && n_tensors > 0) {
    std::memcpy(slot, current.data(), n_tensors * sizeof(void*));
    e = cudaMemcpyAsync(ptrs.p, slot, n_tensors * sizeof(void*), cudaMemcpyHostToDevice, st);
    if (e != cudaSuccess) return e;
  }
  if (scale_values != nullptr) {
    unsigned char* s = slot + n_tensors * sizeof(void*);
    std::memcpy(s, scale_values, n_units * sizeof(float));
    e = cudaMemcpyAsync(scales.p, s, n_units * sizeof(float), cudaMemcpyHostToDevice, st);
    if (e != cudaSuccess) return e;
  }
  // From here the slot is in use until its event completes (a failed
  // record still moves on: the next operation takes the next slot).
  ++stage_uses;
  table_dirty = false;
  return cudaEventRecord(stage_events[index], st);
}

GpuStats::GpuStats(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuStats::~GpuStats() = default;

StatusOr<std::unique_ptr<GpuStats>> GpuStats::Create(int device) {
  GNMR_RETURN_IF_ERROR(cuda::CheckDeviceOrdinal(device));
  DeviceGuard guard(device);
  int now = -1;
  if (cudaGetDevice(&now) != cudaSuccess || now != device) {
    return Status(StatusCode::kUnavailable,
                  "cannot make CUDA device " + std::to_string(device) + " current");
  }
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  cudaError_t r = cudaSuccess;
  for (cudaEvent_t& ev : impl->events) {
    if (r == cudaSuccess) r = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  }
  for (cudaEvent_t& ev : impl->stage_events) {
    if (r == cudaSuccess) r = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  }
  if (r == cudaSuccess) r = cudaEventCreateWithFlags(&impl->order_event, cudaEventDisableTiming);
  if (r != cudaSuccess) return CudaError(r, "cudaEventCreate");
  r = cudaStreamCreateWithFlags(&impl->setup_stream, cudaStreamNonBlocking);
  if (r != cudaSuccess) return CudaError(r, "cudaStreamCreate");
  const int c = cuda::InitLaunchConfig(device, &impl->config);
  if (c == cudaErrorNoKernelImageForDevice || c == cudaErrorInvalidDeviceFunction) {
    // The kernels were not built for this GPU (and no PTX it can JIT).
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    cudaGetLastError();
    return Status(StatusCode::kUnavailable,
                  "the GNMR CUDA kernels have no code for CUDA device " + std::to_string(device) +
                      " (sm_" + std::to_string(major) + std::to_string(minor) +
                      "): built for CMAKE_CUDA_ARCHITECTURES=" GNMR_CUDA_ARCHITECTURES
                      "; rebuild with that architecture added (sm_80 or newer is needed)");
  }
  if (c != 0) return CudaError(static_cast<cudaError_t>(c), "kernel occupancy");
  return std::unique_ptr<GpuStats>(new GpuStats(std::move(impl)));
}

Status GpuStats::SetTable(const std::vector<std::vector<TensorRef>>& units) {
  Impl& m = *impl_;
  DeviceGuard guard(m.device);
  RelaxedCaptureMode relaxed;  // legal beside another thread's global-mode capture
  {
    MutexLock lock(m.mu);
    m.ready = false;  // until the new tables are complete
    m.ring.Reset();
  }
  m.WaitForOwnWork();  // nothing queued may use the old tables (not the whole device)
  cuda::HostTables h;
  Status s = cuda::BuildTables(
      units, m.device,
      [&](const void* p, size_t bytes, size_t align, const void** dev) {
        return cuda::CheckDeviceReadable(p, bytes, m.device, align, dev);
      },
      &h);
  if (!s.ok()) return s;
  // Device tables: kept when large enough, uploaded on the private stream.
  auto upload = [&](cuda::DevBuf& b, const void* src, size_t bytes) {
    Status st = b.Reserve(bytes);
    if (!st.ok() || bytes == 0) return st;
    const cudaError_t r = cudaMemcpyAsync(b.p, src, bytes, cudaMemcpyHostToDevice, m.setup_stream);
    return r == cudaSuccess ? Status::Ok() : CudaError(r, "cudaMemcpyAsync");
  };
  const size_t nu = h.units.size();
  if (!(s = upload(m.tensors, h.tensors.data(), h.tensors.size() * sizeof(cuda::DevTensor))).ok() ||
      !(s = upload(m.ptrs, h.ptrs.data(), h.ptrs.size() * sizeof(void*))).ok() ||
      !(s = upload(m.items, h.items.data(), h.items.size() * sizeof(cuda::DevItem))).ok() ||
      !(s = upload(m.segs, h.segs.data(), h.segs.size() * sizeof(cuda::DevSeg))).ok() ||
      !(s = upload(m.units, h.units.data(), nu * sizeof(cuda::DevUnit))).ok() ||
      !(s = m.item_out.Reserve(h.items.size() * sizeof(cuda::ItemOut))).ok() ||
      !(s = m.seg_out.Reserve(h.segs.size() * sizeof(cuda::SegOut))).ok() ||
      !(s = m.unit_out.Reserve(nu * sizeof(UnitStats) + 8)).ok() ||
      !(s = m.scales.Reserve(nu * sizeof(float))).ok() || !(s = m.replay_counter.Reserve(8)).ok()) {
    return s;
  }
  cudaError_t e = cudaMemsetAsync(m.replay_counter.p, 0, 8, m.setup_stream);  // stamps from 1
  if (e == cudaSuccess) e = cudaStreamSynchronize(m.setup_stream);
  if (e != cudaSuccess) return CudaError(e, "SetTable upload");
  m.slot_bytes = (nu * sizeof(UnitStats) + 8 + 63) / 64 * 64;
  m.stage_bytes = (h.ptrs.size() * sizeof(void*) + nu * sizeof(float) + 63) / 64 * 64;
  if (!(s = m.ring_host.Reserve((cuda::ResultRing::kSlots + 1) * m.slot_bytes)).ok() ||
      !(s = m.stage_host.Reserve(Impl::kStaging * m.stage_bytes)).ok() ||
      !(s = m.graph_stage.Reserve(h.ptrs.size() * sizeof(void*))).ok()) {
    return s;
  }
  std::memset(m.ring_host.p, 0, (cuda::ResultRing::kSlots + 1) * m.slot_bytes);
  m.current = h.ptrs;
  m.table_dirty = false;  // uploaded above
  m.graph_captured = false;
  m.n_units = nu;
  m.n_tensors = h.tensors.size();
  m.n_items = h.items.size();
  m.n_segs = h.segs.size();
  m.bytes.clear();
  for (const cuda::DevTensor& d : h.tensors) {
    m.bytes.push_back(d.numel * DTypeSize(static_cast<DType>(d.dtype)));
  }
  cuda::Tables& t = m.tables;
  t = cuda::Tables{};
  t.tensors = static_cast<const cuda::DevTensor*>(m.tensors.p);
  t.ptrs = static_cast<const unsigned char* const*>(m.ptrs.p);
  t.items = static_cast<const cuda::DevItem*>(m.items.p);
  t.segs = static_cast<const cuda::DevSeg*>(m.segs.p);
  t.units = static_cast<const cuda::DevUnit*>(m.units.p);
  t.item_out = static_cast<cuda::ItemOut*>(m.item_out.p);
  t.seg_out = static_cast<cuda::SegOut*>(m.seg_out.p);
  t.unit_out = static_cast<UnitStats*>(m.unit_out.p);
  t.n_items = m.n_items;
  t.n_segs = m.n_segs;
  t.n_units = static_cast<uint32_t>(nu);
  std::memcpy(t.item_range, h.item_range, sizeof t.item_range);
  std::memcpy(t.sat_begin, h.sat_begin, sizeof t.sat_begin);
  MutexLock lock(m.mu);
  m.ring.Reset();
  m.ready = true;
  return Status::Ok();
}

Status GpuStats::RefreshPointers(const std::vector<const void*>& pointers) {
  Impl& m = *impl_;
  if (!m.ready) return FailedPrecondition("GpuStats::RefreshPointers without a valid table");
  if (pointers.size() != m.n_tensors) {
    return InvalidArgument("RefreshPointers: " + std::to_string(pointers.size()) +
                           " pointers for " + std::to_string(m.n_tensors) + " tensors");
  }
  DeviceGuard guard(m.device);
  // Changed pointers are checked (and translated) before anything changes.
  std::vector<const void*> dev(pointers.size());
  for (size_t i = 0; i < pointers.size(); ++i) {
    dev[i] = m.current[i];
    if (m.bytes[i] == 0 || pointers[i] == m.current[i]) continue;
    Status st = cuda::CheckDeviceReadable(pointers[i], m.bytes[i], m.device, 1, &dev[i]);
    if (!st.ok()) {
      return InvalidArgument("RefreshPointers: tensor " + std::to_string(i) + ": " + st.message());
    }
  }
  if (m.graph_captured && m.n_tensors > 0) {
    // Replays read graph_stage when they run: rewrite it only if none is
    // in flight (never wait).
    RelaxedCaptureMode relaxed;
    const cudaError_t q = cudaEventQuery(m.events[Impl::kGraphSlot]);
    if (q == cudaErrorNotReady) {
      return Status(StatusCode::kUnavailable,
                    "RefreshPointers: a replay of a captured graph is in flight; refresh its "
                    "pointers once it has completed");
    }
    std::memcpy(m.graph_stage.p, dev.data(), dev.size() * sizeof(void*));
  }
  m.current = std::move(dev);
  m.table_dirty = true;
  return Status::Ok();
}

Status GpuStats::ApplyScale(const std::vector<float>& per_unit_scale, void* stream) {
  Impl& m = *impl_;
  if (!m.ready) return FailedPrecondition("GpuStats::ApplyScale without a valid table");
  if (per_unit_scale.size() != m.n_units) {
    return InvalidArgument("ApplyScale: " + std::to_string(per_unit_scale.size()) + " scales for " +
                           std::to_string(m.n_units) + " units");
  }
  bool any = false;
  for (float s : per_unit_scale) {
    if (!std::isfinite(s) || s < 0.0f) return InvalidArgument("ApplyScale: bad scale");
    any = any || s != 1.0f;
  }
  if (!any) return Status::Ok();
  DeviceGuard guard(m.device);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (IsCapturing(st)) return FailedPrecondition("ApplyScale on a capturing stream");
  unsigned char* slot = nullptr;
  int index = 0;
  GNMR_RETURN_IF_ERROR(m.AcquireStage(&slot, &index));
  cudaError_t e = cudaStreamWaitEvent(st, m.order_event, 0);  // after our previous work
  if (e == cudaSuccess) e = m.UploadStage(slot, index, per_unit_scale.data(), st);
  if (e != cudaSuccess) return CudaError(e, "ApplyScale upload");
  const int err = cuda::LaunchApply(m.tables, m.config, static_cast<const float*>(m.scales.p), st);
  if (err != 0) return CudaError(static_cast<cudaError_t>(err), "apply kernel");
  e = cudaEventRecord(m.order_event, st);
  return e == cudaSuccess ? Status::Ok() : CudaError(e, "cudaEventRecord");
}

int GpuStats::device() const { return impl_->device; }
size_t GpuStats::num_units() const { return impl_->n_units; }
size_t GpuStats::num_tensors() const { return impl_->n_tensors; }
uint64_t GpuStats::num_items() const { return impl_->n_items; }

}  // namespace gnmr
