#include "daemon/daemon_config/command_line.h"

#include "daemon/daemon_config/config_values.h"

namespace gnmr {
namespace daemon_config {
namespace {

const ScalarKey* FindFlag(const std::string& name) {
  for (const ScalarKey& k : ScalarKeys()) {
    if (k.flag != nullptr && name == k.flag) return &k;
  }
  return nullptr;
}

}  // namespace

StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv) {
  CommandLine out;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      out.help = true;
      continue;
    }
    if (arg == "--version") {
      out.version = true;
      continue;
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      return InvalidArgument("unexpected argument '" + arg +
                             "' (gnmrd takes only flags; see --help)");
    }
    const size_t eq = arg.find('=');
    const std::string name =
        arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const ScalarKey* key = FindFlag(name);
    if (name != "config" && name != "listen" && key == nullptr) {
      return InvalidArgument("unknown flag '--" + name + "' (see --help)");
    }
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return InvalidArgument("--" + name + ": needs a value");
    }
    if (name == "config") {
      if (value.empty()) return InvalidArgument("--config: needs a file");
      out.config_file = value;
    } else if (name == "listen") {
      out.listen.push_back(value);
    } else {
      out.values.emplace_back(key, value);
    }
  }
  return out;
}

Status ApplyCommandLine(const CommandLine& flags, DaemonConfig* config) {
  DaemonConfig c = *config;
  if (!flags.listen.empty()) {
    c.listen.clear();
    for (const std::string& text : flags.listen) {
      std::string normalized;
      Status s = ParseListenAddress(text, &normalized);
      if (!s.ok()) return InvalidArgument("--listen: " + s.message());
      for (const std::string& seen : c.listen) {
        if (seen == normalized) {
          return InvalidArgument("--listen: '" + text + "' is given twice");
        }
      }
      c.listen.push_back(normalized);
    }
    c.origin["listen"] = "--listen";
  }
  for (const auto& [key, value] : flags.values) {
    const std::string flag = std::string("--") + key->flag;
    Status s = key->bind(&c)(value);
    if (!s.ok()) return InvalidArgument(flag + ": " + s.message());
    c.origin[key->key] = flag;
    // A flag's token file replaces tokens written in the config file.
    const std::string name = key->key;
    if (name == "admin_token_file") c.admin_token.clear();
    if (name == "read_token_file") c.read_token.clear();
    if (name == "job_tokens_file") c.job_tokens.clear();
  }
  *config = std::move(c);
  return Status::Ok();
}

std::string CommandLineHelp(const std::string& program) {
  struct Line {
    std::string flag;
    std::string help;
  };
  std::vector<Line> lines = {
      {"--config FILE", "YAML config file (see deploy/gnmrd.example.yaml)"},
      {"--listen ADDR",
       "unix:/path or host:port; repeatable; replaces the\n"
       "file's list (default unix:/run/gnmr/gnmrd.sock)"}};
  for (const ScalarKey& k : ScalarKeys()) {
    if (k.flag == nullptr) continue;
    lines.push_back({std::string("--") + k.flag + " " + k.metavar, k.help});
  }
  lines.push_back({"-h, --help", "show this help"});
  lines.push_back({"--version", "show the version"});

  std::string out = "usage: " + program + " [--config FILE] [flags]\n\n" +
                    "gnmrd: the GNMR runtime-stability daemon. Flags override "
                    "the config file,\nwhich overrides the defaults.\n\n"
                    "flags:\n";
  constexpr size_t kColumn = 28;
  for (const Line& l : lines) {
    std::string lead = "  " + l.flag;
    lead = lead.size() < kColumn
               ? lead + std::string(kColumn - lead.size(), ' ')
               : lead + "\n" + std::string(kColumn, ' ');
    std::string help;
    for (char ch : l.help) {
      help += ch;
      if (ch == '\n') help += std::string(kColumn, ' ');
    }
    out += lead + help + "\n";
  }
  out +=
      "\nsecurity (deploy/README.md, \"Security model\"):\n"
      "  The Unix socket's file permissions are its access control. A TCP listener\n"
      "  needs job_tokens or mutual TLS (tls.client_ca), else gnmrd refuses to start\n"
      "  (insecure_tcp: true overrides, for trusted networks only). Over plain TCP a\n"
      "  job needs its configured token, Admin reads need the read or admin token,\n"
      "  mutations the admin token.\n"
      "\nsignals:\n"
      "  SIGTERM, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2 and every other terminating\n"
      "  signal stop gnmrd gracefully: stop accepting, end the streams, snapshot\n"
      "  every job, flush the event logs, exit 0. SIGHUP is ignored (no reload:\n"
      "  restart to apply config changes).\n"
      "\nstate dir:\n"
      "  One gnmrd per state dir: it is locked (flock on gnmrd.lock) for the\n"
      "  process's life, and checked writable at start. A live Unix socket of\n"
      "  another process is never taken over; a stale one is replaced.\n"
      "\nexit codes: 0 clean stop, 1 cannot start (or a snapshot failed), 2 bad\n"
      "  config or command line.\n";
  return out;
}

}  // namespace daemon_config
}  // namespace gnmr
