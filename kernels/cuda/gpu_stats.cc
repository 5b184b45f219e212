// GpuStats: device tables, pinned result ring, events (gnmr/gpu_stats.h).
// Host code against the CUDA runtime (cudart only, never the driver
// library, so binaries start on machines without a driver).
#include "gnmr/gpu_stats.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>

#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/stats_kernels.h"
#include "kernels/stats_order.h"

namespace gnmr {
namespace {

using cuda::CudaError;
using cuda::DevBuf;
using cuda::DeviceGuard;
using cuda::RelaxedCaptureMode;
using cuda::DevItem;
using cuda::DevSeg;
using cuda::DevTensor;
using cuda::DevUnit;

}  // namespace

struct GpuStats::Impl {
  int device = 0;
  size_t n_units = 0, n_tensors = 0;
  uint64_t n_items = 0, n_segs = 0;
  DevBuf tensors, ptrs, items, segs, units, item_out, seg_out, unit_out, scales;
  cuda::Tables tables{};
  // Pinned ring of results, and of apply scales.
  UnitStats* ring = nullptr;
  float* scale_host = nullptr;
  const void** ptr_host = nullptr;  // pinned: uploaded by every launch
  // Slots 0..kRingSlots-1: launches in order; slot kRingSlots: captured.
  static constexpr int kGraphSlot = kRingSlots;
  cudaEvent_t events[kRingSlots + 1] = {};
  cudaEvent_t apply_event = nullptr;
  bool apply_pending = false;
  // False until a SetTable succeeds and while one runs (a failed one leaves
  // no half-built tables for Launch, Poll, ApplyScale or RefreshPointers).
  std::atomic<bool> ready{false};
  std::vector<uint64_t> numel;  // per tensor, SetTable order
  std::mutex mu;  // ring bookkeeping (Launch vs Poll)
  int64_t slot_step[kRingSlots + 1] = {};
  bool replay_pending = false;
  uint64_t next_launch = 0;  // sequence number of the next launch
  uint64_t next_poll = 0;    // oldest launch not yet polled

  ~Impl() {
    DeviceGuard guard(device);
    // The buffers are freed here, under the guard, not after this body.
    for (DevBuf* b : {&tensors, &ptrs, &items, &segs, &units, &item_out, &seg_out, &unit_out,
                      &scales}) {
      (void)b->Alloc(0);  // freeing: nothing to report
    }
    for (cudaEvent_t e : events) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (apply_event != nullptr) cudaEventDestroy(apply_event);
    if (ring != nullptr) cudaFreeHost(ring);
    if (scale_host != nullptr) cudaFreeHost(scale_host);
    if (ptr_host != nullptr) cudaFreeHost(ptr_host);
  }

  // Records `ev` on `st`; inside a stream capture as an external event
  // node, so graph replays record it too (Poll depends on it).
  static cudaError_t Record(cudaEvent_t ev, cudaStream_t st) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(st, &cs) != cudaSuccess) cs = cudaStreamCaptureStatusNone;
    return cs == cudaStreamCaptureStatusActive
               ? cudaEventRecordWithFlags(ev, st, cudaEventRecordExternal)
               : cudaEventRecord(ev, st);
  }

  // Stream-ordered upload of the pointer table (a graph replay repeats it,
  // so replays see refreshed pointers too).
  cudaError_t UploadPointers(cudaStream_t st) {
    if (n_tensors == 0) return cudaSuccess;
    return cudaMemcpyAsync(ptrs.p, ptr_host, n_tensors * sizeof(void*),
                           cudaMemcpyHostToDevice, st);
  }
};

GpuStats::GpuStats(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuStats::~GpuStats() = default;

StatusOr<std::unique_ptr<GpuStats>> GpuStats::Create(int device) {
  int count = 0;  // left unwritten on error (e.g. 35: no driver)
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count <= 0) {
    cudaGetLastError();  // clear the sticky-free error
    return Status(StatusCode::kUnavailable,
                  std::string("no CUDA device: ") +
                      (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices"));
  }
  if (device < 0 || device >= count) {
    return Status(StatusCode::kUnavailable,
                  "CUDA device " + std::to_string(device) + " out of range (" +
                      std::to_string(count) + " devices)");
  }
  DeviceGuard guard(device);
  int now = -1;
  if (cudaGetDevice(&now) != cudaSuccess || now != device) {
    cudaGetLastError();
    return Status(StatusCode::kUnavailable, "cannot make CUDA device " + std::to_string(device) +
                                                " current");
  }
  cudaError_t r = cudaSuccess;
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  for (cudaEvent_t& ev : impl->events) {
    r = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (r != cudaSuccess) return CudaError(r, "cudaEventCreate");
  }
  r = cudaEventCreateWithFlags(&impl->apply_event, cudaEventDisableTiming);
  if (r != cudaSuccess) return CudaError(r, "cudaEventCreate");
  return std::unique_ptr<GpuStats>(new GpuStats(std::move(impl)));
}

Status GpuStats::SetTable(const std::vector<std::vector<TensorRef>>& units) {
  Impl& m = *impl_;
  DeviceGuard guard(m.device);
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.ready = false;  // until the new tables are complete
    m.next_poll = m.next_launch;
    m.replay_pending = false;
  }
  cudaError_t e;
  {
    RelaxedCaptureMode relaxed;
    e = cudaDeviceSynchronize();  // nothing may use the old tables
  }
  if (e != cudaSuccess) return CudaError(e, "cudaDeviceSynchronize");
  std::vector<DevTensor> tensors;
  std::vector<const void*> ptrs;
  std::vector<DevItem> items;
  std::vector<DevSeg> segs;
  std::vector<DevUnit> dunits;
  for (size_t u = 0; u < units.size(); ++u) {
    dunits.push_back(DevUnit{static_cast<uint32_t>(tensors.size()),
                             static_cast<uint32_t>(units[u].size())});
    for (const TensorRef& t : units[u]) {
      const std::string name =
          "unit " + std::to_string(u) + " tensor " + std::to_string(tensors.size());
      if (DTypeSize(t.dtype) == 0) return InvalidArgument(name + ": unknown dtype");
      const bool fp8 = t.dtype == DType::kFp8E4M3 || t.dtype == DType::kFp8E5M2;
      const void* scale_dev = nullptr;
      if (fp8 && t.scale_inv_ptr != nullptr) {
        Status st = cuda::CheckDeviceReadable(t.scale_inv_ptr, m.device, alignof(float),
                                              &scale_dev);
        if (!st.ok()) return InvalidArgument(name + ": scale_inv_ptr: " + st.message());
      } else if (fp8 && !std::isfinite(t.scale_inv)) {
        return InvalidArgument(name + ": fp8 scale_inv is not finite");
      }
      if (t.numel > 0 && t.data == nullptr) return InvalidArgument(name + ": data is null");
      if (t.numel > 0 && t.device != m.device) {
        return InvalidArgument(name + ": not on CUDA device " + std::to_string(m.device));
      }
      const void* data_dev = nullptr;
      if (t.numel > 0) {
        Status st = cuda::CheckDeviceReadable(t.data, m.device, 1, &data_dev);
        if (!st.ok()) return InvalidArgument(name + ": data: " + st.message());
      }
      DevTensor d{};
      d.numel = t.numel;
      d.unit = static_cast<uint32_t>(u);
      d.scale_inv = t.scale_inv;
      d.scale_inv_ptr = static_cast<const float*>(scale_dev);
      d.dtype = static_cast<uint32_t>(t.dtype);
      d.first_seg = segs.size();
      const uint64_t first_item = items.size();
      const uint64_t n_items =
          (t.numel + stats_order::kItemElems - 1) / stats_order::kItemElems;
      for (uint64_t k = 0; k < n_items; ++k) {
        const uint64_t off = k * stats_order::kItemElems;
        const uint64_t n = t.numel - off < stats_order::kItemElems
                               ? t.numel - off
                               : stats_order::kItemElems;
        items.push_back(DevItem{off, static_cast<uint32_t>(tensors.size()),
                                static_cast<uint32_t>(n)});
      }
      for (uint64_t k = 0; k < n_items; k += cuda::kSegItems) {
        const uint64_t n = n_items - k < cuda::kSegItems ? n_items - k : cuda::kSegItems;
        segs.push_back(DevSeg{first_item + k, static_cast<uint32_t>(n), 0});
      }
      d.n_segs = static_cast<uint32_t>(segs.size() - d.first_seg);
      tensors.push_back(d);
      ptrs.push_back(data_dev);
    }
  }
  Status s;
  auto upload = [&](DevBuf& b, const void* src, size_t bytes) {
    Status st = b.Alloc(bytes);
    if (!st.ok() || bytes == 0) return st;
    cudaError_t r = cudaMemcpy(b.p, src, bytes, cudaMemcpyHostToDevice);
    return r == cudaSuccess ? Status::Ok() : CudaError(r, "cudaMemcpy");
  };
  if (!(s = upload(m.tensors, tensors.data(), tensors.size() * sizeof(DevTensor))).ok()) return s;
  if (!(s = upload(m.ptrs, ptrs.data(), ptrs.size() * sizeof(void*))).ok()) return s;
  if (!(s = upload(m.items, items.data(), items.size() * sizeof(DevItem))).ok()) return s;
  if (!(s = upload(m.segs, segs.data(), segs.size() * sizeof(DevSeg))).ok()) return s;
  if (!(s = upload(m.units, dunits.data(), dunits.size() * sizeof(DevUnit))).ok()) return s;
  if (!(s = m.item_out.Alloc(items.size() * sizeof(cuda::ItemOut))).ok()) return s;
  if (!(s = m.seg_out.Alloc(segs.size() * sizeof(cuda::SegOut))).ok()) return s;
  if (!(s = m.unit_out.Alloc(dunits.size() * sizeof(UnitStats))).ok()) return s;
  if (!(s = m.scales.Alloc(dunits.size() * sizeof(float))).ok()) return s;
  if (m.ring != nullptr) cudaFreeHost(m.ring);
  if (m.scale_host != nullptr) cudaFreeHost(m.scale_host);
  if (m.ptr_host != nullptr) cudaFreeHost(m.ptr_host);
  m.ring = nullptr;
  m.scale_host = nullptr;
  m.ptr_host = nullptr;
  m.apply_pending = false;
  const size_t nu = dunits.size() > 0 ? dunits.size() : 1;
  e = cudaMallocHost(reinterpret_cast<void**>(&m.ring), (kRingSlots + 1) * nu * sizeof(UnitStats));
  if (e != cudaSuccess) return CudaError(e, "cudaMallocHost");
  e = cudaMallocHost(reinterpret_cast<void**>(&m.scale_host), nu * sizeof(float));
  if (e != cudaSuccess) return CudaError(e, "cudaMallocHost");
  e = cudaMallocHost(reinterpret_cast<void**>(&m.ptr_host),
                     (ptrs.empty() ? 1 : ptrs.size()) * sizeof(void*));
  if (e != cudaSuccess) return CudaError(e, "cudaMallocHost");
  if (!ptrs.empty()) std::memcpy(m.ptr_host, ptrs.data(), ptrs.size() * sizeof(void*));
  m.n_units = dunits.size();
  m.n_tensors = tensors.size();
  m.n_items = items.size();
  m.n_segs = segs.size();
  m.tables = cuda::Tables{static_cast<const DevTensor*>(m.tensors.p),
                          static_cast<const unsigned char* const*>(m.ptrs.p),
                          static_cast<const DevItem*>(m.items.p),
                          static_cast<const DevSeg*>(m.segs.p),
                          static_cast<const DevUnit*>(m.units.p),
                          static_cast<cuda::ItemOut*>(m.item_out.p),
                          static_cast<cuda::SegOut*>(m.seg_out.p),
                          static_cast<UnitStats*>(m.unit_out.p),
                          m.n_items,
                          m.n_segs,
                          static_cast<uint32_t>(m.n_units)};
  m.numel.clear();
  for (const DevTensor& d : tensors) m.numel.push_back(d.numel);
  std::lock_guard<std::mutex> lock(m.mu);
  m.next_poll = m.next_launch;
  m.replay_pending = false;
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
    dev[i] = m.numel[i] == 0 ? nullptr : m.ptr_host[i];
    if (m.numel[i] == 0 || pointers[i] == m.ptr_host[i]) continue;
    Status st = cuda::CheckDeviceReadable(pointers[i], m.device, 1, &dev[i]);
    if (!st.ok()) {
      return InvalidArgument("RefreshPointers: tensor " + std::to_string(i) + ": " + st.message());
    }
  }
  RelaxedCaptureMode relaxed;
  // The staging buffer may still feed the previous launch's upload (it is
  // normally long done: it is the first thing that launch enqueued).
  uint64_t launched;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    launched = m.next_launch;
  }
  // (An error here is the stream's, reported by its owner: cleared so the
  // next launch is not blamed for it.)
  auto wait = [](cudaEvent_t ev) {
    if (cudaEventSynchronize(ev) != cudaSuccess) cudaGetLastError();
  };
  if (launched > 0) wait(m.events[(launched - 1) % kRingSlots]);
  wait(m.events[Impl::kGraphSlot]);  // done at once if never replayed
  if (m.apply_pending) wait(m.apply_event);
  std::memcpy(m.ptr_host, dev.data(), dev.size() * sizeof(void*));
  return Status::Ok();
}

Status GpuStats::Launch(void* stream, int64_t step) {
  Impl& m = *impl_;
  if (!m.ready) return FailedPrecondition("GpuStats::Launch without a valid table (SetTable)");
  DeviceGuard guard(m.device);  // a null stream is then this device's
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  cudaError_t pe = m.UploadPointers(st);
  if (pe != cudaSuccess) return CudaError(pe, "cudaMemcpyAsync");
  const int err = cuda::LaunchStats(m.tables, stream);
  if (err != 0) return CudaError(static_cast<cudaError_t>(err), "stats kernels");
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(st, &cs) != cudaSuccess) cs = cudaStreamCaptureStatusNone;
  const bool captured = cs == cudaStreamCaptureStatusActive;
  // The slot this launch fills. A full ring drops its oldest unread launch
  // first (Poll never picks that slot again); the launch itself is
  // committed (next_launch) only once its copy and event are enqueued, so a
  // failure cannot leave Poll a slot with an old event and a new step.
  int slot = Impl::kGraphSlot;
  uint64_t seq = 0;
  if (!captured) {
    std::lock_guard<std::mutex> lock(m.mu);
    seq = m.next_launch;
    if (m.next_launch + 1 - m.next_poll > static_cast<uint64_t>(kRingSlots)) {
      m.next_poll = m.next_launch + 1 - kRingSlots;  // drop the oldest unread
    }
    slot = static_cast<int>(seq % kRingSlots);
  }
  if (m.n_units > 0) {
    cudaError_t e = cudaMemcpyAsync(m.ring + slot * m.n_units, m.unit_out.p,
                                    m.n_units * sizeof(UnitStats), cudaMemcpyDeviceToHost, st);
    if (e != cudaSuccess) return CudaError(e, "cudaMemcpyAsync");
  }
  const cudaError_t e = Impl::Record(m.events[slot], st);
  if (e != cudaSuccess) return CudaError(e, "cudaEventRecord");
  std::lock_guard<std::mutex> lock(m.mu);
  if (captured) {
    m.slot_step[slot] = step;
  } else {
    m.slot_step[slot] = step >= 0 ? step : static_cast<int64_t>(seq);
    m.next_launch = seq + 1;
  }
  return Status::Ok();
}

void GpuStats::OnGraphReplay(int64_t step) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  m.slot_step[Impl::kGraphSlot] = step;
  m.replay_pending = true;  // a newer replay supersedes an unread one
}

bool GpuStats::Poll(int64_t* slot_step, std::vector<UnitStats>* stats) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  if (!m.ready) return false;
  RelaxedCaptureMode relaxed;  // Poll runs beside the trainer's captures
  int slot;
  if (m.next_poll != m.next_launch) {
    slot = static_cast<int>(m.next_poll % kRingSlots);
  } else if (m.replay_pending) {
    slot = Impl::kGraphSlot;
  } else {
    return false;
  }
  const cudaError_t e = cudaEventQuery(m.events[slot]);
  if (e != cudaSuccess) {
    if (e != cudaErrorNotReady) cudaGetLastError();
    return false;
  }
  stats->assign(m.ring + slot * m.n_units, m.ring + (slot + 1) * m.n_units);
  *slot_step = m.slot_step[slot];
  if (slot == Impl::kGraphSlot) {
    m.replay_pending = false;
  } else {
    ++m.next_poll;
  }
  return true;
}

Status GpuStats::ApplyScale(const std::vector<float>& per_unit_scale, void* stream) {
  Impl& m = *impl_;
  if (!m.ready) return FailedPrecondition("GpuStats::ApplyScale without a valid table");
  if (per_unit_scale.size() != m.n_units) {
    return InvalidArgument("ApplyScale: " + std::to_string(per_unit_scale.size()) +
                           " scales for " + std::to_string(m.n_units) + " units");
  }
  bool any = false;
  for (float s : per_unit_scale) {
    if (!std::isfinite(s) || s < 0.0f) return InvalidArgument("ApplyScale: bad scale");
    any = any || s != 1.0f;
  }
  if (!any) return Status::Ok();
  DeviceGuard guard(m.device);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  // The pinned staging buffer may still feed the previous upload.
  if (m.apply_pending) {
    RelaxedCaptureMode relaxed;
    if (cudaEventSynchronize(m.apply_event) != cudaSuccess) cudaGetLastError();
  }
  std::memcpy(m.scale_host, per_unit_scale.data(), m.n_units * sizeof(float));
  cudaError_t e = cudaMemcpyAsync(m.scales.p, m.scale_host, m.n_units * sizeof(float),
                                  cudaMemcpyHostToDevice, st);
  if (e != cudaSuccess) return CudaError(e, "cudaMemcpyAsync");
  e = m.UploadPointers(st);
  if (e != cudaSuccess) return CudaError(e, "cudaMemcpyAsync");
  const int err = cuda::LaunchApply(m.tables, static_cast<const float*>(m.scales.p), stream);
  if (err != 0) return CudaError(static_cast<cudaError_t>(err), "apply kernel");
  e = Impl::Record(m.apply_event, st);
  if (e != cudaSuccess) return CudaError(e, "cudaEventRecord");
  m.apply_pending = true;
  return Status::Ok();
}

int GpuStats::device() const { return impl_->device; }
size_t GpuStats::num_units() const { return impl_->n_units; }
size_t GpuStats::num_tensors() const { return impl_->n_tensors; }
uint64_t GpuStats::num_items() const { return impl_->n_items; }

}  // namespace gnmr
