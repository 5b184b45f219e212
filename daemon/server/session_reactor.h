// SessionReactor: one rank's bidirectional Session stream (gRPC callback
// API: no thread per stream).
//
// Design notes
// - Reads: what they say is handled by a SessionHandler (session_handler.h:
//   a SessionHello first, then StepStats and Acks). Any invalid message
//   ends the stream with its precise status; the client reconnects.
// - Raw bytes both ways (the Session method is routed as a raw callback
//   method, gnmr_service.cc): reads are parsed here, so a message that does
//   not parse ends the stream with INVALID_ARGUMENT naming why; writes send
//   the bytes the job serialized once per message (wire_message.h), shared
//   by every stream of the job through a reference-counted slice: no
//   per-stream serialization or copy.
// - Writes: the job pushes decisions through a SessionSink from its own
//   thread. The sink keeps a queue bounded in messages and bytes
//   (decision_queue.h: older decisions are dropped, the newest
//   GenerationStart never) and has at most one write in flight. Finish is
//   never started while a write is outstanding.
// - Lifetime: gRPC deletes nothing; OnDone() deletes the reactor after
//   cutting the sink's pointer to it, so a late SendDecision from the job
//   finds no reactor and drops the message. The sink outlives the reactor
//   (shared with the job) and never calls into the job under its own lock.
#pragma once

#include <atomic>
#include <memory>

#include <grpcpp/grpcpp.h>

#include "common/finish_gate.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "daemon/job/job.h"
#include "daemon/server/decision_queue.h"
#include "daemon/server/job_registry.h"
#include "daemon/server/live_sessions.h"
#include "daemon/server/server_stats.h"
#include "daemon/server/session_handler.h"
#include "gnmr/v1/gnmr.grpc.pb.h"
#include "proto/grpc_status.h"

namespace gnmr {

class SessionReactor;

class SessionSink final : public DecisionSink {
 public:
  SessionSink(SessionReactor* reactor, DecisionQueue::Limits limits)
      : reactor_(reactor), queue_(limits) {}
  void SendDecision(std::shared_ptr<const WireMessage> msg) override;
  void Close(const Status& why) override;

 private:
  friend class SessionReactor;
  // Called by the reactor when its write finished; starts the next one or
  // the pending Finish.
  void WriteDone();
  // Reactor is going away.
  void Detach();
  // Bracket re-arming the read after a message: false if the stream is
  // closing (do not read again).
  bool BeginRearm();
  void EndRearm();

  // The status Finish starts with, read outside mu_ by whoever Take() (or
  // EndRearm()) returned true to, and by the reactor's OnDone: the gate
  // never changes it once taken, so the read needs no lock, which the
  // analysis cannot know.
  const grpc::Status& TakenStatus() const GNMR_NO_THREAD_SAFETY_ANALYSIS { return gate_.status(); }

  Mutex mu_;
  SessionReactor* reactor_ GNMR_GUARDED_BY(mu_);  // null once the reactor is done
  DecisionQueue queue_ GNMR_GUARDED_BY(mu_);
  // When Finish may start (common/finish_gate.h).
  FinishGate<grpc::Status> gate_ GNMR_GUARDED_BY(mu_);
};

class SessionReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // `live` (may be null) tracks the stream for shutdown.
  SessionReactor(grpc::CallbackServerContext* ctx, JobRegistry* registry, ServerStats* stats,
                 LiveSessions* live = nullptr, DecisionQueue::Limits queue_limits = {});

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  friend class SessionSink;
  // StartRead, StartWrite and Finish with what gRPC orders after them told
  // to TSan (common/tsan_annotations.h); Reacting() starts every reaction.
  void Read();
  // Writes in_flight_'s bytes.
  void Write();
  void End(const grpc::Status& status);
  void Reacting(char* op);
  void Reacted();

  grpc::CallbackServerContext* const ctx_;
  ServerStats* const stats_;
  LiveSessions* const live_;
  SessionHandler handler_;
  std::shared_ptr<SessionSink> sink_;
  grpc::ByteBuffer in_bytes_;
  v1::ClientMessage in_;
  // The message being written, and the buffer that refers to its bytes.
  std::shared_ptr<const WireMessage> in_flight_;
  grpc::ByteBuffer out_bytes_;
  // Sync addresses for those annotations, one per thing gRPC orders: the
  // constructor, a read, a write, and every reaction or Finish (before
  // OnDone).
  struct {
    char constructed, read, write, ended;
  } order_ = {};
};

// The job token from the x-gnmr-token metadata ("" if absent).
std::string TokenFromMetadata(const grpc::CallbackServerContext* ctx, const char* key);

}  // namespace gnmr
