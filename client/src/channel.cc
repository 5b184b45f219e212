#include "client/src/channel.h"

#include <string>

namespace gnmr {

std::shared_ptr<grpc::Channel> MakeChannel(const ClientOptions& o) {
  grpc::ChannelArguments args;
  // The channel reconnects on its own schedule; make it ours, so a daemon
  // that comes back is noticed within backoff_max.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, static_cast<int>(o.backoff_initial.count()));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, static_cast<int>(o.backoff_initial.count()));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(o.backoff_max.count()));
  // No subchannel (and backoff state) shared with other clients.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxSendMessageSize(-1);
  // An exported controller state grows with units x window; the daemon
  // bounds it (docs/limits.md), the client does not second-guess it.
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(), args);
}

}  // namespace gnmr
