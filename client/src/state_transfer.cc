// Client::ExportState / ImportState: the checkpoint calls (docs/checkpoint.md),
// handed to the client's transport; the gRPC transport's are here.
// Plain unary Admin RPCs with a deadline on a channel of their own, made per
// call: a checkpoint is rare, and a fresh channel never reuses a connection
// to a daemon process that has since been replaced.
#include "client/src/state_transfer.h"

#include <chrono>
#include <string>

#include <grpcpp/grpcpp.h>

#include "client/src/channel.h"
#include "client/src/client_impl.h"
#include "gnmr/v1/gnmr.grpc.pb.h"

namespace gnmr {
namespace {

void Prepare(const ClientOptions& o, std::chrono::milliseconds timeout, grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  if (!o.admin_token.empty()) ctx->AddMetadata("x-gnmr-admin-token", o.admin_token);
}

Status CheckTimeout(std::chrono::milliseconds timeout, const char* what) {
  if (timeout.count() <= 0) {
    return InvalidArgument(std::string(what) + ": timeout must be positive");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::string> ExportStateRpc(const ClientOptions& o, std::chrono::milliseconds timeout) {
  auto stub = v1::Admin::NewStub(MakeChannel(o));
  grpc::ClientContext ctx;
  Prepare(o, timeout, &ctx);
  v1::ExportStateRequest req;
  req.set_job_id(o.job_id);
  v1::ExportStateResponse resp;
  GNMR_RETURN_IF_ERROR(FromGrpc(stub->ExportState(&ctx, req, &resp), "Admin.ExportState"));
  std::string out;
  if (!resp.state().SerializeToString(&out)) {
    return Internal("ExportState: the state cannot be serialized");
  }
  return out;
}

StatusOr<uint64_t> ImportStateRpc(const ClientOptions& o, const std::string& state,
                                  std::chrono::milliseconds timeout) {
  v1::ImportStateRequest req;
  req.set_job_id(o.job_id);
  req.set_resume(true);  // a trainer's checkpoint load: its steps start over from the state
  if (!req.mutable_state()->ParseFromString(state)) {
    return InvalidArgument(
        "ImportState: the bytes are not a gnmr.v1.ControllerState "
        "(not from ExportState?)");
  }
  auto stub = v1::Admin::NewStub(MakeChannel(o));
  grpc::ClientContext ctx;
  Prepare(o, timeout, &ctx);
  v1::ImportStateResponse resp;
  GNMR_RETURN_IF_ERROR(FromGrpc(stub->ImportState(&ctx, req, &resp), "Admin.ImportState"));
  return resp.generation();
}

StatusOr<std::string> Client::ExportState(std::chrono::milliseconds timeout) {
  return Guard([&]() -> StatusOr<std::string> {
    GNMR_RETURN_IF_ERROR(CheckTimeout(timeout, "ExportState"));
    return impl_->transport->ExportState(timeout);
  });
}

StatusOr<uint64_t> Client::ImportState(const std::string& state,
                                       std::chrono::milliseconds timeout) {
  return Guard([&]() -> StatusOr<uint64_t> {
    GNMR_RETURN_IF_ERROR(CheckTimeout(timeout, "ImportState"));
    return impl_->transport->ImportState(state, timeout);
  });
}

}  // namespace gnmr
