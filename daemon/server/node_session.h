// NodeSession: a relay's stream to gnmrd, carrying the Session of each of
// one node's ranks as a *lane* (proto/gnmr/v1/relay.proto, docs/relay.md).
//
// Design notes
// - Why: every attached stream costs gnmrd a gRPC write per decision and a
//   read per message, and at 16,384 ranks that per-operation cost, not
//   the controller, is what bounds one gnmrd (docs/scale.md). Through a
//   relay per node gnmrd completes one write per node per decision.
// - Reads: a NodeClientMessage holds messages of several lanes, read one
//   LaneUp at a time (lane_reader.h: never parsed whole). Each lane
//   has its own SessionHandler (session_handler.h), so a lane's messages
//   are parsed, validated and handled exactly as on the rank's own stream,
//   with the token the lane presented. A bad lane message ends that lane
//   only (a LaneEnd with its status); the node's other lanes go on. A
//   NodeClientMessage that does not parse ends the whole stream (at the
//   LaneUp that does not). At most kMaxLanes lanes are live on one stream.
// - Before a lane's hello nothing is authenticated, so nothing a peer
//   sends may pile up: lanes are bounded (kMaxLanes, ended ones included),
//   and so are the LaneEnds that wait for a relay that does not read
//   (kMaxUnsentEnds, each message cut at kMaxEndMessageBytes); past them
//   the stream ends with RESOURCE_EXHAUSTED (docs/limits.md).
// - Lane ids: any id gnmrd has not seen is a new lane, whatever its order
//   (a relay numbers a lane when it queues its first message, but its
//   ranks say hello in any order). gnmrd remembers the lanes it ended
//   itself until the relay's `end` for each arrives, and drops their late
//   messages meanwhile: they are never taken for new lanes.
// - Writes: each lane's sink has its own bounded DecisionQueue (the same
//   dropping rules as a rank's own stream). SendDecision only queues;
//   Flush (the job calls it after each round of sends) starts a write if
//   none is in flight. A write takes what every lane has queued, up to
//   kWriteBytes, and lists lanes that receive the same message under one
//   LaneDelivery, so a decision's bytes cross the node's stream once. What
//   is queued while a write is in flight goes in the next one.
// - Lifetime: as SessionReactor. The NodeLink (shared with the lanes'
//   sinks, which the jobs hold) outlives the reactor; OnDone cuts its
//   pointer to the reactor, detaches every lane from its job and deletes
//   the reactor. Finish never starts while a write or a read re-arm is
//   outstanding. Lock order: a job's lock, then the link's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/finish_gate.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "daemon/server/decision_queue.h"
#include "daemon/server/job_registry.h"
#include "daemon/server/live_sessions.h"
#include "daemon/server/round_cache.h"
#include "daemon/server/server_stats.h"
#include "daemon/server/session_handler.h"
#include "gnmr/v1/relay.pb.h"

namespace gnmr {

class NodeSessionReactor;
class LaneSink;

// What the reactor and its lanes' sinks share. As a DecisionSink it stands
// for the whole stream (LiveSessions closes it at shutdown).
class NodeLink final : public DecisionSink {
 public:
  // Lane ends not yet written past which the relay is taken for one that
  // does not read, and its stream ends (RESOURCE_EXHAUSTED): a relay that
  // reads has at most NodeSessionReactor::kMaxLanes lanes to end.
  static constexpr size_t kMaxUnsentEnds = 2048;
  static constexpr size_t kMaxEndMessageBytes = 1024;  // of a LaneEnd's status message

  NodeLink(NodeSessionReactor* reactor, ServerStats* stats, std::shared_ptr<RoundCache> rounds)
      : reactor_(reactor), stats_(stats), rounds_(std::move(rounds)) {}
  void SendDecision(std::shared_ptr<const WireMessage>) override {}  // never a job's sink
  // Ends the node's stream with `why`.
  void Close(const Status& why) override;
  // The stream is ending or gone: nothing more is read.
  bool closing();

 private:
  friend class LaneSink;
  friend class NodeSessionReactor;
  // Starts a write of what the lanes queued, unless one is in flight.
  void StartWriteIfIdle();
  // Fills the reactor's next message; false if there is nothing to send
  // or a write may not start now.
  bool TakeWriteLocked() GNMR_REQUIRES(mu_);
  // The common write (one message to each of the node's lanes, nothing
  // else): its bytes from the round cache. False if this write is another.
  bool TakeRoundLocked() GNMR_REQUIRES(mu_);
  void WriteDone(bool ok);
  void Detach();
  // Forgets everything not yet written (the stream is closing or gone).
  void DropUnsentLocked() GNMR_REQUIRES(mu_);
  bool BeginRearm();
  void EndRearm();

  // The status Finish starts with, read outside mu_ by whoever Take() (or
  // EndRearm()) returned true to, and by the reactor's OnDone: the gate
  // never changes it once taken, so the read needs no lock, which the
  // analysis cannot know.
  const grpc::Status& TakenStatus() const GNMR_NO_THREAD_SAFETY_ANALYSIS { return gate_.status(); }

  Mutex mu_;
  NodeSessionReactor* reactor_ GNMR_GUARDED_BY(mu_);  // null once the reactor is done
  ServerStats* const stats_;
  const std::shared_ptr<RoundCache> rounds_;
  // Sent while no write was in flight, in order (each lane's queue is
  // empty then); the next write takes them.
  struct Fresh {
    std::shared_ptr<const WireMessage> msg;
    std::shared_ptr<LaneSink> lane;
  };
  std::vector<Fresh> fresh_ GNMR_GUARDED_BY(mu_);
  // Lanes with queued messages.
  std::vector<std::shared_ptr<LaneSink>> pending_ GNMR_GUARDED_BY(mu_);
  std::vector<v1::LaneEnd> ends_ GNMR_GUARDED_BY(mu_);  // lanes gnmrd ended, not yet sent
  // Lane-messages in the write in flight.
  uint64_t in_flight_deliveries_ GNMR_GUARDED_BY(mu_) = 0;
  uint64_t build_ GNMR_GUARDED_BY(mu_) = 0;  // writes built so far
  // When Finish may start (common/finish_gate.h).
  FinishGate<grpc::Status> gate_ GNMR_GUARDED_BY(mu_);
};

// The sink of one lane: what its job sends the rank.
class LaneSink final : public DecisionSink, public std::enable_shared_from_this<LaneSink> {
 public:
  LaneSink(std::shared_ptr<NodeLink> node, uint32_t lane, DecisionQueue::Limits limits)
      : node_(std::move(node)), lane_(lane), queue_(limits) {}
  void SendDecision(std::shared_ptr<const WireMessage> msg) override;
  void Flush() override;
  // Ends the lane (the relay ends the rank's stream with `why`).
  void Close(const Status& why) override;
  bool closed() const;

 private:
  friend class NodeLink;
  const std::shared_ptr<NodeLink> node_;
  const uint32_t lane_;
  // Under node_->mu_:
  DecisionQueue queue_;
  bool queued_ = false;  // in node_->pending_
  bool closed_ = false;
  // While a write is built: the lane's last delivery in it (valid when
  // build_ is the link's).
  uint64_t build_ = 0;
  int last_ = -1;
};

class NodeSessionReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  static constexpr size_t kMaxLanes = 1024;
  static constexpr size_t kWriteBytes = 1u << 20;  // a write's soft size bound

  // `trusted`: the transport is the Unix socket or mutual TLS, where a
  // lane needs no token (as a rank's own Session).
  // `rounds`: shared by the daemon's node streams (round_cache.h).
  NodeSessionReactor(grpc::CallbackServerContext* ctx, JobRegistry* registry, ServerStats* stats,
                     LiveSessions* live, DecisionQueue::Limits queue_limits, bool trusted,
                     std::shared_ptr<RoundCache> rounds);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  friend class NodeLink;
  struct Lane {
    explicit Lane(JobRegistry* registry) : handler(registry) {}
    SessionHandler handler;
    std::shared_ptr<LaneSink> sink;
    std::string token;  // until the hello
  };
  void HandleLane(const v1::LaneUp& up);
  // The lane is gone (the relay ended it, or gnmrd did): its job learns it.
  void DropLane(std::unordered_map<uint32_t, Lane>::iterator it, const Status& why);
  void Read();
  void Write();  // writes out_
  void End(const grpc::Status& status);
  void Reacting(char* op);
  void Reacted();

  grpc::CallbackServerContext* const ctx_;
  JobRegistry* const registry_;
  ServerStats* const stats_;
  LiveSessions* const live_;
  const DecisionQueue::Limits queue_limits_;
  const bool trusted_;
  std::shared_ptr<NodeLink> link_;
  grpc::ByteBuffer in_bytes_;
  v1::LaneUp in_;  // the lane being read (lane_reader.h)
  // The read path's own (one read at a time, then OnDone): no lock.
  std::unordered_map<uint32_t, Lane> lanes_;
  // Lanes gnmrd ended whose `end` from the relay has not come yet: their
  // late messages are dropped. Counted with lanes_ against kMaxLanes, so
  // a relay that never answers cannot grow it.
  std::unordered_set<uint32_t> ended_;
  // The next write, filled under link_->mu_ by TakeWriteLocked: a message,
  // or bytes from the round cache.
  v1::NodeServerMessage out_;
  std::shared_ptr<const std::string> out_shared_;
  grpc::ByteBuffer out_bytes_;
  struct {
    char constructed, read, write, ended;
  } order_ = {};
};

}  // namespace gnmr
