#include "programs/gnmrctl/admin_client.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <google/protobuf/util/json_util.h>

#include "common/default_target.h"
#include "common/defaults.h"
#include "common/target_check.h"
#include "programs/gnmrctl/commands.h"

namespace gnmr {
namespace cli {
namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

bool IsUnixTarget(const std::string& target) { return target.rfind("unix:", 0) == 0; }

}  // namespace

void AddAdminFlags(FlagParser* flags, AdminOptions* o) {
  flags->AddString("target", "T",
                   "gnmrd address: unix:/path or host:port (default:\n"
                   "$GNMR_TARGET, else unix:/run/gnmr/gnmrd.sock)",
                   &o->target);
  flags->AddString("admin-token", "TOKEN",
                   "admin token (mutations; reads over TCP take it or the\n"
                   "read token) (default: $GNMR_ADMIN_TOKEN)",
                   &o->admin_token);
  flags->AddString("admin-token-file", "FILE", "read the admin token from FILE",
                   &o->admin_token_file);
  flags->AddString("timeout", "S", "deadline of each call in seconds (default 5)", &o->timeout);
  flags->AddBool("json", "machine-readable output (protobuf JSON)", &o->json);
  AddChannelTlsFlags(flags, &o->tls);
}

int UsageError(const std::string& command, const std::string& problem) {
  PrintError(command + ": " + problem + " (see gnmrctl " + command + " --help)");
  return kExitUsage;
}

StatusOr<int64_t> ParseIntFlag(const std::string& flag, const std::string& text, int64_t min,
                               int64_t max) {
  int64_t v = 0;
  if (!ParseFlagInt(text, min, max, &v)) {
    return InvalidArgument("--" + flag + " '" + text + "': expected an integer in [" +
                           std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return v;
}

void PrintJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(message, &json, options).ok()) {
    json = "{}";  // cannot happen for our messages
  }
  std::printf("%s\n", json.c_str());
}

Status AdminClient::Init(const AdminOptions& o) {
  target_ = !o.target.empty() ? o.target : DefaultTarget();  // $GNMR_TARGET first
  char* end = nullptr;
  timeout_seconds_ = std::strtod(o.timeout.c_str(), &end);
  if (o.timeout.empty() || *end != '\0' || !(timeout_seconds_ > 0) || timeout_seconds_ > 86400) {
    return InvalidArgument("--timeout '" + o.timeout + "': expected seconds in (0, 86400]");
  }
  if (!o.admin_token.empty() && !o.admin_token_file.empty()) {
    return InvalidArgument("give --admin-token or --admin-token-file, not both");
  }
  if (!o.admin_token_file.empty()) {
    StatusOr<std::string> token = ReadFlagFile("admin-token-file", o.admin_token_file);
    if (!token.ok()) return token.status();
    admin_token_ = *token;
    while (!admin_token_.empty() && std::strchr(" \t\r\n", admin_token_.back()) != nullptr) {
      admin_token_.pop_back();
    }
    if (admin_token_.empty()) {
      return InvalidArgument("--admin-token-file " + o.admin_token_file + " is empty");
    }
  } else {
    admin_token_ = !o.admin_token.empty() ? o.admin_token : EnvOr(kAdminTokenEnv, "");
  }

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);  // a large job's exported state
  GNMR_RETURN_IF_ERROR(CheckChannelTls(o.tls));
  // The Unix socket is always plaintext (proto/channel_tls.h).
  StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
      IsUnixTarget(target_) ? grpc::InsecureChannelCredentials()
                            : MakeChannelCredentials(o.tls, &args);
  if (!creds.ok()) return creds.status();
  channel_ = grpc::CreateCustomChannel(target_, *creds, args);
  stub_ = v1::Admin::NewStub(channel_);
  return Status::Ok();
}

std::unique_ptr<grpc::ClientContext> AdminClient::Context(bool mutation) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::microseconds(std::llround(timeout_seconds_ * 1e6)));
  // Reads over plain TCP need a token too (the read or the admin token), so
  // the token goes with every call; `mutation` only documents the caller.
  (void)mutation;
  if (!admin_token_.empty()) ctx->AddMetadata(kAdminTokenMetadata, admin_token_);
  return ctx;
}

int AdminClient::Fail(const grpc::Status& status) const {
  // UNAVAILABLE is how gRPC reports a connection that failed; a deadline
  // that passed before the channel ever connected means the same.
  const bool unreachable = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                           (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
                            channel_->GetState(false) != GRPC_CHANNEL_READY);
  if (unreachable) {
    // Say what can be seen locally (a missing socket, a path without
    // "unix:") before gRPC's own words, which for a path are a DNS error.
    const std::string problem = TargetProblem(target_);
    PrintError(
        "cannot reach gnmrd at " + target_ + ": " +
        (problem.empty() ? status.error_message() : problem + " (" + status.error_message() + ")"));
  } else {
    PrintError(std::string(StatusCodeName(CodeOf(status))) + ": " + status.error_message());
  }
  return kExitFailure;
}

AdminCommand::AdminCommand(std::string name, std::string usage, std::string description)
    : name_(std::move(name)), flags_(std::move(usage), std::move(description)) {}

void AdminCommand::AddJobFlag() {
  flags_.AddString("job", "J", "the job id (required)", &job_);
  needs_job_ = true;
}

std::optional<int> AdminCommand::Start(int argc, char** argv) {
  AddAdminFlags(&flags_, &options_);
  const Status parsed = flags_.Parse(argc, argv);
  if (flags_.help_requested()) {
    std::fputs(flags_.Help().c_str(), stdout);
    return kExitOk;
  }
  if (!parsed.ok()) return Usage(parsed.message());
  if (needs_job_ && job_.empty()) return Usage("--job is required");
  const Status s = client_.Init(options_);
  if (!s.ok()) return Usage(s.message());
  return std::nullopt;
}

}  // namespace cli
}  // namespace gnmr
