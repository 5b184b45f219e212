// The Admin service behind gnmrctl. Who may call what (peer_access.h,
// deploy/README.md "Security model"):
// - reads (GetStatus, ListJobs, ListUnits, ListEvents, GetConfig,
//   ExportState): anyone on the Unix socket or with a verified client
//   certificate; a plain TCP peer needs the read token or the admin token
//   in `x-gnmr-admin-token` (unless insecure_tcp).
// - mutations (SetConfig, ReleaseUnit, ImportState, DeleteJob, RewindJob):
//   the admin token in
//   `x-gnmr-admin-token`; without a configured admin token, mutations are
//   allowed only over the Unix socket, whose file permissions then are the
//   access control.
// Every method parses its own request (raw_unary.h), so a request that
// does not parse gets INVALID_ARGUMENT naming the field.
// Waiting: GetStatus, ListJobs and GetConfig never wait for a job's lock
// (Job::Info and Job::config serve the job's published view while it is
// busy), so one job's long decision or Register cannot hold them up;
// ListUnits and ExportState read one job's full state and wait for that
// job's current operation; mutations serialise with it.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/mutex.h"
#include "common/time_source.h"
#include "daemon/server/job_registry.h"
#include "daemon/server/request_gate.h"
#include "daemon/server/server_stats.h"
#include "gnmr/v1/gnmr.grpc.pb.h"

namespace gnmr {

struct AdminContext {
  std::string version;
  std::string admin_token;    // empty: mutations only over the Unix socket
  std::string read_token;     // also allows reads over plain TCP; may be empty
  bool insecure_tcp = false;  // plain TCP peers are trusted (peer_access.h)
  std::vector<std::string> listen;
  std::string state_dir;
  // Bounds the bytes of requests served at once (request_gate.h); may be
  // null. Set by Daemon::Start from DaemonOptions.
  RequestGate* request_gate = nullptr;
  // The largest answer gnmrd may send (max_message_bytes): a larger one is
  // refused with a status that names the key, not gRPC's own.
  uint64_t max_answer_bytes = 64u << 20;
  // Recent events of a job (the store's in-memory tail); may be empty.
  std::function<std::vector<v1::Event>(const std::string& job, int64_t since_step, uint32_t limit)>
      events;
  // The daemon's clock (uptime, ListJobs' patience with busy jobs); never
  // null. Set by Daemon::Start from DaemonOptions.
  const TimeSource* clock = &TimeSource::Real();
};

class AdminService final : public v1::Admin::CallbackService {
 public:
  AdminService(JobRegistry* registry, ServerStats* stats, AdminContext context);

  // The addresses actually bound (known only once the server started).
  void SetListen(std::vector<std::string> bound);

 private:
  enum class Access { kRead, kMutation };
  template <typename Req, typename Resp>
  using Body = Status (AdminService::*)(grpc::CallbackServerContext*, const Req&, Resp*);

  // Serves `method` of the Admin service with `body` after the `access`
  // check, recording and finishing the call.
  template <typename Req, typename Resp>
  void Route(const char* method, Access access, Body<Req, Resp> body);

  Status CheckAccess(grpc::CallbackServerContext* ctx, Access access) const;

  Status GetStatus(grpc::CallbackServerContext*, const v1::GetStatusRequest&,
                   v1::GetStatusResponse*);
  Status ListJobs(grpc::CallbackServerContext*, const v1::ListJobsRequest&, v1::ListJobsResponse*);
  Status ListUnits(grpc::CallbackServerContext*, const v1::ListUnitsRequest&,
                   v1::ListUnitsResponse*);
  Status ListEvents(grpc::CallbackServerContext*, const v1::ListEventsRequest&,
                    v1::ListEventsResponse*);
  Status GetConfig(grpc::CallbackServerContext*, const v1::GetConfigRequest&,
                   v1::GetConfigResponse*);
  Status SetConfig(grpc::CallbackServerContext*, const v1::SetConfigRequest&,
                   v1::SetConfigResponse*);
  Status ReleaseUnit(grpc::CallbackServerContext*, const v1::ReleaseUnitRequest&,
                     v1::ReleaseUnitResponse*);
  Status ExportState(grpc::CallbackServerContext*, const v1::ExportStateRequest&,
                     v1::ExportStateResponse*);
  Status ImportState(grpc::CallbackServerContext*, const v1::ImportStateRequest&,
                     v1::ImportStateResponse*);
  // Job lifecycle (JobRegistry::Remove).
  Status DeleteJob(grpc::CallbackServerContext*, const v1::DeleteJobRequest&,
                   v1::DeleteJobResponse*);
  Status RewindJob(grpc::CallbackServerContext*, const v1::RewindJobRequest&,
                   v1::RewindJobResponse*);

  JobRegistry* const registry_;
  ServerStats* const stats_;
  // Its `listen` is guarded by listen_mu_ (a field of a struct: no
  // GNMR_GUARDED_BY), the rest is set before serving and read-only.
  AdminContext context_;
  mutable Mutex listen_mu_;
  const TimeSource::SteadyTime started_;  // context_.clock's time
};

}  // namespace gnmr
