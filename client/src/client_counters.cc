// The read-only views of gnmr::Client: counters, units, options.
#include <mutex>

#include "client/src/client_impl.h"

namespace gnmr {

ClientCounters Client::Counters() const {
  const Impl& m = *impl_;
  const SharedState& sh = m.shared;
  ClientCounters c;
  c.reports_enqueued = m.reports_enqueued.load();
  c.reports_sent = sh.reports_sent.load();
  c.reports_dropped = m.outbox ? m.outbox->reports_dropped() : 0;
  c.acks_sent = sh.acks_sent.load();
  c.acks_dropped = m.outbox ? m.outbox->acks_dropped() : 0;
  c.decisions_received = sh.decisions_received.load();
  c.decisions_rejected = sh.decisions_rejected.load();
  c.missed_decisions = m.missed.load();
  c.registrations = sh.registrations.load();
  c.reconnects = sh.reconnects.load();
  c.connect_failures = sh.connect_failures.load();
  c.stats_seconds = static_cast<double>(m.stats_nanos.load()) * 1e-9;
  if (m.any_device) {
    c.stats_gpu_seconds = m.gpu->stats_gpu_seconds();
    c.overhead_source = OverheadSource::kUnavailable;
    c.overhead_ratio = 0.0;
    c.overhead_step = -1;
    if (m.gpu->LastOverhead(&c.overhead_ratio, &c.overhead_step)) {
      c.overhead_source = OverheadSource::kCupti;
    }
  } else {
    c.overhead_source = OverheadSource::kHostWall;
    c.overhead_ratio = m.host_ratio.load();
    c.overhead_step = m.host_ratio_step.load();
  }
  std::lock_guard<std::mutex> lock(sh.mu);
  c.connected = sh.connected;
  c.last_decided_step = sh.cache.NewestObserved();
  c.last_error = sh.last_error;
  return c;
}

size_t Client::num_units() const { return impl_->units.size(); }

const std::string& Client::unit_name(UnitHandle unit) const {
  return impl_->units.name(unit);
}

const ClientOptions& Client::options() const { return impl_->options; }

}  // namespace gnmr
