// `gnmrctl config get|set`: a job's controller config as YAML (the format
// of `gnmrctl replay --config`), and changing it from a file and/or
// `--set key=value` overrides.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "controller/config_yaml.h"
#include "controller/state_codec.h"
#include "tools/gnmrctl/admin_client.h"
#include "tools/gnmrctl/commands.h"

namespace gnmr {
namespace cli {
namespace {

constexpr char kConfigHelp[] =
    "usage: gnmrctl config get --job J [options]\n"
    "       gnmrctl config set --job J [--file CONFIG.yaml] [--set key=value ...]\n"
    "\n"
    "Reads or changes a job's controller config (`gnmrctl config get --help`,\n"
    "`gnmrctl config set --help`).\n";

// Fetches the job's config in force; on failure prints the error and
// returns false.
bool FetchConfig(AdminCommand* cmd, v1::GetConfigResponse* resp) {
  v1::GetConfigRequest req;
  req.set_job_id(cmd->job());
  const grpc::Status g = cmd->client().stub().GetConfig(cmd->client().Context().get(), req, resp);
  if (!g.ok()) cmd->client().Fail(g);
  return g.ok();
}

int ConfigGet(int argc, char** argv) {
  AdminCommand cmd("config get", "gnmrctl config get --job J [options]",
                   "Prints the job's controller config in force as YAML (every key;\n"
                   "`gnmrctl config set --file` and `gnmrctl replay --config` read it\n"
                   "back), after a comment line with its config version. With --json:\n"
                   "{\"config\": {...}, \"config_version\": \"N\"}.");
  cmd.AddJobFlag();
  if (auto rc = cmd.Start(argc, argv)) return *rc;
  v1::GetConfigResponse resp;
  if (!FetchConfig(&cmd, &resp)) return kExitFailure;
  if (cmd.json()) {
    PrintJson(resp);
    return kExitOk;
  }
  StatusOr<ControllerConfig> config = ConfigFromProto(resp.config());
  if (!config.ok()) {
    PrintError("the daemon sent an invalid config: " + config.status().message());
    return kExitFailure;
  }
  std::printf("# job %s, config version %llu\n%s", cmd.job().c_str(),
              static_cast<unsigned long long>(resp.config_version()),
              ControllerConfigToYaml(*config).c_str());
  return kExitOk;
}

int ConfigSet(int argc, char** argv) {
  AdminCommand cmd(
      "config set",
      "gnmrctl config set --job J [--file CONFIG.yaml] [--set key=value ...] [options]",
      "Changes the job's controller config: starts from the config in force,\n"
      "applies the keys of --file (keys it lacks keep their values), then the\n"
      "--set overrides in order, and sends the complete result. Prints the new\n"
      "config version. Needs the admin token (--admin-token, --admin-token-file\n"
      "or $GNMR_ADMIN_TOKEN), or the Unix socket of a daemon without one.\n"
      "\n"
      "Config keys: warmup, ema_decay, tau, tau_delta, gnmr_floor, short_window,\n"
      "max_o, lock_steps, lag, entry, clip_min_scale, actions (a list of\n"
      "{pattern, action, clip_min_scale}; replaced as a whole).");
  cmd.AddJobFlag();
  std::string file;
  std::vector<std::string> sets;
  bool dry_run = false;
  cmd.flags().AddString("file", "CONFIG.yaml", "YAML config keys to apply", &file);
  cmd.flags().AddRepeated("set", "KEY=VALUE", "override one key, e.g. --set max_o=2", &sets);
  cmd.flags().AddBool("dry-run", "print the resulting config (YAML) and change nothing", &dry_run);
  if (auto rc = cmd.Start(argc, argv)) return *rc;
  if (file.empty() && sets.empty()) return cmd.Usage("nothing to change: give --file or --set");

  v1::GetConfigResponse current;
  if (!FetchConfig(&cmd, &current)) return kExitFailure;
  StatusOr<ControllerConfig> base = ConfigFromProto(current.config());
  if (!base.ok()) {
    PrintError("the daemon sent an invalid config: " + base.status().message());
    return kExitFailure;
  }
  ControllerConfig config = *base;
  if (!file.empty()) {
    StatusOr<ControllerConfig> loaded = LoadControllerConfigFile(file, config);
    if (!loaded.ok()) {
      PrintError(loaded.status().message());
      return kExitUsage;
    }
    config = *loaded;
  }
  for (const std::string& assignment : sets) {
    const Status s = ApplyOverride(&config, assignment);
    if (!s.ok()) {
      PrintError(s.message());
      return kExitUsage;
    }
  }
  if (dry_run) {
    std::printf("# job %s, config version %llu with the changes (not sent)\n%s", cmd.job().c_str(),
                static_cast<unsigned long long>(current.config_version()),
                ControllerConfigToYaml(config).c_str());
    return kExitOk;
  }
  v1::SetConfigRequest req;
  req.set_job_id(cmd.job());
  ConfigToProto(config, req.mutable_config());
  v1::SetConfigResponse resp;
  const grpc::Status g =
      cmd.client().stub().SetConfig(cmd.client().Context(true).get(), req, &resp);
  if (!g.ok()) return cmd.client().Fail(g);
  if (cmd.json()) {
    PrintJson(resp);
  } else {
    std::printf("job %s: config version %llu (was %llu)\n", cmd.job().c_str(),
                static_cast<unsigned long long>(resp.config_version()),
                static_cast<unsigned long long>(current.config_version()));
  }
  return kExitOk;
}

}  // namespace

int ConfigCommand(int argc, char** argv) {
  if (argc < 1) {
    std::fputs(kConfigHelp, stderr);
    return kExitUsage;
  }
  const std::string sub = argv[0];
  if (sub == "get") return ConfigGet(argc - 1, argv + 1);
  if (sub == "set") return ConfigSet(argc - 1, argv + 1);
  if (sub == "-h" || sub == "--help") {
    std::fputs(kConfigHelp, stdout);
    return kExitOk;
  }
  return UsageError("config", "unknown subcommand '" + sub + "': expected get or set");
}

}  // namespace cli
}  // namespace gnmr
