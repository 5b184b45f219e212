#include "client/src/forward_device.h"

#include <cstring>
#include <utility>

#include <spdlog/spdlog.h>

namespace gnmr {
namespace {

// Everything of a tensor the backend's table holds, i.e. all but the
// data pointer (RefreshPointers changes that between launches).
bool SameLayout(const std::vector<TensorRef>& layout, const TensorRef* tensors, size_t count) {
  if (layout.size() != count) return false;
  for (size_t i = 0; i < count; ++i) {
    const TensorRef& a = layout[i];
    const TensorRef& b = tensors[i];
    if (a.numel != b.numel || a.dtype != b.dtype || a.device != b.device ||
        a.scale_inv_ptr != b.scale_inv_ptr ||
        std::memcmp(&a.scale_inv, &b.scale_inv, sizeof(a.scale_inv)) != 0 ||
        std::memcmp(&a.saturation_magnitude, &b.saturation_magnitude,
                    sizeof(a.saturation_magnitude)) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace

DeviceForward::DeviceForward(size_t units, BackendFactory factory)
    : factory_(std::move(factory)), backends_(units), unit_dropped_(units, 0) {
  rows_.Resize(units);
}

Status DeviceForward::Observe(uint32_t unit, const TensorRef* tensors, size_t count, void* stream) {
  PollUnit(unit);  // frees its slots of completed launches (not every unit's: per call)
  const uint64_t id = first_id_ + calls_.size();
  if (id - closed_end_ >= kMaxWindowCalls) {  // this window will carry no rows
    open_overflow_ = true;
    ++dropped_;
    return Status::Ok();
  }
  calls_.push_back(Call{unit, false, false, UnitStats{}});
  Status why;
  Backend* b = Acquire(unit, tensors, count, &why);
  if (b == nullptr) {
    Drop(unit);
    return why;
  }
  pointer_scratch_.clear();
  for (size_t i = 0; i < count; ++i) pointer_scratch_.push_back(tensors[i].data);
  Status s = b->backend->RefreshPointers(pointer_scratch_);
  if (s.ok()) s = b->backend->Launch(stream, static_cast<int64_t>(id));
  if (!s.ok()) {
    Drop(unit);
    // Unavailable: the device is far behind (staging slots busy); not the
    // caller's mistake, the call is only counted.
    return s.code() == StatusCode::kUnavailable ? Status::Ok() : s;
  }
  ++b->pending;
  b->last_use = id + 1;
  return Status::Ok();
}

DeviceForward::Backend* DeviceForward::Acquire(uint32_t unit, const TensorRef* tensors,
                                               size_t count, Status* why) {
  std::vector<Backend>& mine = backends_[unit];
  for (Backend& b : mine) {
    if (b.pending < DeviceStatsBackend::kMaxPending && SameLayout(b.layout, tensors, count)) {
      return &b;
    }
  }
  Backend* fresh = nullptr;
  const bool may_make = mine.size() < static_cast<size_t>(kBackendsPerUnit);  // a table per shape
  if (may_make && backend_count_ >= kMaxBackends && !warned_cap_) {
    warned_cap_ = true;
    spdlog::warn(
        "gnmr client: {} device forward backends in use (the cap); units take their idle ones "
        "for new shapes, and calls that find none are dropped (forward_calls_dropped)",
        kMaxBackends);
  }
  if (may_make && backend_count_ < kMaxBackends) {
    StatusOr<std::unique_ptr<DeviceStatsBackend>> made = factory_();
    if (!made.ok()) {
      *why = made.status();
      return nullptr;
    }
    mine.push_back(Backend{std::move(made).value(), {}, 0, 0});
    ++backend_count_;
    fresh = &mine.back();
  } else {  // the least recently used idle one
    for (Backend& b : mine) {
      if (b.pending == 0 && (fresh == nullptr || b.last_use < fresh->last_use)) fresh = &b;
    }
  }
  if (fresh == nullptr) return nullptr;  // every backend busy: dropped, counted
  std::vector<TensorRef> layout(tensors, tensors + count);
  Status s = fresh->backend->SetTable({layout});
  if (!s.ok()) {
    fresh->layout.clear();  // no table left: never matches a layout
    *why = s;
    return nullptr;
  }
  fresh->layout = std::move(layout);
  return fresh;
}

void DeviceForward::Drop(uint32_t unit) {
  Call& c = calls_.back();
  c.unit = unit;
  c.done = true;
  c.dropped = true;
  ++dropped_;
}

void DeviceForward::CloseWindow(int64_t step) {
  const uint64_t end = first_id_ + calls_.size();
  if (end == closed_end_) return;  // no call: nothing to wait for or add
  windows_.push_back(Window{step, end, open_overflow_});
  closed_end_ = end;
  open_overflow_ = false;
}

void DeviceForward::Poll() {
  for (uint32_t u = 0; u < backends_.size(); ++u) PollUnit(u);
}

void DeviceForward::PollUnit(uint32_t unit) {
  for (Backend& b : backends_[unit]) {
    int64_t tag = -1;
    double seconds = -1.0;
    while (b.pending > 0 && b.backend->Poll(&tag, &poll_scratch_, &seconds)) {
      --b.pending;
      if (seconds > 0.0) gpu_seconds_ += seconds;
      const uint64_t id = static_cast<uint64_t>(tag);
      if (tag < 0 || id < first_id_ || id - first_id_ >= calls_.size()) continue;  // forgotten
      Call& c = calls_[id - first_id_];
      if (c.done) continue;
      c.done = true;
      if (!poll_scratch_.empty()) c.stats = poll_scratch_[0];
    }
  }
}

bool DeviceForward::Ready(int64_t step) const {
  uint64_t begin = first_id_;
  for (const Window& w : windows_) {
    if (w.step > step) return true;
    if (w.step == step) {
      for (uint64_t id = begin; id < w.end; ++id) {
        if (!calls_[id - first_id_].done) return false;
      }
      return true;
    }
    begin = w.end;
  }
  return true;
}

void DeviceForward::MoveInto(int64_t step, Report* r) {
  while (!windows_.empty() && windows_.front().step < step) {  // their reports are gone
    ForgetCalls(windows_.front().end);
    windows_.pop_front();
  }
  if (windows_.empty() || windows_.front().step != step) return;
  const uint64_t end = windows_.front().end;
  const size_t n = static_cast<size_t>(end - first_id_);
  for (size_t i = 0; i < n; ++i) {
    const Call& c = calls_[i];
    if (c.dropped || !c.done || windows_.front().overflow) unit_dropped_[c.unit] = 1;
  }
  for (size_t i = 0; i < n; ++i) {
    const Call& c = calls_[i];
    if (!unit_dropped_[c.unit]) rows_.Add(c.unit, c.stats);
  }
  for (size_t i = 0; i < n; ++i) unit_dropped_[calls_[i].unit] = 0;
  rows_.MergeInto(r);
  ForgetCalls(end);
  windows_.pop_front();
}

void DeviceForward::ForgetCalls(uint64_t end) {
  while (first_id_ < end && !calls_.empty()) {
    calls_.pop_front();
    ++first_id_;
  }
}

}  // namespace gnmr
