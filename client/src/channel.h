// The client's gRPC channel to gnmrd, made the same way for the report
// stream (io_loop.cc) and for the checkpoint calls (state_transfer.cc).
// Internal to the client library.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "common/status.h"
#include "gnmr/client.h"

namespace gnmr {

// A private channel to options.target: its own subchannel (never one made
// to an earlier daemon process by another client in this process), the
// options' reconnect backoff, no message size limit on what it sends.
std::shared_ptr<grpc::Channel> MakeChannel(const ClientOptions& options);

// grpc::Status -> Status with `what` prefixed to the message (gRPC's codes
// are the canonical codes StatusCode numbers).
Status FromGrpc(const grpc::Status& s, const char* what);

}  // namespace gnmr
