#include "daemon/server/gnmr_service.h"

#include <cstdlib>

#include <spdlog/spdlog.h>

#include "common/text.h"
#include "common/tsan_annotations.h"
#include "controller/state_codec.h"
#include "daemon/server/peer_access.h"
#include "daemon/server/raw_unary.h"
#include "daemon/server/session_reactor.h"

namespace gnmr {
namespace {

// A Session refused before it starts: ends the stream with `why`. OnDone
// runs on another gRPC thread, after the constructor (told to TSan:
// common/tsan_annotations.h).
class RefusedSession final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit RefusedSession(const Status& why) {
    GNMR_HAPPENS_BEFORE(&constructed_);
    Finish(ToGrpc(why));
  }
  void OnDone() override {
    GNMR_HAPPENS_AFTER(&constructed_);
    delete this;
  }

 private:
  char constructed_ = 0;  // a sync address only
};

}  // namespace

GnmrService::GnmrService(JobRegistry* registry, ServerStats* stats, RequestLimits limits,
                         LiveSessions* live, bool insecure_tcp, DecisionQueue::Limits queue_limits,
                         RequestGate* request_gate, const TimeSource* clock)
    : registry_(registry),
      stats_(stats),
      limits_(limits),
      live_(live),
      insecure_tcp_(insecure_tcp),
      queue_limits_(queue_limits),
      clock_(clock) {
  const google::protobuf::ServiceDescriptor* service =
      v1::RegisterRequest::descriptor()->file()->FindServiceByName("Gnmr");
  const int index = MethodIndex(service, "Register");
  const int session = MethodIndex(service, "Session");
  if (index < 0 || session < 0) std::abort();  // the .proto lost a method: a build error
  MarkMethodRawCallback(session,
                        new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
                            [this](grpc::CallbackServerContext* ctx) { return NewSession(ctx); }));
  MarkMethodRawCallback(
      index, RawUnaryHandler<v1::RegisterRequest, v1::RegisterResponse>(
                 [this](grpc::CallbackServerContext* ctx, const v1::RegisterRequest& req,
                        v1::RegisterResponse* resp) { return DoRegister(ctx, req, resp); },
                 [this](grpc::CallbackServerContext* ctx, const v1::RegisterRequest& req,
                        const Status& s) { return FinishRegister(ctx, req, s); },
                 request_gate));
}

Status GnmrService::CheckRegisterTransport(grpc::CallbackServerContext* ctx,
                                           const v1::RegisterRequest& req,
                                           const std::string& token) const {
  if (TransportTrusted(ctx, insecure_tcp_)) return Status::Ok();
  if (token.empty()) {
    return Status(StatusCode::kUnauthenticated, "a job token is required over TCP (x-gnmr-token)");
  }
  if (registry_->options().job_tokens.count(req.job_id()) == 0 &&
      !registry_->Find(req.job_id()).ok()) {
    return Status(StatusCode::kPermissionDenied,
                  "job '" + req.job_id() +
                      "' is not configured on this daemon (job_tokens); over TCP a job needs a "
                      "configured token (first-use registration only over the Unix socket or "
                      "mutual TLS)");
  }
  return Status::Ok();
}

Status GnmrService::DoRegister(grpc::CallbackServerContext* ctx, const v1::RegisterRequest& req,
                               v1::RegisterResponse* resp) {
  GNMR_RETURN_IF_ERROR(ValidateRegister(req, limits_));
  std::string token = TokenFromMetadata(ctx, "x-gnmr-token");
  if (token.empty()) token = req.token();
  GNMR_RETURN_IF_ERROR(CheckRegisterTransport(ctx, req, token));
  StatusOr<std::shared_ptr<Job>> job = registry_->ForRegister(req, token);
  if (!job.ok()) return job.status();
  StatusOr<RegisterResult> r = (*job)->Register(req);
  if (!r.ok()) return r.status();
  for (uint32_t id : r->unit_ids) resp->add_unit_ids(id);
  ConfigToProto(r->config, resp->mutable_config());
  resp->set_lag(r->config.lag);
  resp->set_session_id(r->session_id);
  resp->set_last_step(r->last_step);
  resp->set_config_version(r->config_version);
  resp->set_generation(r->generation);
  spdlog::info("job {} rank {}/{} registered {} units (client {}, generation {})",
               EscapeForLog(req.job_id()), req.rank(), req.world_size(), req.units_size(),
               EscapeForLog(req.client_version()), r->generation);
  return Status::Ok();
}

void GnmrService::LogRejected(const v1::RegisterRequest& req, const Status& s) {
  // A client retrying a bad Register in a loop must not flood the log: one
  // line per job and cause every kRejectLogInterval, with the count of the
  // lines held back.
  const std::string job = EscapeForLog(req.job_id(), 128);
  uint64_t held_back = 0;
  if (!rejected_log_.Allow(job + "|" + StatusCodeName(s.code()), clock_->Now(), &held_back)) {
    return;
  }
  spdlog::warn("Register job={} rank={}: {}{}", job, req.rank(), EscapeMessageForLog(s.ToString()),
               held_back == 0
                   ? std::string()
                   : " (" + std::to_string(held_back) + " more like it since the last such line)");
}

grpc::ServerUnaryReactor* GnmrService::FinishRegister(grpc::CallbackServerContext* ctx,
                                                      const v1::RegisterRequest& req,
                                                      const Status& s) {
  if (!s.ok()) {
    stats_->bad_requests++;
    LogRejected(req, s);
  }
  stats_->Record("Register", s);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(s));
  return reactor;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* GnmrService::NewSession(
    grpc::CallbackServerContext* ctx) {
  if (!TransportTrusted(ctx, insecure_tcp_) && TokenFromMetadata(ctx, "x-gnmr-token").empty()) {
    stats_->bad_requests++;
    stats_->Record("Session", Status(StatusCode::kUnauthenticated, ""));
    return new RefusedSession(
        Status(StatusCode::kUnauthenticated, "a job token is required over TCP (x-gnmr-token)"));
  }
  return new SessionReactor(ctx, registry_, stats_, live_, queue_limits_);
}

}  // namespace gnmr
