#include "python/src/state_rpc.h"

#include <grpcpp/grpcpp.h>

#include "gnmr/v1/gnmr.grpc.pb.h"

namespace gnmr::python {
namespace {

std::unique_ptr<v1::Admin::Stub> Stub(const std::string& target) {
  grpc::ChannelArguments args;
  // A private connection: never reuse one made to an earlier daemon process.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return v1::Admin::NewStub(
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
}

void SetDeadline(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) {
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
}

Status FromGrpc(const char* what, const grpc::Status& s) {
  return Status(static_cast<StatusCode>(s.error_code()),
                std::string(what) + ": " + s.error_message());
}

}  // namespace

StatusOr<std::string> ExportState(const std::string& target, const std::string& job_id,
                                  std::chrono::milliseconds timeout) {
  if (target.empty()) return InvalidArgument("ExportState: empty target");
  auto stub = Stub(target);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  v1::ExportStateRequest req;
  req.set_job_id(job_id);
  v1::ExportStateResponse resp;
  grpc::Status s = stub->ExportState(&ctx, req, &resp);
  if (!s.ok()) return FromGrpc("Admin.ExportState", s);
  std::string out;
  if (!resp.state().SerializeToString(&out)) return Internal("ExportState: cannot serialize");
  return out;
}

StatusOr<uint64_t> ImportState(const std::string& target, const std::string& job_id,
                               const std::string& state, const std::string& admin_token,
                               std::chrono::milliseconds timeout) {
  if (target.empty()) return InvalidArgument("ImportState: empty target");
  v1::ImportStateRequest req;
  req.set_job_id(job_id);
  if (!req.mutable_state()->ParseFromString(state)) {
    return InvalidArgument("ImportState: the bytes are not a gnmr.v1.ControllerState");
  }
  auto stub = Stub(target);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  if (!admin_token.empty()) ctx.AddMetadata("x-gnmr-admin-token", admin_token);
  v1::ImportStateResponse resp;
  grpc::Status s = stub->ImportState(&ctx, req, &resp);
  if (!s.ok()) return FromGrpc("Admin.ImportState", s);
  return resp.generation();
}

}  // namespace gnmr::python
