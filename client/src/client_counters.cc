// The views of gnmr::Client that any thread may call: counters, the
// connection (WaitConnected, TakeProblems), units, options; and the names
// of the API's enums.

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
  c.reports_enqueued = m.counters.reports_enqueued();
  c.reports_sent = sh.reports_sent.load();
  c.reports_held = sh.reports_held.load();
  c.standby = sh.standby.load();
  c.reports_dropped = m.outbox ? m.outbox->reports_dropped() : 0;
  c.acks_sent = sh.acks_sent.load();
  c.acks_dropped = m.outbox ? m.outbox->acks_dropped() : 0;
  c.decisions_received = sh.decisions_received.load();
  c.decisions_rejected = sh.decisions_rejected.load();
  c.decisions_stale = sh.decisions_stale.load();
  c.missed_decisions = m.counters.missed();
  c.skipped_steps = m.counters.skipped_steps();
  c.steps_without_decision = m.counters.steps_without_decision();
  c.registrations = sh.registrations.load();
  c.reconnects = sh.reconnects.load();
  c.connect_failures = sh.connect_failures.load();
  c.attach_failures = sh.attach_failures.load();
  c.stats_seconds = m.counters.stats_seconds();
  if (m.any_device) {
    c.stats_gpu_seconds = m.gpu->stats_gpu_seconds();
    c.forward_calls_dropped = m.gpu->forward_dropped();
    c.overhead_source = OverheadSource::kUnavailable;
    c.overhead_ratio = 0.0;
    c.overhead_step = -1;
    if (m.gpu->LastOverhead(&c.overhead_ratio, &c.overhead_step)) {
      c.overhead_source = OverheadSource::kCupti;
    }
  } else {
    c.overhead_source = OverheadSource::kHostWall;
    c.overhead_ratio = m.counters.host_overhead_ratio();
    c.overhead_step = m.counters.host_overhead_step();
  }
  MutexLock lock(sh.mu);
  c.connected = sh.connected;
  const CachedDecision* newest = sh.cache.Newest();
  c.last_decided_step = newest ? newest->observed_step : -1;
  c.generation = sh.cache.generation();
  c.last_error = sh.last_error;
  return c;
}

}  // namespace

size_t Client::num_units() const { return impl_->units.size(); }

const std::string& Client::unit_name(UnitHandle unit) const { return impl_->units.name(unit); }

const ClientOptions& Client::options() const { return impl_->options; }

const char* MissReasonName(MissReason r) {
  switch (r) {
    case MissReason::kNone:
      return "none";
    case MissReason::kNoDecisionYet:
      return "no_decision_yet";
    case MissReason::kTimeout:
      return "timeout";
    case MissReason::kDisconnected:
      return "disconnected";
    case MissReason::kNotReceived:
      return "not_received";
  }
  return "unknown";
}

const char* ProblemKindName(ProblemKind k) {
  switch (k) {
    case ProblemKind::kUnauthenticated:
      return "unauthenticated";
    case ProblemKind::kUnreachable:
      return "unreachable";
    case ProblemKind::kRefused:
      return "refused";
    case ProblemKind::kConfigDiffers:
      return "config_differs";
    case ProblemKind::kBadDecision:
      return "bad_decision";
    case ProblemKind::kStream:
      return "stream";
    case ProblemKind::kNotAttached:
      return "not_attached";
    case ProblemKind::kNoDecisions:
      return "no_decisions";
  }
  return "unknown";
}

Status Client::WaitConnected(std::chrono::milliseconds timeout) {
  return Guard([&] {
    Impl& m = *impl_;
    if (!m.started) return FailedPrecondition("WaitConnected before Start");
    SharedState& sh = m.shared;
    MutexLock lock(sh.mu);
    sh.decision_cv.wait_for(lock.native(), timeout, [&]() GNMR_REQUIRES(sh.mu) {
      return sh.connected || sh.stopping || sh.attempts_done > 0;
    });
    if (sh.connected) return Status::Ok();
    if (sh.stopping) return Status(StatusCode::kCancelled, "client stopped");
    if (sh.attempts_done > 0 && !sh.last_attempt.ok()) return sh.last_attempt;
    return Status(StatusCode::kDeadlineExceeded, "not connected to " + m.options.target +
                                                     " within " + std::to_string(timeout.count()) +
                                                     " ms (still trying)");
  });
}

std::vector<Problem> Client::TakeProblems() {
  std::vector<Problem> out;
  (void)Guard([&] {
    out = impl_->shared.problems.Take();
    return Status::Ok();
  });
  return out;
}

}  // namespace gnmr
