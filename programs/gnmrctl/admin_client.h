// What every admin subcommand of gnmrctl shares: the connection flags
// (--target, --admin-token[-file], --timeout, --json, --tls-*), the channel
// and stub to gnmrd's Admin service, per-call contexts (deadline, admin token
// on mutations) and the one error format:
//   gnmrctl: cannot reach gnmrd at TARGET: <gRPC message>    (exit 1)
//   gnmrctl: <CODE>: <message>                               (exit 1)
//   gnmrctl: <command>: <problem> (see gnmrctl <command> --help)  (exit 2)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "common/flag_parser.h"
#include "gnmr/status.h"
#include "gnmr/v1/gnmr.grpc.pb.h"
#include "proto/channel_tls.h"
#include "proto/grpc_status.h"

namespace gnmr {
namespace cli {

struct AdminOptions {
  std::string target;       // empty: DefaultTarget() ($GNMR_TARGET, else gnmrd's socket)
  std::string admin_token;  // empty: --admin-token-file, else $GNMR_ADMIN_TOKEN
  std::string admin_token_file;
  std::string timeout = "5";  // seconds, the deadline of each RPC
  bool json = false;
  ChannelTls tls;  // --tls-* (proto/channel_tls.h)
};

// Declares the connection flags above on `flags`.
void AddAdminFlags(FlagParser* flags, AdminOptions* options);

// Prints "gnmrctl: COMMAND: PROBLEM (see gnmrctl COMMAND --help)"; returns 2.
int UsageError(const std::string& command, const std::string& problem);

// Parses a flag value as an integer in [min, max]; InvalidArgument names
// the flag.
StatusOr<int64_t> ParseIntFlag(const std::string& flag, const std::string& text, int64_t min,
                               int64_t max);

// Prints `message` as one line of protobuf JSON (proto field names, every
// field present; 64-bit integers are strings, as the JSON mapping says).
void PrintJson(const google::protobuf::Message& message);

class AdminClient {
 public:
  // Resolves the defaults and reads the TLS and token files. InvalidArgument
  // (print it with UsageError) when a flag or file is bad.
  Status Init(const AdminOptions& options);

  v1::Admin::Stub& stub() { return *stub_; }
  const std::string& target() const { return target_; }

  // A context for one call: the deadline and the token (sent on every
  // call: reads over plain TCP need the read or the admin token).
  std::unique_ptr<grpc::ClientContext> Context(bool mutation = false) const;

  // Prints the error of a failed call (see the top of this file); returns 1.
  int Fail(const grpc::Status& status) const;

 private:
  std::string target_;
  std::string admin_token_;
  double timeout_seconds_ = 5;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Admin::Stub> stub_;
};

// One admin subcommand: its flags (its own, then the connection flags), the
// command line, and the client. Typical use:
//   AdminCommand cmd("units", kUsage, kDescription);
//   cmd.AddJobFlag();
//   cmd.flags().AddString(...);
//   if (auto rc = cmd.Start(argc, argv)) return *rc;
//   ... cmd.client().stub().ListUnits(cmd.client().Context().get(), ...)
class AdminCommand {
 public:
  AdminCommand(std::string name, std::string usage, std::string description);
  AdminCommand(const AdminCommand&) = delete;  // the flags point into it
  AdminCommand& operator=(const AdminCommand&) = delete;

  FlagParser& flags() { return flags_; }
  // Declares --job J, required.
  void AddJobFlag();
  const std::string& job() const { return job_; }
  bool json() const { return options_.json; }

  // Parses the arguments and connects. Returns the exit code to return now
  // (--help: 0; a bad command line: 2, error printed), or nullopt to go on.
  std::optional<int> Start(int argc, char** argv);

  AdminClient& client() { return client_; }
  // UsageError for this command.
  int Usage(const std::string& problem) const { return UsageError(name_, problem); }

 private:
  std::string name_;
  FlagParser flags_;
  AdminOptions options_;
  bool needs_job_ = false;
  std::string job_;
  AdminClient client_;
};

}  // namespace cli
}  // namespace gnmr
