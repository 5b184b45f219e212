#include "daemon/server/daemon.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

namespace gnmr {
namespace {

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> TcpCredentials(const TlsOptions& tls) {
  if (tls.cert_file.empty()) return grpc::InsecureServerCredentials();
  StatusOr<std::string> cert = ReadFile(tls.cert_file);
  if (!cert.ok()) return cert.status();
  StatusOr<std::string> key = ReadFile(tls.key_file);
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  if (!tls.client_ca_file.empty()) {
    StatusOr<std::string> ca = ReadFile(tls.client_ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

bool IsUnix(const std::string& addr) { return addr.rfind("unix:", 0) == 0; }

}  // namespace

StatusOr<std::unique_ptr<Daemon>> Daemon::Start(DaemonOptions options, JobListener* listener,
                                                AdminContext admin,
                                                std::vector<std::unique_ptr<Job>> restored) {
  if (options.listen.empty()) return InvalidArgument("nothing to listen on");
  bool tcp = false;
  for (const std::string& addr : options.listen) tcp = tcp || !IsUnix(addr);
  if (tcp) {
    GNMR_RETURN_IF_ERROR(CheckTlsFiles(options.tls));
  }
  // One clock for the daemon and its jobs (restored jobs were made with
  // the same options by gnmrd).
  options.registry.job.clock = options.clock;
  std::unique_ptr<Daemon> d(new Daemon());
  d->options_ = options;
  d->stats_.record_rpc = options.record_rpc;
  d->registry_ = std::make_unique<JobRegistry>(options.registry, listener);
  for (std::unique_ptr<Job>& job : restored) {
    GNMR_RETURN_IF_ERROR(d->registry_->Adopt(std::move(job)));
  }
  admin.listen = options.listen;
  admin.insecure_tcp = options.insecure_tcp;
  admin.request_gate = options.request_gate.get();
  admin.max_answer_bytes = static_cast<uint64_t>(options.max_message_bytes);
  admin.clock = options.clock;
  d->gnmr_service_ = std::make_unique<GnmrService>(
      d->registry_.get(), &d->stats_, options.limits, &d->live_sessions_, options.insecure_tcp,
      options.session_queue, options.request_gate.get(), options.clock);
  d->admin_service_ = std::make_unique<AdminService>(d->registry_.get(), &d->stats_, admin);
  d->relay_service_ =
      std::make_unique<RelayService>(d->registry_.get(), &d->stats_, &d->live_sessions_,
                                     options.insecure_tcp, options.session_queue);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  // gRPC sets SO_REUSEPORT by default: a second daemon on the same port
  // would then start and share the connections. One daemon per port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  StatusOr<std::shared_ptr<grpc::ServerCredentials>> tcp_creds = TcpCredentials(options.tls);
  if (!tcp_creds.ok()) return tcp_creds.status();
  std::vector<int> ports(options.listen.size(), 0);
  std::vector<std::string> grpc_paths(options.listen.size());  // Unix: what gRPC binds
  for (size_t i = 0; i < options.listen.size(); ++i) {
    const std::string& addr = options.listen[i];
    if (IsUnix(addr)) {
      const std::string path = addr.substr(5);
      GNMR_RETURN_IF_ERROR(PrepareUnixSocket(path));
      grpc_paths[i] = PrivateSocketPath(path);
      if (grpc_paths[i].empty()) grpc_paths[i] = path;
      builder.AddListeningPort("unix:" + grpc_paths[i], grpc::InsecureServerCredentials());
    } else {
      builder.AddListeningPort(addr, *tcp_creds, &ports[i]);
    }
  }
  builder.RegisterService(d->gnmr_service_.get());
  builder.RegisterService(d->admin_service_.get());
  builder.RegisterService(d->relay_service_.get());
  d->server_ = builder.BuildAndStart();
  if (!d->server_) {
    // gRPC does not say which address failed or why: find out.
    std::string all;
    for (const std::string& addr : options.listen) {
      if (std::optional<Status> why = DiagnoseListenFailure(addr)) return *why;
      all += (all.empty() ? "" : ", ") + addr;
    }
    return Status(StatusCode::kUnavailable,
                  "cannot listen on " + all + ": gRPC could not start the server");
  }
  for (size_t i = 0; i < options.listen.size(); ++i) {
    const std::string& addr = options.listen[i];
    if (IsUnix(addr)) {
      const std::string path = addr.substr(5);
      if (grpc_paths[i] != path) {
        GNMR_RETURN_IF_ERROR(PublishSocket(grpc_paths[i], path));
      }
      if (std::optional<SocketIdentity> id = IdentifySocket(path)) {
        d->own_sockets_.emplace_back(path, *id);
      }
      if (::chmod(path.c_str(), static_cast<mode_t>(options.unix_socket_mode)) != 0) {
        return Status(StatusCode::kFailedPrecondition,
                      "cannot set the mode of " + addr + ": " + std::strerror(errno));
      }
      d->bound_.push_back(addr);
    } else {
      if (ports[i] == 0) {
        return DiagnoseListenFailure(addr).value_or(
            Status(StatusCode::kUnavailable, "cannot listen on " + addr));
      }
      d->bound_.push_back(addr.substr(0, addr.rfind(':') + 1) + std::to_string(ports[i]));
    }
  }
  d->admin_service_->SetListen(d->bound_);
  d->ticker_ = std::thread([raw = d.get()] { raw->TickLoop(); });
  return d;
}

void Daemon::TickLoop() {
  // Idle expiry is checked a few times per expiry period, at most once a
  // second: cheap, and a short test expiry is still noticed soon.
  const auto expiry = options_.registry.idle_expiry;
  const auto expiry_check = std::max<std::chrono::milliseconds>(
      std::min<std::chrono::milliseconds>(expiry / 4, std::chrono::seconds(1)),
      options_.tick_interval);
  // Deadlines and expiry go by the daemon's clock (a test's clock decides
  // when they pass); tick_interval only paces the checks, in real time.
  const TimeSource& clock = *options_.clock;
  auto next_expiry_check = clock.Now() + expiry_check;
  MutexLock lock(tick_mu_);
  while (!stopping_) {
    tick_cv_.wait_for(lock.native(), options_.tick_interval);
    if (stopping_) break;
    lock.Unlock();
    try {
      const auto now = clock.Now();
      registry_->TickAll(now);
      if (expiry > std::chrono::milliseconds::zero() && now >= next_expiry_check) {
        next_expiry_check = now + expiry_check;
        registry_->ExpireIdle(now);
      }
    } catch (const std::exception& e) {  // an escaped exception kills gnmrd
      spdlog::error("deadline ticker: {}", e.what());
    } catch (...) {
      spdlog::error("deadline ticker: unknown exception");
    }
    lock.Lock();
  }
}

void Daemon::Shutdown(std::chrono::milliseconds grace) {
  if (shut_down_) return;
  shut_down_ = true;
  // A daemon whose Start failed never served: nothing to end or save (and
  // no socket of its own to remove).
  if (!server_) return;
  // Streams end with UNAVAILABLE so clients reconnect (to this daemon's
  // successor); the server then waits for in-flight RPCs up to `grace`.
  // Every stream, attached to a job or not yet (a stream whose hello is in
  // flight would hold the server for the whole grace period), and any new
  // one.
  live_sessions_.CloseAll(Status(StatusCode::kUnavailable, "gnmrd is shutting down"));
  // Let those streams finish (status delivered) before the server tears
  // its transports down; bounded by the grace period, on the daemon's clock.
  const TimeSource& clock = *options_.clock;
  const auto streams_deadline =
      clock.Now() + std::min<std::chrono::milliseconds>(grace, std::chrono::seconds(1));
  while (stats_.sessions_open.load() > 0 && clock.Now() < streams_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // gRPC takes a wall-clock deadline: the same grace from the same clock.
  server_->Shutdown(clock.WallNow() + grace);
  {
    MutexLock lock(tick_mu_);
    stopping_ = true;
  }
  tick_cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  registry_->SnapshotAll();
  for (const auto& [path, id] : own_sockets_) RemoveOwnSocket(path, id);
}

Daemon::~Daemon() { Shutdown(std::chrono::milliseconds(0)); }

}  // namespace gnmr
