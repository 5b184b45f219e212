// The client's gRPC channel to gnmrd, made the same way for the report
// stream (io_loop.cc) and for the checkpoint calls (state_transfer.cc).
// Internal to the client library.
#pragma once

#include <memory>

#include <grpcpp/grpcpp.h>

#include "gnmr/client.h"
#include "gnmr/status.h"
#include "proto/grpc_status.h"

namespace gnmr {

// A private channel to options.target: its own subchannel (never one made
// to an earlier daemon process by another client in this process), the
// options' reconnect backoff, no message size limit on what it sends.
std::shared_ptr<grpc::Channel> MakeChannel(const ClientOptions& options);

}  // namespace gnmr
