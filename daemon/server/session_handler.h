// SessionHandler: what one rank's Session says, whatever carries it: the
// rank's own gRPC stream (session_reactor.h) or a lane of a relay's node
// stream (node_session.h). The first message must be a SessionHello that
// names the rank's current session (from Register) and attaches the
// stream's sink to the job; then StepStats and Acks go to the job. Any
// error ends the stream (or the lane) with that status.
//
// One reader at a time: a stream has at most one read in flight, so the
// handler needs no lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "daemon/job/job.h"
#include "daemon/server/job_registry.h"
#include "gnmr/status.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

class SessionHandler {
 public:
  explicit SessionHandler(JobRegistry* registry) : registry_(registry) {}

  bool attached() const { return job_ != nullptr; }
  const std::shared_ptr<Job>& job() const { return job_; }
  uint32_t rank() const { return rank_; }

  // Handles one message of `bytes` bytes on the wire. `token`: the job
  // token the stream presented, read only for the hello.
  Status Handle(const v1::ClientMessage& msg, size_t bytes, const std::string& token,
                const std::shared_ptr<DecisionSink>& sink);

  // The stream ended: the job learns that `sink` is gone (nothing if the
  // hello never attached it, or the rank has another stream by now).
  void Ended(const DecisionSink* sink);

 private:
  JobRegistry* const registry_;
  std::shared_ptr<Job> job_;
  uint32_t rank_ = 0;
  uint64_t session_id_ = 0;
};

}  // namespace gnmr
