// State shared by the training thread (Client) and the I/O thread (IoLoop).
//
// One mutex guards the decision cache, the steps this rank observed and the
// connection facts PlanFor reads; counters are atomics so Counters() never
// contends with the hot path more than a load.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>

#include "client/src/decision_cache.h"
#include "client/src/problems.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace gnmr {

// GNMR_EXPORT: client/local/ calls it across the shared libraries (transport.h).
struct GNMR_EXPORT SharedState {
  // Observed steps remembered for the plan-validity rule: far more than any
  // lag (ControllerConfig::kMaxLag) needs.
  static constexpr size_t kObservedKept = 4096;

  mutable Mutex mu;
  // Signalled on a new decision or generation, a (dis)connect, the end of
  // a connection attempt, the first message or the end of a stream and on
  // stop (PlanFor, WaitConnected and the I/O thread's attach wait on it).
  std::condition_variable decision_cv;
  DecisionCache cache GNMR_GUARDED_BY(mu);
  // Steps this rank observed in the cache's generation, ascending: a
  // decision for each is coming while the daemon is reachable.
  std::deque<int64_t> observed GNMR_GUARDED_BY(mu);
  // After a generation voided the observed steps (a daemon restored from
  // its snapshot, a checkpoint load), the first step observed since; steps
  // before it and after the newest decision held are unknown: the job may
  // have decided them from the other ranks' reports (or this rank's own,
  // queued while the daemon was away), so a decision is due for them too.
  // `unseen_from_void`: none observed since the void yet.
  int64_t observed_since_void GNMR_GUARDED_BY(mu) = std::numeric_limits<int64_t>::min();
  bool unseen_from_void GNMR_GUARDED_BY(mu) = false;
  bool has_generation GNMR_GUARDED_BY(mu) = false;  // a Register answered
  // The newest step planned with a decision (-1: none), and the newest
  // step observed: a step observed below it starts a new timeline (the
  // trainer went back to a checkpoint), whose steps those plans are not.
  // Said at each registration with cache.HeldThrough() (RegisterRequest.
  // held_through, docs/safety.md "A restore holds until the ranks are back").
  int64_t planned_through GNMR_GUARDED_BY(mu) = -1;
  int64_t newest_observed GNMR_GUARDED_BY(mu) = std::numeric_limits<int64_t>::min();
  int64_t HeldThroughLocked() const GNMR_REQUIRES(mu) {
    return std::max(planned_through, cache.HeldThrough());
  }
  // The daemon attached this rank's Session stream: its first message
  // arrived (an open stream alone is not enough, io_loop.h).
  bool connected GNMR_GUARDED_BY(mu) = false;
  // Until the first connection attempt ends, and while a hello waits for
  // its attach (at most ClientOptions::attach_timeout), PlanFor may wait as
  // if connected (a rank that starts training at once must not miss the
  // decisions its peers get).
  bool connecting GNMR_GUARDED_BY(mu) = true;
  // A wait for a due decision timed out: no more waiting until progress (a
  // decision stored as the newest of the current generation, the only kind
  // that can answer a waiting PlanFor) or a fresh attach. Anything else the
  // daemon sends (stale or duplicate decisions, a repeated GenerationStart)
  // leaves it set: a daemon outage costs one decision_wait, whatever the
  // daemon sends meanwhile.
  bool slow GNMR_GUARDED_BY(mu) = false;
  bool stopping GNMR_GUARDED_BY(mu) = false;
  uint64_t attempts_done GNMR_GUARDED_BY(mu) = 0;  // finished connection attempts
  Status last_attempt GNMR_GUARDED_BY(mu);         // how the newest one ended
  std::string last_error GNMR_GUARDED_BY(mu);

  ProblemLog problems;  // its own lock

  std::atomic<bool> connected_flag{false};  // lock-free mirror of connected
  std::atomic<uint64_t> reports_sent{0};
  std::atomic<uint64_t> reports_held{0};  // standby: kept back, not sent
  std::atomic<bool> standby{false};
  std::atomic<uint64_t> acks_sent{0};
  std::atomic<uint64_t> decisions_received{0};
  std::atomic<uint64_t> decisions_rejected{0};
  std::atomic<uint64_t> decisions_stale{0};
  std::atomic<uint64_t> registrations{0};
  std::atomic<uint64_t> reconnects{0};
  std::atomic<uint64_t> connect_failures{0};
  std::atomic<uint64_t> attach_failures{0};  // hellos not answered in time

  // Learns of generation `g` (with the lag of its first decision; `live`:
  // GenerationStart.live). A newer one started at once voids the decisions
  // held and the steps observed before it; a live switch keeps both (the
  // ranks go on with their steps: docs/safety.md, rule 3). The first
  // generation a client learns of keeps its observed steps (they were
  // observed in it).
  void StartGenerationLocked(uint64_t g, int32_t first_lag, uint64_t first_sequence,
                             const std::optional<DecisionCache::LiveSwitch>& live = std::nullopt,
                             bool rebuilt = false) GNMR_REQUIRES(mu) {
    if (cache.StartGeneration(g, first_lag, first_sequence, live, rebuilt) ==
            DecisionCache::Start::kVoided &&
        has_generation) {
      VoidObservedLocked();
    }
    has_generation = true;
  }
  // The generation a Register response names: authoritative, also when
  // lower than the one held (a daemon restarted without its state). What
  // it means for the steps observed is its GenerationStart's to say (the
  // first message of the stream): at once, they are voided then.
  void AdoptGenerationLocked(uint64_t g, int32_t first_lag) GNMR_REQUIRES(mu) {
    cache.AdoptGeneration(g, first_lag);
  }
  void VoidObservedLocked() GNMR_REQUIRES(mu) {
    observed.clear();
    unseen_from_void = true;
  }
  // Stores a validated decision; one of a newer generation starts it. One
  // that becomes the newest held is progress: it ends a slow spell.
  DecisionCache::Insert AddDecisionLocked(CachedDecision d) GNMR_REQUIRES(mu) {
    if (d.generation > cache.generation() && has_generation) VoidObservedLocked();
    has_generation = true;
    const uint64_t sequence = d.sequence;
    const uint64_t generation = d.generation;
    const DecisionCache::Insert result = cache.Add(std::move(d));
    // (A retired generation's decision, re-sent on attach, is not progress.)
    const CachedDecision* newest = cache.Newest();
    if (result == DecisionCache::Insert::kStored && generation == cache.generation() &&
        newest != nullptr && newest->sequence == sequence) {
      slow = false;
    }
    return result;
  }
};

}  // namespace gnmr
