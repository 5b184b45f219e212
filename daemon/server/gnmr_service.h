// The trainer-facing service: Register and the Session stream.
//
// Register parses its own request (raw_unary.h: a request that does not
// parse, e.g. a unit name that is not UTF-8, gets INVALID_ARGUMENT naming
// the field). Over plain TCP (peer_access.h) a job needs its token: a
// Register or Session without one is UNAUTHENTICATED, and a job that is
// neither configured (job_tokens) nor already known cannot be created there
// (first-use binding happens only over the Unix socket or mutual TLS),
// unless `insecure_tcp`.
#pragma once

#include <chrono>

#include <grpcpp/grpcpp.h>

#include "common/log_limiter.h"
#include "common/time_source.h"
#include "daemon/server/decision_queue.h"
#include "daemon/server/job_registry.h"
#include "daemon/server/live_sessions.h"
#include "daemon/server/request_gate.h"
#include "daemon/server/request_validation.h"
#include "daemon/server/server_stats.h"
#include "gnmr/v1/gnmr.grpc.pb.h"

namespace gnmr {

class GnmrService final : public v1::Gnmr::CallbackService {
 public:
  // `live` (may be null): where Session streams are tracked for shutdown.
  // `queue_limits`: each Session's write queue (decision_queue.h).
  // `request_gate` (may be null): bounds the Registers served at once
  // (request_gate.h).
  GnmrService(JobRegistry* registry, ServerStats* stats, RequestLimits limits = {},
              LiveSessions* live = nullptr, bool insecure_tcp = false,
              DecisionQueue::Limits queue_limits = {}, RequestGate* request_gate = nullptr,
              const TimeSource* clock = &TimeSource::Real());

 private:
  // The Session stream, routed as a raw method: the reactor parses what it
  // reads and writes bytes serialized once per message (session_reactor.h).
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NewSession(
      grpc::CallbackServerContext* ctx);
  Status DoRegister(grpc::CallbackServerContext* ctx, const v1::RegisterRequest& req,
                    v1::RegisterResponse* resp);
  // The TCP rules above; OK on a trusted transport.
  Status CheckRegisterTransport(grpc::CallbackServerContext* ctx, const v1::RegisterRequest& req,
                                const std::string& token) const;
  grpc::ServerUnaryReactor* FinishRegister(grpc::CallbackServerContext* ctx,
                                           const v1::RegisterRequest& req, const Status& s);
  void LogRejected(const v1::RegisterRequest& req, const Status& s);

  static constexpr std::chrono::seconds kRejectLogInterval{10};

  JobRegistry* const registry_;
  ServerStats* const stats_;
  const RequestLimits limits_;
  LiveSessions* const live_;
  const bool insecure_tcp_;
  const DecisionQueue::Limits queue_limits_;
  const TimeSource* const clock_;  // paces the refusal log lines
  LogLimiter rejected_log_{kRejectLogInterval};
};

}  // namespace gnmr
