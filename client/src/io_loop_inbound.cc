// What the client's I/O thread does with what the daemon sends (IoLoop,
// io_loop.h): the first message attaches the stream, decisions are
// validated and stored by generation and sequence (decision_cache.h), a
// GenerationStart voids older decisions (or, live, retires them: they
// still plan the steps before it), and a job config that differs
// from the one this client asked for is reported.
// The reader thread runs this; it never throws (ReadDecisions catches all).
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "client/src/io_loop.h"
#include "controller/types/config_codec.h"

namespace gnmr {

void IoLoop::ReadDecisions(Stream* stream, std::atomic<bool>* heard, std::atomic<bool>* broken) {
  try {
    v1::ServerMessage msg;
    while (stream->Read(&msg)) {
      if (msg.has_decision()) {
        Accept(msg.decision());
      } else if (msg.has_generation()) {
        AcceptGeneration(msg.generation());
      } else if (msg.has_role()) {
        // Reporter election: wake the writer when it has reports to send.
        if (standby_.SetRole(msg.role().standby(), msg.role().from_step())) outbox_->Wake();
        shared_->standby.store(msg.role().standby(), std::memory_order_relaxed);
      }
      // gnmrd's first message on a stream is the GenerationStart of its
      // attach (whatever comes first, the stream is attached); handled
      // before, so a rank is connected with its generation known.
      if (!heard->load(std::memory_order_relaxed)) Signal(heard);
    }
  } catch (...) {
    // Ends the session like a read error; Pump notices `broken`.
  }
  Signal(broken);
  outbox_->Wake();
}

void IoLoop::Signal(std::atomic<bool>* flag) {
  {
    MutexLock lock(shared_->mu);
    flag->store(true, std::memory_order_release);
  }
  shared_->decision_cv.notify_all();
}

Status IoLoop::AwaitAttach(const std::atomic<bool>& heard, const std::atomic<bool>& broken) {
  const auto deadline = std::chrono::steady_clock::now() + options_.attach_timeout;
  {
    MutexLock lock(shared_->mu);
    // The reader signals both flags under mu; Stop() sets stopping under it.
    shared_->decision_cv.wait_until(lock.native(), deadline, [&]() GNMR_REQUIRES(shared_->mu) {
      return heard.load(std::memory_order_acquire) || broken.load(std::memory_order_acquire) ||
             shared_->stopping;
    });
  }
  if (Stopping()) return Status(StatusCode::kCancelled, "stopping");
  if (heard.load(std::memory_order_acquire)) {
    // Counted before `connected` is: a caller woken by WaitConnected sees them.
    const uint64_t n = shared_->registrations.fetch_add(1, std::memory_order_relaxed) + 1;
    if (n > 1) shared_->reconnects.fetch_add(1, std::memory_order_relaxed);
    SetConnected(true);
    return Status::Ok();
  }
  if (broken.load(std::memory_order_acquire)) {
    return Status(StatusCode::kUnavailable, "Session: stream ended before the daemon attached it");
  }
  shared_->attach_failures.fetch_add(1, std::memory_order_relaxed);
  {
    // Not attached is an outage: a PlanFor that waited on this hello, or
    // would wait on the next one, stops waiting until a stream attaches.
    MutexLock lock(shared_->mu);
    shared_->slow = true;
  }
  return Status(StatusCode::kDeadlineExceeded,
                "Session: the daemon did not attach this stream within " +
                    std::to_string(options_.attach_timeout.count()) +
                    " ms (nothing came back after the hello; through gnmr-relay, the relay may "
                    "have lost the lane); registering again");
}

void IoLoop::Accept(const v1::Decision& d) {
  StatusOr<CachedDecision> c = validator_.Validate(d);
  if (!c.ok()) {
    shared_->decisions_rejected.fetch_add(1, std::memory_order_relaxed);
    RecordError(c.status());
    shared_->problems.Record(ProblemKind::kBadDecision, c.status().message());
    return;
  }
  DecisionCache::Insert result;
  {
    MutexLock lock(shared_->mu);
    result = shared_->AddDecisionLocked(std::move(c).value());  // clears `slow` on progress
  }
  switch (result) {
    case DecisionCache::Insert::kStored:
      shared_->decisions_received.fetch_add(1, std::memory_order_relaxed);
      break;
    case DecisionCache::Insert::kDuplicate:  // re-sent history: already held
      break;
    case DecisionCache::Insert::kStale:
      shared_->decisions_stale.fetch_add(1, std::memory_order_relaxed);
      break;
    case DecisionCache::Insert::kConflict: {
      shared_->decisions_rejected.fetch_add(1, std::memory_order_relaxed);
      const Status s = InvalidArgument("decision seq " + std::to_string(d.sequence()) +
                                       " of generation " + std::to_string(d.generation()) +
                                       " differs from the one held with that sequence");
      RecordError(s);
      shared_->problems.Record(ProblemKind::kBadDecision, s.message());
      break;
    }
  }
  shared_->decision_cv.notify_all();
}

void IoLoop::AcceptGeneration(const v1::GenerationStart& g) {
  if (g.next_lag() < 0 || g.next_lag() > ControllerConfig::kMaxLag) {
    shared_->decisions_rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  {
    MutexLock lock(shared_->mu);
    // Not progress (no decision comes with it): `slow` stays as it is.
    std::optional<DecisionCache::LiveSwitch> live;
    if (g.live()) live = DecisionCache::LiveSwitch{g.from_step(), g.decided_through()};
    shared_->StartGenerationLocked(g.generation(), g.next_lag(), g.first_sequence(), live,
                                   g.rebuilt());
  }
  shared_->decision_cv.notify_all();
}

void IoLoop::CheckConfig(const v1::RegisterResponse& resp) {
  if (!options_.config) return;
  StatusOr<ControllerConfig> job = ConfigFromProto(resp.config());
  if (!job.ok()) return;
  const std::vector<std::string> keys = DifferingKeys(*options_.config, *job);
  if (keys.empty()) return;
  std::string list;
  for (const std::string& k : keys) list += (list.empty() ? "" : ", ") + k;
  shared_->problems.Record(
      ProblemKind::kConfigDiffers,
      "job '" + options_.job_id +
          "' already runs with another config; the daemon's stands (an "
          "operator may have changed it, see `gnmrctl config get`); it differs from this client's "
          "in: " +
          list);
}

}  // namespace gnmr
