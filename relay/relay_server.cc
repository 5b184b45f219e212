#include "relay/relay_server.h"

#include <utility>

#include <spdlog/spdlog.h>

#include "common/tsan_annotations.h"
#include "common/unix_socket.h"
#include "gnmr/v1/gnmr.grpc.pb.h"
#include "proto/channel_backoff.h"
#include "relay/local_session.h"

namespace gnmr::relay {
namespace {

constexpr char kSession[] = "/gnmr.v1.Gnmr/Session";
// The unary calls a trainer's client makes; each is passed through.
constexpr const char* kForwarded[] = {"/gnmr.v1.Gnmr/Register", "/gnmr.v1.Admin/ExportState",
                                      "/gnmr.v1.Admin/ImportState"};
constexpr const char* kForwardedMetadata[] = {"x-gnmr-token", "x-gnmr-admin-token"};

bool Forwarded(const std::string& method) {
  for (const char* m : kForwarded) {
    if (method == m) return true;
  }
  return false;
}

// A call the relay does not serve, or cannot serve now.
class Refused final : public grpc::ServerGenericBidiReactor {
 public:
  explicit Refused(const grpc::Status& why) {
    GNMR_HAPPENS_BEFORE(&constructed_);
    Finish(why);
  }
  void OnDone() override {
    GNMR_HAPPENS_AFTER(&constructed_);
    delete this;
  }

 private:
  char constructed_ = 0;  // a sync address only (common/tsan_annotations.h)
};

// One unary call passed through to gnmrd: the request's bytes, the rank's
// tokens and its deadline (bounded) go up; gnmrd's answer and status come
// back as they are. Each reaction, and the upstream call's completion, tells
// TSan what gRPC ordered before it (common/tsan_annotations.h).
class ForwardedUnary final : public grpc::ServerGenericBidiReactor {
 public:
  ForwardedUnary(grpc::GenericCallbackServerContext* ctx, grpc::GenericStub* stub,
                 std::chrono::milliseconds timeout)
      : ctx_(ctx), stub_(stub), timeout_(timeout) {
    GNMR_HAPPENS_BEFORE(&order_.read);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    GNMR_HAPPENS_AFTER(&order_.read);
    if (!ok) {
      GNMR_HAPPENS_BEFORE(&order_.ended);
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request arrived"));
      return;
    }
    for (const char* key : kForwardedMetadata) {
      auto range = ctx_->client_metadata().equal_range(key);
      for (auto it = range.first; it != range.second; ++it) {
        upstream_.AddMetadata(key, std::string(it->second.data(), it->second.size()));
      }
    }
    auto deadline = std::chrono::system_clock::now() + timeout_;
    if (ctx_->deadline() < deadline) deadline = ctx_->deadline();
    upstream_.set_deadline(deadline);
    GNMR_HAPPENS_BEFORE(&order_.call);
    stub_->UnaryCall(&upstream_, ctx_->method(), grpc::StubOptions(), &request_, &response_,
                     [this](grpc::Status s) {
                       GNMR_HAPPENS_AFTER(&order_.call);
                       GNMR_HAPPENS_BEFORE(&order_.ended);
                       if (s.ok()) {
                         StartWriteAndFinish(&response_, grpc::WriteOptions(), s);
                       } else {
                         Finish(s);
                       }
                     });
  }
  void OnCancel() override {
    GNMR_HAPPENS_AFTER(&order_.read);
    upstream_.TryCancel();
  }
  void OnDone() override {
    GNMR_HAPPENS_AFTER(&order_.ended);
    delete this;
  }

 private:
  grpc::GenericCallbackServerContext* const ctx_;
  grpc::GenericStub* const stub_;
  const std::chrono::milliseconds timeout_;
  grpc::ClientContext upstream_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  struct {
    char read, call, ended;
  } order_ = {};  // sync addresses only
};

}  // namespace

RelayServer::RelayServer(const RelayOptions& options, std::shared_ptr<grpc::Channel> upstream)
    : options_(options), upstream_(std::move(upstream)), stub_(upstream_) {}

StatusOr<std::unique_ptr<RelayServer>> RelayServer::Start(const RelayOptions& options) {
  if (options.max_message_bytes <= 4096) {
    return InvalidArgument("max message bytes must be over 4096");
  }
  if (options.reconnect_initial.count() < 1 || options.reconnect_max < options.reconnect_initial) {
    return InvalidArgument(
        "the reconnect backoff must be at least 1 ms, its maximum at least its "
        "start");
  }
  // Node-local ranks only. Over its upstream the relay speaks for its ranks:
  // on gnmrd's Unix socket that transport is trusted (no token needed,
  // first-use registration), which a TCP listener would extend to anyone
  // who can reach the node.
  if (options.listen.rfind("unix:", 0) != 0 || options.listen.size() <= 5) {
    return InvalidArgument("--listen must be a Unix socket (unix:PATH), got '" + options.listen +
                           "': the relay serves the ranks of its own node");
  }
  if (options.tls.enabled() && options.upstream.rfind("unix:", 0) == 0) {
    return InvalidArgument("--tls-ca: gnmrd's Unix socket (" + options.upstream +
                           ") is plaintext; TLS is for a host:port upstream");
  }
  grpc::ChannelArguments args;
  SetReconnectBackoff(&args, options.reconnect_initial, options.reconnect_max);
  args.SetMaxSendMessageSize(-1);
  args.SetMaxReceiveMessageSize(-1);  // gnmrd bounds what it sends
  StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(options.tls, &args);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<RelayServer> relay(
      new RelayServer(options, grpc::CreateCustomChannel(options.upstream, *credentials, args)));
  // A stale socket (left by a relay that died) is removed; a live one is
  // another relay's and is left alone (common/unix_socket.h).
  GNMR_RETURN_IF_ERROR(PrepareUnixSocket(options.listen.substr(5)));
  grpc::ServerBuilder builder;
  // Past gnmrd's bound a message cannot fit as a lane; below it, whether it
  // fits with its token and the lane's framing is NodeStream::Send's to say.
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials());
  builder.RegisterCallbackGenericService(relay.get());
  relay->server_ = builder.BuildAndStart();
  if (!relay->server_) {
    return DiagnoseUnixListen(options.listen)
        .value_or(Status(StatusCode::kUnavailable, "cannot listen on " + options.listen));
  }
  return relay;
}

RelayServer::~RelayServer() { Shutdown(); }

void RelayServer::Shutdown() {
  std::shared_ptr<NodeStream> stream;
  {
    MutexLock lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    stream = std::move(stream_);
  }
  if (stream) stream->Cancel();  // its lanes end: the ranks' streams finish
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (stream && !stream->WaitFinished(std::chrono::seconds(5))) {
    spdlog::warn("gnmr-relay: the stream to gnmrd did not end within 5 s of shutdown");
  }
}

uint64_t RelayServer::node_streams_opened() const {
  MutexLock lock(mu_);
  return opened_;
}

uint64_t RelayServer::sessions_opened() const {
  MutexLock lock(mu_);
  return sessions_;
}

Status RelayServer::CheckUpstream(std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::GetStatusResponse response;
  const grpc::Status s = v1::Admin::NewStub(upstream_)->GetStatus(&ctx, {}, &response);
  // An answer, even a refusal (no read token over TCP), is gnmrd's.
  if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
      s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
    return Status::Ok();
  }
  return Status(StatusCode::kUnavailable,
                "cannot reach gnmrd at " + options_.upstream + ": " + s.error_message());
}

std::shared_ptr<NodeStream> RelayServer::CurrentStream() {
  MutexLock lock(mu_);
  if (shut_down_) return nullptr;
  if (stream_ && !stream_->ended()) return stream_;
  // An ended stream's threads finish on their own; its last holder lets go.
  NodeStream::Limits limits;
  limits.max_message_bytes = static_cast<size_t>(options_.max_message_bytes);
  limits.max_pending_bytes = options_.max_pending_bytes;
  stream_ = NodeStream::Start(upstream_, limits);
  ++opened_;
  return stream_;
}

grpc::ServerGenericBidiReactor* RelayServer::CreateReactor(
    grpc::GenericCallbackServerContext* ctx) {
  const std::string& method = ctx->method();
  if (method == kSession) {
    {
      MutexLock lock(mu_);
      ++sessions_;
    }
    return new LocalSession(ctx, CurrentStream());
  }
  if (Forwarded(method)) return new ForwardedUnary(ctx, &stub_, options_.forward_timeout);
  return new Refused(grpc::Status(
      grpc::StatusCode::UNIMPLEMENTED,
      "gnmr-relay passes on Register, Session, ExportState and ImportState only; ask gnmrd for " +
          method));
}

}  // namespace gnmr::relay
