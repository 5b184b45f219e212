// How a GNMR process reconnects to gnmrd: the client library's channel
// (client/src/channel.cc) and gnmr-relay's (relay/relay_server.cc) set
// their reconnect backoff the same way.
//
// Why: gRPC's own backoff grows to 120 s while a daemon is away, so a
// channel notices a daemon that came back up to two minutes late (a rank
// behind gnmr-relay once came back 37 s after gnmrd did). With these
// arguments the channel retries at most `max` apart, and a daemon that is
// back is noticed within about `max`.
#pragma once

#include <chrono>

#include <grpcpp/grpcpp.h>

namespace gnmr {

inline void SetReconnectBackoff(grpc::ChannelArguments* args, std::chrono::milliseconds initial,
                                std::chrono::milliseconds max) {
  args->SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, static_cast<int>(initial.count()));
  args->SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, static_cast<int>(initial.count()));
  args->SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(max.count()));
  // No subchannel, and so no backoff state, shared with other channels.
  args->SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
}

}  // namespace gnmr
