// RankSessions: a job's rank sessions (job.h): for each registered rank its
// current session (id, the stream's sink, what the job knows of the rank's
// trainer), the count of attached streams, and the broadcast to them.
//
// Owns the sinks. Every change of a session's sink goes through SetSink,
// DropSink or CloseSink, which keep connected() (read at each attach and
// detach: a count, not a scan) and mark the array of attached sinks for a
// rebuild. Broadcast walks that array, not the sessions: a walk of 16,384
// records twice per decision cost more than the sends.
//
// Not thread-safe: called with Job's mutex held. Broadcast's fan-out
// helpers (fan_out.h) touch only the sinks, and only while it runs.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/rank_table.h"
#include "daemon/job/decision_sink.h"
#include "daemon/job/fan_out.h"
#include "daemon/job/wire_message.h"
#include "gnmr/status.h"

namespace gnmr {

// One rank's current session.
struct RankSession {
  uint64_t session_id = 0;
  std::shared_ptr<DecisionSink> sink;  // null while no stream is attached
  std::string client_version;
  std::chrono::steady_clock::time_point last_seen;
  bool seen = false;
  // The rank's client instance (0: not stated) and the generation it
  // belongs to (job_generation.cc, "Generations").
  uint64_t instance = 0;
  uint64_t instance_generation = 0;
  // The session's stream ended (the trainer may be gone); false again
  // when it attaches or registers anew.
  bool stream_ended = false;
  // The newest step the rank acked (-1: none). A standby reports nothing
  // (docs/scale.md), so its acks say how far it is and that it is alive.
  int64_t last_acked_step = -1;
  // It registered as a new incarnation while other ranks of the current
  // generation were attached: it waits in the current generation for
  // them to go (job_generation.cc, "Generations").
  bool incarnation_pending = false;
  // A rank without decisions (job.h, "Ranks without decisions"): the
  // newest step it acked with a decision, the job's last closed step when
  // it registered (-1: none), and whether it is counted as without.
  int64_t last_decided_ack = -1;
  int64_t watched_from = -1;
  bool without_decisions = false;

  // Steps the job decided (up to `last_closed`) since the rank last had a
  // decision (0 if it is not behind); -1 while nothing was decided since
  // it registered.
  int64_t StepsWithoutDecision(int64_t last_closed) const;
};

class RankSessions {
 public:
  // From this many attached sinks on, Broadcast shares the sends with the
  // fan-out's threads, in ranges of kFanOutGrain sinks.
  static constexpr size_t kFanOutAtSinks = 512;
  static constexpr size_t kFanOutGrain = 256;

  // `fan_out` (may be null: the caller sends to every sink) must outlive
  // this.
  explicit RankSessions(FanOut* fan_out) : fan_out_(fan_out) {}

  // The rank's session, or null if it never registered.
  RankSession* Find(uint32_t rank) { return sessions_.Find(rank); }
  const RankSession* Find(uint32_t rank) const { return sessions_.Find(rank); }
  // The rank's session, made (empty) if it had none.
  RankSession& FindOrAdd(uint32_t rank) { return sessions_[rank]; }
  // OK with *session set to the rank's current session, or
  // FailedPrecondition (not registered, or an older session of the rank)
  // naming job `job_id`.
  Status Check(std::string_view job_id, uint32_t rank, uint64_t session_id, RankSession** session);
  // Gives `rs` a new random session id (never 0).
  void NewSessionId(RankSession& rs);

  // Attaches `sink` to `rs` (dropping the one it had, unclosed).
  void SetSink(RankSession& rs, std::shared_ptr<DecisionSink> sink);
  // Detaches `rs`'s sink, if any, without closing its stream.
  void DropSink(RankSession& rs);
  // Closes `rs`'s stream, if one is attached, with `why`, and drops it.
  void CloseSink(RankSession& rs, const Status& why);
  // Closes every attached stream with `why` (each session's stream ended);
  // returns how many there were.
  uint32_t CloseAll(const Status& why);

  // Queues `msg` to every attached sink and flushes them; from
  // kFanOutAtSinks sinks on, in ranges shared with the fan-out's threads.
  void Broadcast(const std::shared_ptr<const WireMessage>& msg);

  // Sessions with a sink attached.
  uint32_t connected() const { return connected_; }
  // Ranks with a session.
  size_t size() const { return sessions_.size(); }
  // f(rank, session) for every session, in rank order.
  template <typename F>
  void ForEach(F&& f) {
    sessions_.ForEach(std::forward<F>(f));
  }
  template <typename F>
  void ForEach(F&& f) const {
    sessions_.ForEach(std::forward<F>(f));
  }

 private:
  FanOut* const fan_out_;
  RankTable<RankSession> sessions_;
  uint32_t connected_ = 0;  // sessions with a sink
  // The sinks of sessions_, in one array for the broadcast of each step;
  // rebuilt after a sink changes. The sessions own the sinks.
  std::vector<DecisionSink*> attached_;
  bool attached_stale_ = true;
  std::mt19937_64 session_ids_{std::random_device{}()};
};

}  // namespace gnmr
