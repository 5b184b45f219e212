// DecisionSink: where a job sends what its ranks receive (job.h).
#pragma once

#include <memory>

#include "daemon/job/wire_message.h"
#include "gnmr/status.h"

namespace gnmr {

// The server side of one rank's Session stream.
class DecisionSink {
 public:
  virtual ~DecisionSink() = default;
  // Queues a ServerMessage (a Decision or a GenerationStart), serialized
  // once and shared by every stream of the job (wire_message.h).
  virtual void SendDecision(std::shared_ptr<const WireMessage> msg) = 0;
  // Sends what SendDecision queued. A sink may hold messages until then
  // (the lanes of a relay's node stream send one write for all the node's
  // lanes: daemon/server/node_session.h); the job flushes every sink it
  // sent to once it has sent a round (a decision to every rank).
  virtual void Flush() {}
  // Ends the stream with `why` (e.g. ABORTED: replaced by a new session).
  virtual void Close(const Status& why) = 0;
};

}  // namespace gnmr
