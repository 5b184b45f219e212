// Daemon: the running gnmrd core — job registry, gRPC server (Gnmr, Admin,
// health, reflection) and the deadline ticker — without the store and the
// metrics exporter, which plug in through JobListener and AdminContext. The
// gnmrd binary composes the full daemon; tests start this one in-process.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "common/time_source.h"
#include "daemon/server/admin_service.h"
#include "daemon/server/gnmr_service.h"
#include "daemon/server/job_registry.h"
#include "daemon/server/listeners.h"
#include "daemon/server/relay_service.h"
#include "daemon/server/server_stats.h"
#include "gnmr/status.h"

namespace gnmr {

struct DaemonOptions {
  // "unix:/path/gnmrd.sock" and/or "host:port" (port 0 picks a free one).
  std::vector<std::string> listen;
  int unix_socket_mode = 0660;
  int max_message_bytes = 64 << 20;
  TlsOptions tls;
  RegistryOptions registry;
  RequestLimits limits;
  // Each Session's write queue: messages and bytes (decision_queue.h).
  DecisionQueue::Limits session_queue;
  // Bounds the bytes of unary requests served at once (request_gate.h);
  // null: no bound. Shared so that a test can hold some of it.
  std::shared_ptr<RequestGate> request_gate;
  std::chrono::milliseconds tick_interval{20};
  // Plain TCP peers are trusted like Unix-socket peers (no job token needed
  // to create a job, Admin reads without a token): only for a trusted
  // network (peer_access.h). Mirrored into AdminContext by Start.
  bool insecure_tcp = false;
  // Called once per finished RPC (metrics); installed before the server
  // starts, so no RPC thread ever sees it change.
  std::function<void(std::string_view method, StatusCode code)> record_rpc;
  // The daemon's time (common/time_source.h); never null, and it must
  // outlive the daemon. Start gives it to the jobs (it replaces
  // registry.job.clock), the deadline ticker, the Admin service and
  // Shutdown, so a test that sets a ManualClock here drives all of them.
  const TimeSource* clock = &TimeSource::Real();
};

class Daemon {
 public:
  // Builds and starts the server. `listener` (may be null) receives the
  // jobs' side effects; `admin` supplies version, admin token and events.
  // `restored` jobs (from the store) are adopted before the server listens.
  // A listener that cannot work is an error naming the address and why
  // (listeners.h): port in use, no permission, TLS key not matching its
  // certificate, a live socket of another daemon at the path.
  static StatusOr<std::unique_ptr<Daemon>> Start(DaemonOptions options, JobListener* listener,
                                                 AdminContext admin,
                                                 std::vector<std::unique_ptr<Job>> restored = {});
  ~Daemon();

  // Stops accepting, ends streams (waiting up to `grace` of the daemon's
  // clock), stops the ticker.
  void Shutdown(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));

  // The addresses actually bound, in `listen` order ("127.0.0.1:0" comes
  // back with its port).
  const std::vector<std::string>& bound() const { return bound_; }
  JobRegistry& registry() { return *registry_; }
  ServerStats& stats() { return stats_; }

 private:
  Daemon() = default;
  void TickLoop();

  DaemonOptions options_;
  ServerStats stats_;
  LiveSessions live_sessions_;
  std::unique_ptr<JobRegistry> registry_;
  std::unique_ptr<GnmrService> gnmr_service_;
  std::unique_ptr<AdminService> admin_service_;
  std::unique_ptr<RelayService> relay_service_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::string> bound_;
  // The Unix sockets this daemon created, removed at shutdown only if the
  // path still holds them.
  std::vector<std::pair<std::string, SocketIdentity>> own_sockets_;
  std::thread ticker_;
  Mutex tick_mu_;
  std::condition_variable tick_cv_;
  bool stopping_ GNMR_GUARDED_BY(tick_mu_) = false;
  bool shut_down_ = false;
};

}  // namespace gnmr
