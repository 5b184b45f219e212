// `gnmrctl config get|set`: a job's controller config as YAML (the format
// of `gnmrctl replay --config`), and changing it from a file and/or
// `--set key=value` overrides; `gnmrctl config keys`: the keys, from the
// config schema (controller/types/config_schema.h).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/flag_parser.h"
#include "controller/config_yaml.h"
#include "controller/state_codec.h"
#include "controller/types/config_schema.h"
#include "programs/gnmrctl/admin_client.h"
#include "programs/gnmrctl/commands.h"
#include "programs/gnmrctl/table.h"

namespace gnmr {
namespace cli {
namespace {

constexpr char kConfigHelp[] =
    "usage: gnmrctl config get --job J [options]\n"
    "       gnmrctl config set --job J [--file CONFIG.yaml] [--set key=value ...]\n"
    "       gnmrctl config keys [--markdown]\n"
    "\n"
    "Reads or changes a job's controller config (`gnmrctl config get --help`,\n"
    "`gnmrctl config set --help`); lists the config keys (`config keys`).\n";

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
      "\n" +
          ConfigKeysHelp("Config keys", "replaced as a whole"));
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

int ConfigKeysList(int argc, char** argv) {
  bool markdown = false;
  FlagParser flags("gnmrctl config keys [--markdown]",
                   "Lists the controller config keys of YAML files, --set and the Python\n"
                   "dict: type, default, valid values and meaning. Needs no daemon.");
  flags.AddBool("markdown", "the table of docs/controller.md, as Markdown", &markdown);
  const Status s = flags.Parse(argc, argv);
  if (!s.ok()) return UsageError("config keys", s.message());
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return kExitOk;
  }
  if (markdown) {
    std::fputs(ConfigKeysMarkdown().c_str(), stdout);
    return kExitOk;
  }
  Table t({{"key"}, {"type"}, {"default"}, {"valid values"}, {"meaning"}});
  for (const ConfigKeyDoc& d : ConfigKeyDocs()) {
    t.AddRow({d.key, d.type, d.default_value, d.range, d.meaning});
  }
  std::fputs(t.Render().c_str(), stdout);
  return kExitOk;
}

}  // namespace

std::string ConfigKeysHelp(const std::string& lead, const std::string& actions_note) {
  // ConfigKeyList() ends with "actions".
  const std::string text = lead + ": " + ConfigKeyList() +
                           " (a list of {pattern, action, clip_min_scale}; " + actions_note +
                           "). `gnmrctl config keys` describes each.";
  // Wrapped at 72 columns, like the rest of the help.
  std::string out, line;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line.empty() && line.size() + 1 + word.size() > 72) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    start = end + 1;
  }
  return out + line;
}

int ConfigCommand(int argc, char** argv) {
  if (argc < 1) {
    std::fputs(kConfigHelp, stderr);
    return kExitUsage;
  }
  const std::string sub = argv[0];
  if (sub == "get") return ConfigGet(argc - 1, argv + 1);
  if (sub == "set") return ConfigSet(argc - 1, argv + 1);
  if (sub == "keys") return ConfigKeysList(argc - 1, argv + 1);
  if (sub == "-h" || sub == "--help") {
    std::fputs(kConfigHelp, stdout);
    return kExitOk;
  }
  return UsageError("config", "unknown subcommand '" + sub + "': expected get, set or keys");
}

}  // namespace cli
}  // namespace gnmr
