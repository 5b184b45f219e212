#include "daemon/server/gnmr_service.h"

#include <spdlog/spdlog.h>

#include "common/text.h"
#include "daemon/controller/state_codec.h"
#include "daemon/server/session_reactor.h"

namespace gnmr {

Status GnmrService::DoRegister(grpc::CallbackServerContext* ctx, const v1::RegisterRequest& req,
                               v1::RegisterResponse* resp) {
  Status s = ValidateRegister(req, limits_);
  if (!s.ok()) return s;
  std::string token = TokenFromMetadata(ctx, "x-gnmr-token");
  if (token.empty()) token = req.token();
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
  spdlog::info("job {} rank {}/{} registered {} units (client {})", EscapeForLog(req.job_id()),
               req.rank(), req.world_size(), req.units_size(),
               EscapeForLog(req.client_version()));
  return Status::Ok();
}

void GnmrService::LogRejected(const v1::RegisterRequest& req, const Status& s) {
  // A client retrying a bad Register in a loop must not flood the log: one
  // line per job and cause every kRejectLogInterval, with the count of the
  // lines held back.
  const std::string job = EscapeForLog(req.job_id(), 128);
  uint64_t held_back = 0;
  if (!rejected_log_.Allow(job + "|" + StatusCodeName(s.code()), LogLimiter::Clock::now(),
                           &held_back)) {
    return;
  }
  spdlog::warn("Register job={} rank={}: {}{}", job, req.rank(), EscapeForLog(s.ToString(), 512),
               held_back == 0 ? std::string()
                              : " (" + std::to_string(held_back) +
                                    " more like it since the last such line)");
}

grpc::ServerUnaryReactor* GnmrService::Register(grpc::CallbackServerContext* ctx,
                                                const v1::RegisterRequest* req,
                                                v1::RegisterResponse* resp) {
  Status s;
  try {
    s = DoRegister(ctx, *req, resp);
  } catch (const std::exception& e) {
    s = Internal(std::string("internal error: ") + e.what());
  } catch (...) {  // nothing may escape into gRPC's threads
    s = Internal("internal error: unknown exception");
  }
  if (!s.ok()) {
    stats_->bad_requests++;
    resp->Clear();
    LogRejected(*req, s);
  }
  stats_->Record("Register", s);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(s));
  return reactor;
}

grpc::ServerBidiReactor<v1::ClientMessage, v1::ServerMessage>* GnmrService::Session(
    grpc::CallbackServerContext* ctx) {
  return new SessionReactor(ctx, registry_, stats_, live_);
}

}  // namespace gnmr
