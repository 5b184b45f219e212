#include "daemon/server/admin_service.h"

#include <spdlog/spdlog.h>

#include "common/secret.h"
#include "common/text.h"
#include "daemon/controller/state_codec.h"
#include "daemon/server/request_validation.h"
#include "daemon/server/session_reactor.h"

namespace gnmr {

AdminService::AdminService(JobRegistry* registry, ServerStats* stats, AdminContext context)
    : registry_(registry),
      stats_(stats),
      context_(std::move(context)),
      started_(std::chrono::steady_clock::now()) {}

void AdminService::SetListen(std::vector<std::string> bound) {
  std::lock_guard<std::mutex> lock(listen_mu_);
  context_.listen = std::move(bound);
}

grpc::ServerUnaryReactor* AdminService::Reply(grpc::CallbackServerContext* ctx,
                                              const char* method,
                                              const std::function<Status()>& body) {
  Status s;
  try {
    s = body();
  } catch (const std::exception& e) {
    s = Internal(std::string("internal error: ") + e.what());
  } catch (...) {  // nothing may escape into gRPC's threads
    s = Internal("internal error: unknown exception");
  }
  if (!s.ok()) stats_->bad_requests++;
  stats_->Record(method, s);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(s));
  return reactor;
}

Status AdminService::CheckAdmin(grpc::CallbackServerContext* ctx) const {
  if (context_.admin_token.empty()) {
    if (ctx->peer().rfind("unix:", 0) == 0) return Status::Ok();
    return Status(StatusCode::kPermissionDenied,
                  "admin mutations over TCP need an admin token configured on the daemon");
  }
  const std::string token = TokenFromMetadata(ctx, "x-gnmr-admin-token");
  if (!SameSecret(token, context_.admin_token)) {
    return Status(StatusCode::kUnauthenticated, "wrong or missing admin token");
  }
  return Status::Ok();
}

grpc::ServerUnaryReactor* AdminService::GetStatus(grpc::CallbackServerContext* ctx,
                                                  const v1::GetStatusRequest*,
                                                  v1::GetStatusResponse* resp) {
  return Reply(ctx, "Admin.GetStatus", [&] {
    resp->set_version(context_.version);
    resp->set_uptime_seconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
    resp->set_jobs(static_cast<uint32_t>(registry_->All().size()));
    resp->set_sessions(static_cast<uint32_t>(std::max<int64_t>(0, stats_->sessions_open.load())));
    {
      std::lock_guard<std::mutex> lock(listen_mu_);
      for (const std::string& l : context_.listen) resp->add_listen(l);
    }
    resp->set_state_dir(context_.state_dir);
    return Status::Ok();
  });
}

grpc::ServerUnaryReactor* AdminService::ListJobs(grpc::CallbackServerContext* ctx,
                                                 const v1::ListJobsRequest*,
                                                 v1::ListJobsResponse* resp) {
  return Reply(ctx, "Admin.ListJobs", [&] {
    const auto now = Job::Clock::now();
    for (const auto& job : registry_->All()) *resp->add_jobs() = job->Info(now);
    return Status::Ok();
  });
}

grpc::ServerUnaryReactor* AdminService::ListUnits(grpc::CallbackServerContext* ctx,
                                                  const v1::ListUnitsRequest* req,
                                                  v1::ListUnitsResponse* resp) {
  return Reply(ctx, "Admin.ListUnits", [&] {
    StatusOr<std::shared_ptr<Job>> job = registry_->Find(req->job_id());
    if (!job.ok()) return job.status();
    for (v1::UnitInfo& u : (*job)->Units(req->top())) *resp->add_units() = std::move(u);
    return Status::Ok();
  });
}

grpc::ServerUnaryReactor* AdminService::ListEvents(grpc::CallbackServerContext* ctx,
                                                   const v1::ListEventsRequest* req,
                                                   v1::ListEventsResponse* resp) {
  return Reply(ctx, "Admin.ListEvents", [&] {
    StatusOr<std::shared_ptr<Job>> job = registry_->Find(req->job_id());
    if (!job.ok()) return job.status();
    if (!context_.events) return Status::Ok();
    const uint32_t limit = req->limit() == 0 ? 1000 : std::min<uint32_t>(req->limit(), 100000);
    for (v1::Event& e : context_.events(req->job_id(), req->since_step(), limit)) {
      *resp->add_events() = std::move(e);
    }
    return Status::Ok();
  });
}

grpc::ServerUnaryReactor* AdminService::GetConfig(grpc::CallbackServerContext* ctx,
                                                  const v1::GetConfigRequest* req,
                                                  v1::GetConfigResponse* resp) {
  return Reply(ctx, "Admin.GetConfig", [&] {
    StatusOr<std::shared_ptr<Job>> job = registry_->Find(req->job_id());
    if (!job.ok()) return job.status();
    ConfigToProto((*job)->config(), resp->mutable_config());
    resp->set_config_version((*job)->config_version());
    return Status::Ok();
  });
}

grpc::ServerUnaryReactor* AdminService::SetConfig(grpc::CallbackServerContext* ctx,
                                                  const v1::SetConfigRequest* req,
                                                  v1::SetConfigResponse* resp) {
  return Reply(ctx, "Admin.SetConfig", [&] {
    Status s = CheckAdmin(ctx);
    if (!s.ok()) return s;
    StatusOr<std::shared_ptr<Job>> job = registry_->Find(req->job_id());
    if (!job.ok()) return job.status();
    StatusOr<ControllerConfig> config = ConfigFromProto(req->config());
    if (!config.ok()) return config.status();
    s = (*job)->SetConfig(*config);
    if (!s.ok()) return s;
    resp->set_config_version((*job)->config_version());
    spdlog::info("job {}: config changed to version {}", EscapeForLog(req->job_id()),
                 resp->config_version());
    return Status::Ok();
  });
}

grpc::ServerUnaryReactor* AdminService::ReleaseUnit(grpc::CallbackServerContext* ctx,
                                                    const v1::ReleaseUnitRequest* req,
                                                    v1::ReleaseUnitResponse*) {
  return Reply(ctx, "Admin.ReleaseUnit", [&] {
    Status s = CheckAdmin(ctx);
    if (!s.ok()) return s;
    StatusOr<std::shared_ptr<Job>> job = registry_->Find(req->job_id());
    if (!job.ok()) return job.status();
    s = (*job)->ReleaseUnit(req->unit());
    if (s.ok()) {
      spdlog::info("job {}: operator released unit {}", EscapeForLog(req->job_id()),
                   EscapeForLog(req->unit()));
    }
    return s;
  });
}

grpc::ServerUnaryReactor* AdminService::ExportState(grpc::CallbackServerContext* ctx,
                                                    const v1::ExportStateRequest* req,
                                                    v1::ExportStateResponse* resp) {
  return Reply(ctx, "Admin.ExportState", [&] {
    StatusOr<std::shared_ptr<Job>> job = registry_->Find(req->job_id());
    if (!job.ok()) return job.status();
    *resp->mutable_state() = (*job)->ExportState();
    return Status::Ok();
  });
}

grpc::ServerUnaryReactor* AdminService::ImportState(grpc::CallbackServerContext* ctx,
                                                    const v1::ImportStateRequest* req,
                                                    v1::ImportStateResponse*) {
  return Reply(ctx, "Admin.ImportState", [&] {
    Status s = CheckAdmin(ctx);
    if (!s.ok()) return s;
    StatusOr<std::shared_ptr<Job>> job = registry_->Find(req->job_id());
    if (!job.ok()) return job.status();
    s = (*job)->ImportState(req->state());
    if (s.ok()) spdlog::info("job {}: controller state imported", EscapeForLog(req->job_id()));
    return s;
  });
}

}  // namespace gnmr
