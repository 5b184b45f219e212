// `gnmrctl export` / `gnmrctl import`: a job's controller state
// (gnmr.v1.ControllerState: config, per-unit history, recovery set,
// counters) to and from a file, as binary protobuf or protobuf JSON.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <google/protobuf/util/json_util.h>

#include "programs/gnmrctl/admin_client.h"
#include "programs/gnmrctl/commands.h"
#include "programs/gnmrctl/output_file.h"

namespace gnmr {
namespace cli {
namespace {

std::string Describe(const v1::ControllerState& state) {
  return std::to_string(state.units_size()) + " units, " + std::to_string(state.recovery_size()) +
         " in recovery, last step " +
         (state.has_last_step() ? std::to_string(state.last_step()) : std::string("-")) +
         ", config version " + std::to_string(state.config_version());
}

// Reads a state file, binary or JSON (a JSON file starts with '{' after
// optional whitespace; a binary ControllerState never does).
StatusOr<v1::ControllerState> ReadState(const std::string& path) {
  // (An ifstream opens a directory and reads nothing from it.)
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return NotFound(path + ": cannot read: " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return InvalidArgument(path + ": is a directory, not a state file");
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot read: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return InvalidArgument(path + ": empty file");
  v1::ControllerState state;
  if (bytes[first] == '{') {
    const auto s = google::protobuf::util::JsonStringToMessage(bytes, &state);
    if (!s.ok()) {
      return InvalidArgument(path + ": not a ControllerState in JSON: " + s.ToString());
    }
  } else if (!state.ParseFromString(bytes)) {
    return InvalidArgument(path + ": not a ControllerState (binary protobuf or JSON)");
  }
  if (state.format_version() == 0) {
    return InvalidArgument(path + ": not a ControllerState (no format_version)");
  }
  return state;
}

}  // namespace

int ExportCommand(int argc, char** argv) {
  AdminCommand cmd("export", "gnmrctl export --job J --out FILE [--format binary|json] [options]",
                   "Writes the job's controller state (gnmr.v1.ControllerState: config,\n"
                   "per-unit history, recovery set, counters) to FILE, as binary\n"
                   "protobuf (default) or protobuf JSON. `gnmrctl import` reads either.\n"
                   "The file appears whole or not at all; a summary goes to stderr.");
  cmd.AddJobFlag();
  std::string out, format = "binary";
  cmd.flags().AddString("out", "FILE", "where to write the state (required; - for stdout)", &out);
  cmd.flags().AddString("format", "F", "binary (default) or json", &format);
  if (auto rc = cmd.Start(argc, argv)) return *rc;
  if (out.empty()) return cmd.Usage("--out is required");
  if (format != "binary" && format != "json") {
    return cmd.Usage("--format '" + format + "': expected binary or json");
  }
  OutputFile output;
  Status s = output.Open(out);
  if (!s.ok()) {
    PrintError(s.message());
    return kExitUsage;
  }

  v1::ExportStateRequest req;
  req.set_job_id(cmd.job());
  v1::ExportStateResponse resp;
  const grpc::Status g = cmd.client().stub().ExportState(cmd.client().Context().get(), req, &resp);
  if (!g.ok()) return cmd.client().Fail(g);

  std::string bytes;
  if (format == "json") {
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    options.preserve_proto_field_names = true;
    options.always_print_primitive_fields = true;
    const auto js = google::protobuf::util::MessageToJsonString(resp.state(), &bytes, options);
    if (!js.ok()) {
      PrintError("cannot render the state as JSON: " + js.ToString());
      return kExitFailure;
    }
  } else if (!resp.state().SerializeToString(&bytes)) {
    PrintError("cannot serialize the state");
    return kExitFailure;
  }
  if (std::fwrite(bytes.data(), 1, bytes.size(), output.file()) != bytes.size()) {
    PrintError(output.name() + ": cannot write: " + std::strerror(errno));
    return kExitFailure;
  }
  s = output.Commit();
  if (!s.ok()) {
    PrintError(s.message());
    return kExitFailure;
  }
  std::fflush(stdout);
  std::fprintf(stderr, "job %s: exported %s to %s (%s, %zu bytes)\n", cmd.job().c_str(),
               Describe(resp.state()).c_str(), output.name().c_str(), format.c_str(), bytes.size());
  return kExitOk;
}

int ImportCommand(int argc, char** argv) {
  AdminCommand cmd("import", "gnmrctl import --job J --in FILE [options]",
                   "Replaces the job's controller state with the one in FILE (written by\n"
                   "`gnmrctl export`, binary or JSON, detected). The state must name the\n"
                   "job's units in the job's order; it may add units after them. Needs\n"
                   "the admin token (--admin-token, --admin-token-file or\n"
                   "$GNMR_ADMIN_TOKEN), or the Unix socket of a daemon without one.");
  cmd.AddJobFlag();
  std::string in;
  cmd.flags().AddString("in", "FILE", "the state file (required)", &in);
  if (auto rc = cmd.Start(argc, argv)) return *rc;
  if (in.empty()) return cmd.Usage("--in is required");
  StatusOr<v1::ControllerState> state = ReadState(in);
  if (!state.ok()) {
    PrintError(state.status().message());
    return kExitUsage;
  }
  v1::ImportStateRequest req;
  req.set_job_id(cmd.job());
  *req.mutable_state() = *state;
  v1::ImportStateResponse resp;
  const grpc::Status g =
      cmd.client().stub().ImportState(cmd.client().Context(true).get(), req, &resp);
  if (!g.ok()) return cmd.client().Fail(g);
  std::printf("job %s: imported %s\n", cmd.job().c_str(), Describe(*state).c_str());
  return kExitOk;
}

}  // namespace cli
}  // namespace gnmr
