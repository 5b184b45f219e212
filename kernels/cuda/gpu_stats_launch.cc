// GpuStats: launches, graph replays, results (kernels/gpu_stats.h; the state
// is described in gpu_stats_impl.h).
#include <cstring>

#include <cuda_runtime.h>

#include "kernels/cuda/gpu_stats_impl.h"

namespace gnmr {

using cuda::CudaError;
using cuda::DeviceGuard;
using cuda::RelaxedCaptureMode;

Status GpuStats::Launch(void* stream, int64_t step, void* start_event) {
  Impl& m = *impl_;
  if (!m.ready) return FailedPrecondition("GpuStats::Launch without a valid table (SetTable)");
  DeviceGuard guard(m.device);  // a null stream is then this device's
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const bool captured = IsCapturing(st);
  // Pointers first: a regular launch needs a free staging slot (checked
  // before anything is enqueued, so a refusal leaves no trace).
  unsigned char* stage = nullptr;
  int stage_index = 0;
  if (!captured && m.table_dirty) {
    GNMR_RETURN_IF_ERROR(m.AcquireStage(&stage, &stage_index));
  }
  // After our previous operation, on whatever stream it ran (in a capture:
  // an external event node, so every replay waits for it too).
  cudaError_t e = cudaStreamWaitEvent(st, m.order_event,
                                      captured ? cudaEventWaitExternal : cudaEventWaitDefault);
  if (e != cudaSuccess) return CudaError(e, "cudaStreamWaitEvent");
  if (start_event != nullptr && !captured) {
    e = cudaEventRecord(static_cast<cudaEvent_t>(start_event), st);
    if (e != cudaSuccess) return CudaError(e, "cudaEventRecord");
  }
  if (captured) {
    // Replays upload from graph_stage at replay time (its address is in
    // the graph); RefreshPointers keeps it current.
    if (m.n_tensors > 0) {
      std::memcpy(m.graph_stage.p, m.current.data(), m.n_tensors * sizeof(void*));
      e = cudaMemcpyAsync(m.ptrs.p, m.graph_stage.p, m.n_tensors * sizeof(void*),
                          cudaMemcpyHostToDevice, st);
      if (e != cudaSuccess) return CudaError(e, "cudaMemcpyAsync");
    }
  } else if (stage != nullptr) {
    e = m.UploadStage(stage, stage_index, nullptr, st);
    if (e != cudaSuccess) return CudaError(e, "pointer upload");
  }
  const int err = cuda::LaunchStats(
      m.tables, m.config, captured ? static_cast<uint64_t*>(m.replay_counter.p) : nullptr, st);
  if (err != 0) return CudaError(static_cast<cudaError_t>(err), "stats kernels");
  uint64_t seq = 0;
  int slot = Impl::kGraphSlot;
  if (!captured) {
    MutexLock lock(m.mu);
    seq = m.ring.next_sequence();
    slot = cuda::ResultRing::SlotOf(seq);
  }
  e = cudaMemcpyAsync(m.ring_host.p + slot * m.slot_bytes, m.unit_out.p,
                      m.n_units * sizeof(UnitStats) + 8, cudaMemcpyDeviceToHost, st);
  if (e != cudaSuccess) return CudaError(e, "cudaMemcpyAsync");
  if (!captured) {
    // The copy is queued: the slot is this launch's from now on.
    MutexLock lock(m.mu);
    m.ring.Commit(step >= 0 ? step : static_cast<int64_t>(seq));
  }
  e = RecordEvent(m.events[slot], st, captured);
  if (e != cudaSuccess) {
    if (!captured) {
      MutexLock lock(m.mu);
      m.ring.Untrack(seq);  // Poll could not tell when the slot is filled
    }
    return CudaError(e, "cudaEventRecord");
  }
  e = RecordEvent(m.order_event, st, captured);
  if (e != cudaSuccess) return CudaError(e, "cudaEventRecord");
  if (captured) m.graph_captured = true;
  return Status::Ok();
}

void GpuStats::OnGraphReplay(int64_t step) {
  Impl& m = *impl_;
  m.table_dirty = true;  // the replay leaves graph_stage's pointers in the device table
  MutexLock lock(m.mu);
  m.ring.RegisterReplay(step);
}

bool GpuStats::Poll(int64_t* slot_step, std::vector<UnitStats>* stats, uint64_t* sequence) {
  Impl& m = *impl_;
  DeviceGuard guard(m.device);  // the I/O thread has no context of its own
  RelaxedCaptureMode relaxed;   // Poll runs beside the trainer's captures
  MutexLock lock(m.mu);
  if (!m.ready) return false;
  uint64_t seq = 0;
  int slot = 0;
  bool tracked = false;
  while (m.ring.Oldest(&seq, &slot, &tracked)) {
    if (!tracked) {
      m.ring.PopOldest();  // its completion cannot be known: lost
      continue;
    }
    if (cudaEventQuery(m.events[slot]) != cudaSuccess) return false;
    const UnitStats* s = m.SlotStats(slot);
    stats->assign(s, s + m.n_units);
    *slot_step = m.ring.StepOf(seq);
    if (sequence != nullptr) *sequence = seq;
    m.ring.PopOldest();
    return true;
  }
  if (!m.ring.ReplayPending()) return false;
  if (cudaEventQuery(m.events[Impl::kGraphSlot]) != cudaSuccess) return false;
  int64_t step = -1;
  if (m.ring.CheckReplay(m.SlotStamp(Impl::kGraphSlot), &step) !=
      cuda::ResultRing::Replay::kDeliver) {
    return false;
  }
  const UnitStats* s = m.SlotStats(Impl::kGraphSlot);
  stats->assign(s, s + m.n_units);
  *slot_step = step;
  if (sequence != nullptr) *sequence = ~uint64_t{0};
  return true;
}

uint64_t GpuStats::next_sequence() const {
  MutexLock lock(impl_->mu);
  return impl_->ring.next_sequence();
}

bool GpuStats::OldestUnread(uint64_t* sequence) const {
  MutexLock lock(impl_->mu);
  int slot = 0;
  bool tracked = false;
  return impl_->ready && impl_->ring.Oldest(sequence, &slot, &tracked);
}

void GpuStats::WaitOldest() {
  Impl& m = *impl_;
  DeviceGuard guard(m.device);
  RelaxedCaptureMode relaxed;
  cudaEvent_t ev = nullptr;
  {
    MutexLock lock(m.mu);
    if (!m.ready) return;
    uint64_t seq = 0;
    int slot = 0;
    bool tracked = false;
    if (m.ring.Oldest(&seq, &slot, &tracked)) {
      if (tracked) ev = m.events[slot];
    } else if (m.ring.ReplayPending()) {
      ev = m.events[Impl::kGraphSlot];
    }
  }
  if (ev != nullptr) cudaEventSynchronize(ev);  // outside the lock: Poll goes on
}

}  // namespace gnmr
