// Status <-> grpc::Status: the one mapping the client, the daemon and
// gnmrctl use. Both sides number their codes as gRPC's canonical codes
// (gnmr/status.h), checked here, so the mapping is a cast.
#pragma once

#include <string>

#include <grpcpp/grpcpp.h>

#include "gnmr/status.h"

namespace gnmr {

static_assert(
    static_cast<int>(StatusCode::kCancelled) == grpc::StatusCode::CANCELLED &&
        static_cast<int>(StatusCode::kInvalidArgument) == grpc::StatusCode::INVALID_ARGUMENT &&
        static_cast<int>(StatusCode::kNotFound) == grpc::StatusCode::NOT_FOUND &&
        static_cast<int>(StatusCode::kResourceExhausted) == grpc::StatusCode::RESOURCE_EXHAUSTED &&
        static_cast<int>(StatusCode::kFailedPrecondition) ==
            grpc::StatusCode::FAILED_PRECONDITION &&
        static_cast<int>(StatusCode::kUnavailable) == grpc::StatusCode::UNAVAILABLE &&
        static_cast<int>(StatusCode::kDataLoss) == grpc::StatusCode::DATA_LOSS &&
        static_cast<int>(StatusCode::kUnauthenticated) == grpc::StatusCode::UNAUTHENTICATED,
    "gnmr::StatusCode must number its codes as gRPC does");

inline StatusCode CodeOf(const grpc::Status& s) { return static_cast<StatusCode>(s.error_code()); }

inline grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message());
}

// `what` (may be null) is prefixed to the message: "Admin.ExportState: ...".
inline Status FromGrpc(const grpc::Status& s, const char* what = nullptr) {
  if (s.ok()) return Status::Ok();
  if (what == nullptr) return Status(CodeOf(s), s.error_message());
  return Status(CodeOf(s), std::string(what) + ": " + s.error_message());
}

}  // namespace gnmr
