// Client::ObserveForward and ObserveBackward: the quantizers' outputs for
// the forward and backward channels (docs/controller.md, "Forward channel"
// and "Backward channel"; docs/statistics.md, "Forward columns" and
// "Backward columns"). Computed on the training thread at the call, when
// the tensors exist (activations and gradients are gone or reused by the
// time Observe runs), and gathered (NextReportInputs, ForwardAccumulator,
// BackwardAccumulator) until the next Observe moves them into its report.
#include <chrono>
#include <string>

#include "client/src/client_impl.h"
#include "client/src/forward_stats.h"
#include "gnmr/client.h"
#include "kernels/block_stats.h"
#include "kernels/cpu_stats.h"

namespace gnmr {
namespace {

// Runs `compute` (one call's statistics), counts its host time into the
// next report's stats_seconds, and names the call and unit in its error.
template <typename Compute>
Status TimedForward(Client::Impl& m, UnitHandle unit, const char* call, Compute&& compute) {
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = compute();
  const int64_t nanos =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  m.next_report.AddHostNanos(nanos);
  m.counters.AddStatsNanos(nanos);
  if (s.ok()) return s;
  return Status(s.code(),
                std::string(call) + ": unit " + m.units.unit(unit).name + ": " + s.message());
}

// The checks ObserveBackward and ObserveBackwardBlocks share: started, a
// known handle, tensors given, host memory.
template <typename Tensor>
Status CheckBackward(Client::Impl& m, const char* call, UnitHandle unit, const Tensor* tensors,
                     size_t count) {
  if (!m.started) return FailedPrecondition(std::string(call) + " before Start");
  GNMR_RETURN_IF_ERROR(m.CheckHandle(call, unit));
  if (count > 0 && tensors == nullptr) {
    return InvalidArgument(std::string(call) + ": tensors is null with count " +
                           std::to_string(count));
  }
  for (size_t i = 0; i < count; ++i) {
    if (tensors[i].device != kHostDevice) {
      return Unimplemented(std::string(call) + ": unit " + m.units.unit(unit).name + ": tensor " +
                           std::to_string(i) + " is on CUDA device " +
                           std::to_string(tensors[i].device) +
                           ": backward tensors are read from host memory only "
                           "(docs/statistics.md, \"Backward columns\")");
    }
  }
  return Status::Ok();
}

}  // namespace

Status Client::ObserveBackward(UnitHandle unit, const TensorRef* tensors, size_t count) {
  return Guard([&] {
    Impl& m = *impl_;
    GNMR_RETURN_IF_ERROR(CheckBackward(m, "ObserveBackward", unit, tensors, count));
    if (m.stopped) return Status::Ok();
    return TimedForward(m, unit, "ObserveBackward", [&] {
      UnitStats st;
      const Status s = cpu::ComputeStats(tensors, count, &st);
      if (s.ok()) m.next_report.AddBackward(unit, st);
      return s;
    });
  });
}

Status Client::ObserveBackwardBlocks(UnitHandle unit, const BlockTensorRef* tensors, size_t count) {
  return Guard([&] {
    Impl& m = *impl_;
    GNMR_RETURN_IF_ERROR(CheckBackward(m, "ObserveBackwardBlocks", unit, tensors, count));
    if (m.stopped) return Status::Ok();
    return TimedForward(m, unit, "ObserveBackwardBlocks", [&] {
      BlockStats b;
      const Status s = cpu::ComputeBlockStats(tensors, count, &b);
      if (s.ok()) m.next_report.AddBackward(unit, ElementStats(b));
      return s;
    });
  });
}

Status Client::ObserveForward(UnitHandle unit, const std::vector<TensorRef>& tensors) {
  return ObserveForward(unit, tensors.data(), tensors.size());
}

Status Client::ObserveForward(UnitHandle unit, const TensorRef* tensors, size_t count) {
  return ObserveForward(unit, tensors, count, nullptr);
}

Status Client::ObserveForward(UnitHandle unit, const TensorRef* tensors, size_t count,
                              void* stream) {
  return Guard([&] {
    Impl& m = *impl_;
    if (!m.started) return FailedPrecondition("ObserveForward before Start");
    GNMR_RETURN_IF_ERROR(m.CheckHandle("ObserveForward", unit));
    if (count > 0 && tensors == nullptr) {
      return InvalidArgument("ObserveForward: tensors is null with count " + std::to_string(count));
    }
    const int32_t device = count > 0 ? tensors[0].device : kHostDevice;
    for (size_t i = 1; i < count; ++i) {
      if (tensors[i].device != device) {
        return InvalidArgument(
            "ObserveForward: unit " + m.units.unit(unit).name + ": tensor " + std::to_string(i) +
            " is on device " + std::to_string(tensors[i].device) + ", tensor 0 on " +
            std::to_string(device) + ": one call's tensors share a device (-1: host)");
      }
    }
    if (device != kHostDevice && (!m.any_device || m.gpu->device() != device)) {
      return InvalidArgument("ObserveForward: unit " + m.units.unit(unit).name +
                             ": tensors on CUDA device " + std::to_string(device) + ", but " +
                             (m.any_device ? "this client's device units are on device " +
                                                 std::to_string(m.gpu->device())
                                           : std::string("this client has no device units")) +
                             ": forward tensors on CUDA ride the GPU path of the unit's gradients "
                             "(docs/statistics.md, \"Forward columns\")");
    }
    if (m.stopped) return Status::Ok();
    return TimedForward(m, unit, "ObserveForward", [&] {
      if (device != kHostDevice) {  // enqueued on `stream`; the report waits for it
        return m.gpu->ObserveForward(unit, tensors, count, stream);
      }
      UnitStats st;
      const Status s = cpu::ComputeStats(tensors, count, &st);
      if (s.ok()) m.next_report.AddForward(unit, st);
      return s;
    });
  });
}

Status Client::ObserveForwardBlocks(UnitHandle unit, const BlockTensorRef* tensors, size_t count) {
  return Guard([&] {
    Impl& m = *impl_;
    if (!m.started) return FailedPrecondition("ObserveForwardBlocks before Start");
    GNMR_RETURN_IF_ERROR(m.CheckHandle("ObserveForwardBlocks", unit));
    if (count > 0 && tensors == nullptr) {
      return InvalidArgument("ObserveForwardBlocks: tensors is null with count " +
                             std::to_string(count));
    }
    for (size_t i = 0; i < count; ++i) {
      if (tensors[i].device != kHostDevice) {
        return Unimplemented("ObserveForwardBlocks: unit " + m.units.unit(unit).name + ": tensor " +
                             std::to_string(i) + " is on CUDA device " +
                             std::to_string(tensors[i].device) +
                             ": block-scaled forward tensors are read from host memory only "
                             "(docs/statistics.md, \"Block-scaled formats\")");
      }
    }
    if (m.stopped) return Status::Ok();
    return TimedForward(m, unit, "ObserveForwardBlocks", [&] {
      BlockStats b;
      const Status s = cpu::ComputeBlockStats(tensors, count, &b);
      // The elements the source figures are of: those of the tensors that
      // came with a source (ComputeBlockStats checked each size).
      uint64_t source_numel = 0;
      for (size_t i = 0; i < count; ++i) {
        if (tensors[i].source != nullptr) source_numel += tensors[i].rows * tensors[i].cols;
      }
      if (s.ok()) m.next_report.AddForwardBlocks(unit, b, source_numel);
      return s;
    });
  });
}

}  // namespace gnmr
