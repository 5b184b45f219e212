// Client::ObserveUnit: one host unit's statistics for the step in progress,
// computed before Observe (overlap with backward: a framework's "gradient
// ready" hook calls it while backward still runs for the other units).
// Observe then takes the stored result instead of computing the unit, so the
// report is the one Observe alone would have sent, bit for bit: the same
// cpu::ComputeStats on the same memory.
#include <chrono>
#include <string>

#include "client/src/client_impl.h"
#include "gnmr/client.h"
#include "kernels/cpu_stats.h"

namespace gnmr {

Status Client::ObserveUnit(UnitHandle unit) {
  return Guard([&] {
    Impl& m = *impl_;
    if (!m.started) return FailedPrecondition("ObserveUnit before Start");
    GNMR_RETURN_IF_ERROR(m.CheckHandle("ObserveUnit", unit));
    const UnitRegistry::Unit& u = m.units.unit(unit);
    if (u.device != kHostDevice) {
      // One launch per Observe covers every device unit; a launch per unit
      // on the current stream is the GPU design still to measure.
      return Unimplemented("ObserveUnit: unit " + u.name +
                           " is on a CUDA device; device units are launched by Observe");
    }
    const auto t0 = std::chrono::steady_clock::now();
    UnitStats st;
    Status s = cpu::ComputeStats(u.tensors.data(), u.tensors.size(), &st);
    const int64_t nanos =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    m.next_report.AddHostNanos(nanos);
    m.counters.AddStatsNanos(nanos);
    if (!s.ok()) {  // cannot happen: tensors are checked when set
      m.next_report.ForgetEarly(unit);
      return Status(s.code(), "ObserveUnit: unit " + u.name + ": " + s.message());
    }
    m.next_report.SetEarly(unit, st);
    return Status::Ok();
  });
}

}  // namespace gnmr
