#include "client/src/channel.h"

#include <string>

#include "proto/channel_backoff.h"

namespace gnmr {

std::shared_ptr<grpc::Channel> MakeChannel(const ClientOptions& o) {
  grpc::ChannelArguments args;
  // The channel reconnects on its own schedule; make it ours, so a daemon
  // that comes back is noticed within backoff_max (proto/channel_backoff.h).
  SetReconnectBackoff(&args, o.backoff_initial, o.backoff_max);
  args.SetMaxSendMessageSize(-1);
  // An exported controller state grows with units x window; the daemon
  // bounds it (docs/limits.md), the client does not second-guess it.
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(), args);
}

}  // namespace gnmr
