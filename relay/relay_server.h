// RelayServer: gnmr-relay, one per node. It serves the node's ranks what
// they ask gnmrd for and holds one stream to gnmrd for all their Sessions
// (docs/relay.md):
// - Session: each rank's stream becomes a lane of the node's stream
//   (local_session.h, node_stream.h);
// - Register and the checkpoint calls (Admin.ExportState, ImportState):
//   passed through as they are, with the rank's tokens and deadline;
// - anything else: UNIMPLEMENTED, naming gnmrd as the place to ask.
// The relay holds no job state: gnmrd decides everything, and a relay that
// restarts loses nothing but its ranks' streams, which reconnect.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "gnmr/status.h"
#include "proto/channel_tls.h"
#include "relay/node_stream.h"

namespace gnmr::relay {

struct RelayOptions {
  std::string listen = "unix:/run/gnmr/relay.sock";    // the ranks: a Unix socket only
  std::string upstream = "unix:/run/gnmr/gnmrd.sock";  // gnmrd
  // gnmrd's own bound (its max_message_bytes): a rank's message goes up
  // only if it fits with its token and the lane's few bytes around it.
  int max_message_bytes = 64 << 20;
  // What may wait for gnmrd to read it (node_stream.h): past it gnmrd is
  // not reading, and a rank that sends is ended rather than the relay
  // growing.
  size_t max_pending_bytes = 256u << 20;
  std::chrono::milliseconds forward_timeout{60000};  // a passed-through call's longest wait
  // TLS to gnmrd (a host:port upstream only), as gnmrctl's --tls-* flags
  // (proto/channel_tls.h): the CA that signed gnmrd's certificate; with a
  // certificate and key, mutual TLS.
  ChannelTls tls;
  // The upstream channel's reconnect backoff (proto/channel_backoff.h): with
  // gRPC's own, growing to 120 s, ranks behind the relay came back up to
  // minutes after gnmrd did. As the client library's defaults.
  std::chrono::milliseconds reconnect_initial{50};
  std::chrono::milliseconds reconnect_max{1000};
};

class RelayServer final : public grpc::CallbackGenericService {
 public:
  // Binds `listen` (InvalidArgument unless a Unix socket: relay_server.cc
  // says why); a precise error when it cannot (the path's directory
  // missing, the address in use).
  static StatusOr<std::unique_ptr<RelayServer>> Start(const RelayOptions& options);
  ~RelayServer() override;

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override;

  // Ends every stream (the ranks reconnect) and stops serving.
  void Shutdown();
  // Streams to gnmrd opened so far (a new one after each that ended).
  uint64_t node_streams_opened() const;
  // Ranks' Session streams opened so far.
  uint64_t sessions_opened() const;

  // One call to gnmrd (Admin.GetStatus) within `timeout`: OK if gnmrd
  // answered (whatever it answered), else UNAVAILABLE with gRPC's reason
  // (gnmrd is down, or TLS failed: a CA that did not sign gnmrd's
  // certificate, a client certificate gnmrd refused).
  Status CheckUpstream(std::chrono::milliseconds timeout);

 private:
  RelayServer(const RelayOptions& options, std::shared_ptr<grpc::Channel> upstream);
  // The live node stream, opened if there is none or it ended.
  std::shared_ptr<NodeStream> CurrentStream();

  const RelayOptions options_;
  std::shared_ptr<grpc::Channel> upstream_;
  grpc::GenericStub stub_;
  std::unique_ptr<grpc::Server> server_;
  mutable Mutex mu_;
  std::shared_ptr<NodeStream> stream_ GNMR_GUARDED_BY(mu_);
  uint64_t opened_ GNMR_GUARDED_BY(mu_) = 0;
  uint64_t sessions_ GNMR_GUARDED_BY(mu_) = 0;
  bool shut_down_ GNMR_GUARDED_BY(mu_) = false;
};

}  // namespace gnmr::relay
