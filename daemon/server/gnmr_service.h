// The trainer-facing service: Register and the Session stream.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "common/log_limiter.h"
#include "daemon/server/job_registry.h"
#include "daemon/server/live_sessions.h"
#include "daemon/server/request_validation.h"
#include "daemon/server/server_stats.h"
#include "gnmr/v1/gnmr.grpc.pb.h"

namespace gnmr {

class GnmrService final : public v1::Gnmr::CallbackService {
 public:
  // `live` (may be null): where Session streams are tracked for shutdown.
  GnmrService(JobRegistry* registry, ServerStats* stats, RequestLimits limits = {},
              LiveSessions* live = nullptr)
      : registry_(registry), stats_(stats), limits_(limits), live_(live) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx,
                                     const v1::RegisterRequest* req,
                                     v1::RegisterResponse* resp) override;
  grpc::ServerBidiReactor<v1::ClientMessage, v1::ServerMessage>* Session(
      grpc::CallbackServerContext* ctx) override;

 private:
  Status DoRegister(grpc::CallbackServerContext* ctx, const v1::RegisterRequest& req,
                    v1::RegisterResponse* resp);
  void LogRejected(const v1::RegisterRequest& req, const Status& s);

  static constexpr std::chrono::seconds kRejectLogInterval{10};

  JobRegistry* const registry_;
  ServerStats* const stats_;
  const RequestLimits limits_;
  LiveSessions* const live_;
  LogLimiter rejected_log_{kRejectLogInterval};
};

}  // namespace gnmr
