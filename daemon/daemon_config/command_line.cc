#include "daemon/daemon_config/command_line.h"

#include "common/flag_parser.h"
#include "daemon/daemon_config/config_values.h"

namespace gnmr {
namespace daemon_config {
namespace {

constexpr char kEpilog[] =
    "security (deploy/README.md, \"Security model\"):\n"
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

// The one declaration of gnmrd's flags: ParseCommandLine and the --help text
// both come from it. Values are only recorded here; ApplyCommandLine parses
// them on top of the config file, so "the last one wins" and errors name the
// flag.
FlagParser MakeParser(const std::string& program, CommandLine* out) {
  FlagParser p(program + " [--config FILE] [flags]",
               "gnmrd: the GNMR runtime-stability daemon. Flags override the config file,\n"
               "which overrides the defaults.");
  p.AddValue("config", "FILE", "YAML config file (see deploy/gnmrd.example.yaml)",
             [out](const std::string& v) {
               if (v.empty()) return InvalidArgument("needs a file");
               out->config_file = v;
               return Status::Ok();
             });
  p.AddRepeated("listen", "ADDR",
                HelpWithDefault("unix:/path or host:port; repeatable; replaces\n"
                                "the file's list",
                                kListenMachineDefault)
                    .c_str(),
                &out->listen);
  // The defaults come from DaemonConfig{} through the keys' formatters, so
  // no help line states a value of its own.
  for (const ScalarKey& k : ScalarKeys()) {
    if (k.flag == nullptr) continue;
    const ScalarKey* key = &k;
    const std::string help = HelpWithDefault(k.help, DefaultText(k));
    p.AddValue(k.flag, k.metavar, help.c_str(), [out, key](const std::string& v) {
      out->values.emplace_back(key, v);
      return Status::Ok();
    });
  }
  p.AddBool("version", "show the version", &out->version);
  p.SetEpilog(kEpilog);
  return p;
}

}  // namespace

StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv) {
  CommandLine out;
  FlagParser p = MakeParser("gnmrd", &out);
  Status s = p.Parse(argc > 0 ? argc - 1 : 0, argc > 0 ? argv + 1 : argv);
  if (!s.ok()) return InvalidArgument(s.message() + " (see gnmrd --help)");
  out.help = p.help_requested();
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
  CommandLine unused;
  return MakeParser(program, &unused).Help();
}

}  // namespace daemon_config
}  // namespace gnmr
