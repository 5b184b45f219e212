#include "daemon/server/gnmr_service.h"

#include <spdlog/spdlog.h>

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
  resp->set_generation(r->generation);
  spdlog::info("job {} rank {}/{} registered {} units (client {}, generation {})", req.job_id(),
               req.rank(), req.world_size(), req.units_size(), req.client_version(),
               r->generation);
  return Status::Ok();
}

grpc::ServerUnaryReactor* GnmrService::Register(grpc::CallbackServerContext* ctx,
                                                const v1::RegisterRequest* req,
                                                v1::RegisterResponse* resp) {
  Status s;
  try {
    s = DoRegister(ctx, *req, resp);
  } catch (const std::exception& e) {
    s = Internal(std::string("internal error: ") + e.what());
  }
  if (!s.ok()) {
    stats_->bad_requests++;
    resp->Clear();
    spdlog::warn("Register job={} rank={}: {}", req->job_id().substr(0, 128), req->rank(),
                 s.ToString());
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
