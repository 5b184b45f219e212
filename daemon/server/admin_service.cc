#include "daemon/server/admin_service.h"

#include <cstdlib>

#include <spdlog/spdlog.h>

#include "common/secret.h"
#include "common/text.h"
#include "controller/state_codec.h"
#include "daemon/job/unit_query.h"
#include "daemon/server/peer_access.h"
#include "daemon/server/raw_unary.h"
#include "daemon/server/request_validation.h"
#include "daemon/server/session_reactor.h"

namespace gnmr {

AdminService::AdminService(JobRegistry* registry, ServerStats* stats, AdminContext context)
    : registry_(registry),
      stats_(stats),
      context_(std::move(context)),
      started_(context_.clock->Now()) {
  Route("GetStatus", Access::kRead, &AdminService::GetStatus);
  Route("ListJobs", Access::kRead, &AdminService::ListJobs);
  Route("ListUnits", Access::kRead, &AdminService::ListUnits);
  Route("ListEvents", Access::kRead, &AdminService::ListEvents);
  Route("GetConfig", Access::kRead, &AdminService::GetConfig);
  Route("SetConfig", Access::kMutation, &AdminService::SetConfig);
  Route("ReleaseUnit", Access::kMutation, &AdminService::ReleaseUnit);
  Route("ExportState", Access::kRead, &AdminService::ExportState);
  Route("ImportState", Access::kMutation, &AdminService::ImportState);
  Route("DeleteJob", Access::kMutation, &AdminService::DeleteJob);
  Route("RewindJob", Access::kMutation, &AdminService::RewindJob);
}

void AdminService::SetListen(std::vector<std::string> bound) {
  MutexLock lock(listen_mu_);
  context_.listen = std::move(bound);
}

template <typename Req, typename Resp>
void AdminService::Route(const char* method, Access access, Body<Req, Resp> body) {
  const int index =
      MethodIndex(v1::GetStatusRequest::descriptor()->file()->FindServiceByName("Admin"), method);
  if (index < 0) std::abort();  // this table and the .proto disagree: a build error
  const std::string name = std::string("Admin.") + method;
  MarkMethodRawCallback(
      index,
      RawUnaryHandler<Req, Resp>(
          [this, access, body](grpc::CallbackServerContext* ctx, const Req& req, Resp* resp) {
            Status s = CheckAccess(ctx, access);
            return s.ok() ? (this->*body)(ctx, req, resp) : s;
          },
          [this, name](grpc::CallbackServerContext* ctx, const Req&, const Status& s) {
            if (!s.ok()) stats_->bad_requests++;
            stats_->Record(name, s);
            grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
            reactor->Finish(ToGrpc(s));
            return reactor;
          },
          context_.request_gate, /*gate_answer=*/access == Access::kRead));
}

Status AdminService::CheckAccess(grpc::CallbackServerContext* ctx, Access access) const {
  const std::string token = TokenFromMetadata(ctx, "x-gnmr-admin-token");
  if (access == Access::kRead) {
    if (TransportTrusted(ctx, context_.insecure_tcp)) return Status::Ok();
    if (context_.admin_token.empty() && context_.read_token.empty()) {
      return Status(StatusCode::kPermissionDenied,
                    "Admin reads over TCP need a token and the daemon has none configured "
                    "(read_token or admin_token); use its Unix socket");
    }
    const bool read_ok = !context_.read_token.empty() && SameSecret(token, context_.read_token);
    const bool admin_ok = !context_.admin_token.empty() && SameSecret(token, context_.admin_token);
    if (!read_ok && !admin_ok) {
      return Status(StatusCode::kUnauthenticated,
                    "wrong or missing token: Admin reads over TCP need the read token or the "
                    "admin token (x-gnmr-admin-token; gnmrctl --admin-token)");
    }
    return Status::Ok();
  }
  if (context_.admin_token.empty()) {
    if (TransportOf(ctx) == Transport::kUnixSocket) return Status::Ok();
    return Status(StatusCode::kPermissionDenied,
                  "admin mutations over TCP need an admin token configured on the daemon");
  }
  if (!SameSecret(token, context_.admin_token)) {
    return Status(StatusCode::kUnauthenticated, "wrong or missing admin token");
  }
  return Status::Ok();
}

Status AdminService::GetStatus(grpc::CallbackServerContext*, const v1::GetStatusRequest&,
                               v1::GetStatusResponse* resp) {
  resp->set_version(context_.version);
  resp->set_uptime_seconds(std::chrono::duration<double>(context_.clock->Now() - started_).count());
  resp->set_jobs(static_cast<uint32_t>(registry_->All().size()));
  resp->set_sessions(static_cast<uint32_t>(std::max<int64_t>(0, stats_->sessions_open.load())));
  {
    MutexLock lock(listen_mu_);
    for (const std::string& l : context_.listen) resp->add_listen(l);
  }
  resp->set_state_dir(context_.state_dir);
  return Status::Ok();
}

Status AdminService::ListJobs(grpc::CallbackServerContext*, const v1::ListJobsRequest&,
                              v1::ListJobsResponse* resp) {
  // One patience for the whole listing (job.h, Info), on the clock the
  // jobs read too (Daemon::Start gives them the same one).
  const auto give_up = context_.clock->Now() + Job::kInfoPatience;
  for (const auto& job : registry_->All()) *resp->add_jobs() = job->Info(job->Now(), give_up);
  return Status::Ok();
}

Status AdminService::ListUnits(grpc::CallbackServerContext*, const v1::ListUnitsRequest& req,
                               v1::ListUnitsResponse* resp) {
  StatusOr<std::shared_ptr<Job>> job = registry_->Find(req.job_id());
  if (!job.ok()) return job.status();
  // Room for the answer's other fields and gRPC's framing.
  constexpr uint64_t kAnswerOverhead = 1024;
  StatusOr<UnitQuery> query = UnitQueryFromRequest(
      req, context_.max_answer_bytes > kAnswerOverhead ? context_.max_answer_bytes - kAnswerOverhead
                                                       : 1);
  if (!query.ok()) return query.status();
  UnitPage page = (*job)->Units(*query);
  resp->mutable_units()->Reserve(static_cast<int>(page.units.size()));
  for (v1::UnitInfo& u : page.units) *resp->add_units() = std::move(u);
  resp->set_matched(page.matched);
  resp->set_next_offset(page.next_offset);
  return Status::Ok();
}

Status AdminService::ListEvents(grpc::CallbackServerContext*, const v1::ListEventsRequest& req,
                                v1::ListEventsResponse* resp) {
  StatusOr<std::shared_ptr<Job>> job = registry_->Find(req.job_id());
  if (!job.ok()) return job.status();
  if (!context_.events) return Status::Ok();
  const uint32_t limit = req.limit() == 0 ? 1000 : std::min<uint32_t>(req.limit(), 100000);
  for (v1::Event& e : context_.events(req.job_id(), req.since_step(), limit)) {
    *resp->add_events() = std::move(e);
  }
  return Status::Ok();
}

Status AdminService::GetConfig(grpc::CallbackServerContext*, const v1::GetConfigRequest& req,
                               v1::GetConfigResponse* resp) {
  StatusOr<std::shared_ptr<Job>> job = registry_->Find(req.job_id());
  if (!job.ok()) return job.status();
  ConfigToProto((*job)->config(), resp->mutable_config());
  resp->set_config_version((*job)->config_version());
  return Status::Ok();
}

Status AdminService::SetConfig(grpc::CallbackServerContext*, const v1::SetConfigRequest& req,
                               v1::SetConfigResponse* resp) {
  StatusOr<std::shared_ptr<Job>> job = registry_->Find(req.job_id());
  if (!job.ok()) return job.status();
  StatusOr<ControllerConfig> config = ConfigFromProto(req.config());
  if (!config.ok()) return config.status();
  GNMR_RETURN_IF_ERROR((*job)->SetConfig(*config));
  resp->set_config_version((*job)->config_version());
  spdlog::info("job {}: config changed to version {}", EscapeForLog(req.job_id()),
               resp->config_version());
  return Status::Ok();
}

Status AdminService::ReleaseUnit(grpc::CallbackServerContext*, const v1::ReleaseUnitRequest& req,
                                 v1::ReleaseUnitResponse*) {
  StatusOr<std::shared_ptr<Job>> job = registry_->Find(req.job_id());
  if (!job.ok()) return job.status();
  Status s = (*job)->ReleaseUnit(req.unit());
  if (s.ok()) {
    spdlog::info("job {}: operator released unit {}", EscapeForLog(req.job_id()),
                 EscapeForLog(req.unit()));
  }
  return s;
}

Status AdminService::ExportState(grpc::CallbackServerContext*, const v1::ExportStateRequest& req,
                                 v1::ExportStateResponse* resp) {
  StatusOr<std::shared_ptr<Job>> job = registry_->Find(req.job_id());
  if (!job.ok()) return job.status();
  v1::ControllerState state = (*job)->ExportState();
  const uint64_t bytes = state.ByteSizeLong();
  if (bytes > context_.max_answer_bytes) {
    return Status(StatusCode::kResourceExhausted,
                  "the job's state is " + std::to_string(bytes) +
                      " bytes, more than one answer may carry (max_message_bytes " +
                      std::to_string(context_.max_answer_bytes) +
                      "); raise max_message_bytes to export it");
  }
  resp->mutable_state()->Swap(&state);
  return Status::Ok();
}

Status AdminService::ImportState(grpc::CallbackServerContext*, const v1::ImportStateRequest& req,
                                 v1::ImportStateResponse* resp) {
  StatusOr<std::shared_ptr<Job>> job = registry_->Find(req.job_id());
  if (!job.ok()) return job.status();
  uint64_t generation = 0;
  Status s = (*job)->ImportState(req.state(), &generation, req.resume());
  if (s.ok()) {
    resp->set_generation(generation);
    spdlog::info("job {}: controller state imported (generation {})", EscapeForLog(req.job_id()),
                 generation);
  }
  return s;
}

Status AdminService::DeleteJob(grpc::CallbackServerContext*, const v1::DeleteJobRequest& req,
                               v1::DeleteJobResponse* resp) {
  const Status why(StatusCode::kAborted,
                   "job '" + req.job_id() +
                       "' was deleted by an operator; a rank still running registers it again "
                       "as a new job");
  StatusOr<uint32_t> closed = registry_->Remove(req.job_id(), why);
  const StatusCode code = closed.status().code();
  if (!closed.ok() && code != StatusCode::kNotFound && code != StatusCode::kUnavailable) {
    spdlog::error("job {}: deleted by an operator, but: {}", EscapeForLog(req.job_id()),
                  EscapeMessageForLog(closed.status().message()));
  }
  if (!closed.ok()) return closed.status();
  resp->set_streams_closed(*closed);
  spdlog::info(
      "job {}: deleted by an operator ({} stream(s) closed); its snapshots, event log "
      "and metric series are removed",
      EscapeForLog(req.job_id()), *closed);
  return Status::Ok();
}

Status AdminService::RewindJob(grpc::CallbackServerContext*, const v1::RewindJobRequest& req,
                               v1::RewindJobResponse* resp) {
  StatusOr<std::shared_ptr<Job>> job = registry_->Find(req.job_id());
  if (!job.ok()) return job.status();
  uint64_t generation = 0;
  Status s = (*job)->Rewind(req.to_step(), &generation);
  if (s.ok()) {
    resp->set_generation(generation);
    spdlog::warn("job {}: an operator rewound the job (generation {}, reports from step {})",
                 EscapeForLog(req.job_id()), generation, req.to_step());
  }
  return s;
}

}  // namespace gnmr
