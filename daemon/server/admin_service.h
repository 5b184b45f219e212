// The Admin service behind gnmrctl: read-only views for everyone who can
// reach the socket; mutations (SetConfig, ReleaseUnit, ImportState) need the
// admin token in `x-gnmr-admin-token`. Without a configured admin token,
// mutations are allowed only over the Unix socket, whose file permissions
// then are the access control.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/server/job_registry.h"
#include "daemon/server/server_stats.h"
#include "gnmr/v1/gnmr.grpc.pb.h"

namespace gnmr {

struct AdminContext {
  std::string version;
  std::string admin_token;  // empty: mutations only over the Unix socket
  std::vector<std::string> listen;
  std::string state_dir;
  // Recent events of a job (the store's in-memory tail); may be empty.
  std::function<std::vector<v1::Event>(const std::string& job, int64_t since_step,
                                       uint32_t limit)>
      events;
};

class AdminService final : public v1::Admin::CallbackService {
 public:
  AdminService(JobRegistry* registry, ServerStats* stats, AdminContext context);

  // The addresses actually bound (known only once the server started).
  void SetListen(std::vector<std::string> bound);

  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext*, const v1::GetStatusRequest*,
                                      v1::GetStatusResponse*) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext*, const v1::ListJobsRequest*,
                                     v1::ListJobsResponse*) override;
  grpc::ServerUnaryReactor* ListUnits(grpc::CallbackServerContext*, const v1::ListUnitsRequest*,
                                      v1::ListUnitsResponse*) override;
  grpc::ServerUnaryReactor* ListEvents(grpc::CallbackServerContext*,
                                       const v1::ListEventsRequest*,
                                       v1::ListEventsResponse*) override;
  grpc::ServerUnaryReactor* GetConfig(grpc::CallbackServerContext*, const v1::GetConfigRequest*,
                                      v1::GetConfigResponse*) override;
  grpc::ServerUnaryReactor* SetConfig(grpc::CallbackServerContext*, const v1::SetConfigRequest*,
                                      v1::SetConfigResponse*) override;
  grpc::ServerUnaryReactor* ReleaseUnit(grpc::CallbackServerContext*,
                                        const v1::ReleaseUnitRequest*,
                                        v1::ReleaseUnitResponse*) override;
  grpc::ServerUnaryReactor* ExportState(grpc::CallbackServerContext*,
                                        const v1::ExportStateRequest*,
                                        v1::ExportStateResponse*) override;
  grpc::ServerUnaryReactor* ImportState(grpc::CallbackServerContext*,
                                        const v1::ImportStateRequest*,
                                        v1::ImportStateResponse*) override;

 private:
  // Runs `body` (exceptions become INTERNAL) and finishes the call.
  grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx, const char* method,
                                  const std::function<Status()>& body);
  Status CheckAdmin(grpc::CallbackServerContext* ctx) const;

  JobRegistry* const registry_;
  ServerStats* const stats_;
  AdminContext context_;  // listen: guarded by listen_mu_
  mutable std::mutex listen_mu_;
  const std::chrono::steady_clock::time_point started_;
};

}  // namespace gnmr
