// Client::Observe and MarkInactive: a step's report. Observe computes the
// host units' statistics on the calling thread into a preallocated report
// slot, with what the calls since the previous Observe gathered
// (NextReportInputs), and queues it. It never touches the network nor
// allocates in steady state.
//
// Device units (tensors on a CUDA device) go through GpuPath: Observe fills
// the host units' columns, launches the device units on the caller's stream
// and parks the report slot; it is published when the launch completes
// (polled by the I/O thread and by the next Observe).
#include <chrono>
#include <cmath>
#include <string>

#include "client/src/client_impl.h"
#include "gnmr/client.h"
#include "kernels/cpu_stats.h"

namespace gnmr {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

Status Client::Observe(int64_t step) { return Observe(step, nullptr); }

Status Client::Observe(int64_t step, void* stream) {
  return Guard([&] {
    Impl& m = *impl_;
    if (!m.started) return FailedPrecondition("Observe before Start");
    if (step < 0 || step <= m.observed.step()) {
      return InvalidArgument("Observe(" + std::to_string(step) + "): steps must increase (last " +
                             std::to_string(m.observed.step()) + ")");
    }
    // Results of earlier launches first (frees their slots; cheap queries).
    if (m.any_device) m.gpu->Drain(false);
    Report* r = m.outbox->Acquire();
    const Clock::time_point t0 = Clock::now();
    bool nonfinite = false;
    // The inactive marks and the forward statistics; ObserveForward's and
    // ObserveUnit's host time belongs to this step's statistics as well.
    const int64_t gathered_nanos = m.next_report.MoveInto(r);
    for (UnitHandle i : m.host_units) {
      const UnitRegistry::Unit& u = m.units.unit(i);
      UnitStats st;
      Status s;
      const UnitStats* early = m.next_report.TakeEarly(i);
      if (r->inactive[i]) {
        // nothing to report: zeros, not computed
      } else if (early != nullptr) {
        st = *early;  // ObserveUnit's: the same kernels on the same memory
      } else {
        s = cpu::ComputeStats(u.tensors.data(), u.tensors.size(), &st);
      }
      if (!s.ok()) {  // cannot happen: tensors are checked when set
        m.outbox->Abandon(r);
        return Status(s.code(), "unit " + u.name + ": " + s.message());
      }
      r->sumsq[i] = st.sumsq;
      r->amax[i] = st.amax;
      r->nonfinite[i] = st.nonfinite;
      r->zeros[i] = st.zeros;
      r->saturated[i] = st.saturated;
      m.observed.SetHostNorm(i, std::sqrt(st.sumsq * u.shard_count));
      nonfinite = nonfinite || st.nonfinite > 0 || !std::isfinite(st.sumsq);
    }
    r->step = step;
    r->missed_decisions = m.counters.missed_for_report();
    r->stats_gpu_seconds = 0.0;
    r->overhead_source = static_cast<int>(OverheadSource::kHostWall);
    r->overhead_step = step;
    if (m.any_device && !m.stopped) {
      // Device units: the launch's columns and overhead come with its
      // results; the host time spent here is the enqueue.
      // Parks or gives back r: from here on r is not ours to touch.
      Status g = m.gpu->Launch(stream, step, t0, r);
      const Clock::time_point t1 = Clock::now();
      m.counters.AddStatsNanos(
          std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
      if (!g.ok()) return g;  // this step goes unreported; nothing else changes
      m.observed.Take(step, t0, nonfinite);
      m.counters.CountReportEnqueued();
      m.RecordObserved(step);
      return Status::Ok();
    }
    const Clock::time_point t1 = Clock::now();
    // The forward statistics' host time belongs to this step's overhead too.
    const double stats_seconds =
        std::chrono::duration<double>(t1 - t0).count() + static_cast<double>(gathered_nanos) * 1e-9;
    const double step_seconds = m.observed.SecondsSinceStart(t0);
    r->stats_seconds = stats_seconds;
    r->overhead_ratio = step_seconds > 0.0 ? stats_seconds / step_seconds : 0.0;
    m.observed.Take(step, t0, nonfinite);
    m.counters.AddStatsNanos(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    m.counters.SetHostOverhead(r->overhead_ratio, step);
    if (m.stopped) {
      m.outbox->Abandon(r);
      return Status::Ok();
    }
    m.outbox->Publish(r);
    m.counters.CountReportEnqueued();
    m.RecordObserved(step);
    return Status::Ok();
  });
}

Status Client::MarkInactive(UnitHandle unit) {
  return Guard([&] {
    Impl& m = *impl_;
    GNMR_RETURN_IF_ERROR(m.CheckHandle("MarkInactive", unit));
    m.next_report.MarkInactive(unit, m.units.size());
    return Status::Ok();
  });
}

}  // namespace gnmr
