// The read-only views of gnmr::Client: counters, units, options.
#include <mutex>

#include "client/src/client_impl.h"

namespace gnmr {
namespace {
ClientCounters CountersImpl(const Client::Impl& m);
}  // namespace

ClientCounters Client::Counters() const {
  try {
    return CountersImpl(*impl_);
  } catch (...) {  // bad_alloc copying last_error: nothing crosses the API
    return ClientCounters();
  }
}

namespace {

ClientCounters CountersImpl(const Client::Impl& m) {
  const SharedState& sh = m.shared;
  ClientCounters c;
  c.reports_enqueued = m.reports_enqueued.load();
  c.reports_sent = sh.reports_sent.load();
  c.reports_dropped = m.outbox ? m.outbox->reports_dropped() : 0;
  c.acks_sent = sh.acks_sent.load();
  c.acks_dropped = m.outbox ? m.outbox->acks_dropped() : 0;
  c.decisions_received = sh.decisions_received.load();
  c.decisions_rejected = sh.decisions_rejected.load();
  c.decisions_stale = sh.decisions_stale.load();
  c.missed_decisions = m.missed.load();
  c.skipped_steps = m.skipped_steps.load();
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
  const CachedDecision* newest = sh.cache.Newest();
  c.last_decided_step = newest ? newest->observed_step : -1;
  c.generation = sh.cache.generation();
  c.last_error = sh.last_error;
  return c;
}

}  // namespace

size_t Client::num_units() const { return impl_->units.size(); }

const std::string& Client::unit_name(UnitHandle unit) const {
  return impl_->units.name(unit);
}

const ClientOptions& Client::options() const { return impl_->options; }

}  // namespace gnmr
