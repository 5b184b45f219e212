#include "daemon/daemon_config/daemon_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/text.h"
#include "controller/config_yaml.h"
#include "daemon/daemon_config/command_line.h"
#include "daemon/daemon_config/config_file.h"
#include "daemon/daemon_config/config_keys.h"
#include "daemon/daemon_config/config_values.h"
#include "gnmr/version.h"

namespace gnmr {
namespace {

using daemon_config::CheckToken;
using daemon_config::IsLoopbackAddress;

bool IsAbsolute(const std::optional<std::string>& path) {
  return path && !path->empty() && (*path)[0] == '/';
}

// "<where>: <key>: <problem>", or "--flag: <problem>" for a flag.
Status AtKey(const DaemonConfig& c, const std::string& key, const std::string& problem) {
  auto it = c.origin.find(key);
  if (it == c.origin.end()) return InvalidArgument(key + ": " + problem);
  if (it->second.compare(0, 2, "--") == 0) {
    return InvalidArgument(it->second + ": " + problem);
  }
  return InvalidArgument(it->second + ": " + key + ": " + problem);
}

Status CheckReadableFile(const DaemonConfig& c, const std::string& key, const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || ::access(path.c_str(), R_OK) != 0) {
    return AtKey(c, key, path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return AtKey(c, key, path + ": not a file");
  return Status::Ok();
}

void WarnIfShared(const std::string& path, const std::string& what,
                  std::vector<std::string>* warnings) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 0077) != 0) {
    warnings->push_back(what + " " + path + " is readable by other users (chmod 600 it)");
  }
}

// Reads `file_key`'s file into *token (admin_token_file, read_token_file).
Status ReadTokenFile(DaemonConfig* c, const std::string& token_key, const std::string& file_key,
                     const std::string& path, std::string* token,
                     std::vector<std::string>* warnings) {
  if (path.empty()) return Status::Ok();
  if (!token->empty()) {
    return AtKey(*c, file_key,
                 token_key + " is also set (at " + c->origin[token_key] + "); keep one of them");
  }
  GNMR_RETURN_IF_ERROR(CheckReadableFile(*c, file_key, path));
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  std::string value = text.str();
  while (!value.empty() && (value.back() == '\n' || value.back() == '\r' || value.back() == ' ' ||
                            value.back() == '\t')) {
    value.pop_back();
  }
  Status s = CheckToken(value);
  if (!s.ok()) return AtKey(*c, file_key, path + ": " + s.message());
  WarnIfShared(path, file_key, warnings);
  *token = std::move(value);
  return Status::Ok();
}

Status ReadJobTokens(DaemonConfig* c, std::vector<std::string>* warnings) {
  const std::string& path = c->job_tokens_file;
  if (path.empty()) return Status::Ok();
  if (!c->job_tokens.empty()) {
    return AtKey(*c, "job_tokens_file",
                 "job_tokens is also set (at " + c->origin["job_tokens"] + "); keep one of them");
  }
  GNMR_RETURN_IF_ERROR(CheckReadableFile(*c, "job_tokens_file", path));
  StatusOr<std::map<std::string, std::string>> tokens = daemon_config::ReadJobTokensFile(path);
  if (!tokens.ok()) return AtKey(*c, "job_tokens_file", tokens.status().message());
  WarnIfShared(path, "job_tokens_file", warnings);
  c->job_tokens = std::move(tokens).value();
  return Status::Ok();
}

// A TCP listener needs authentication (deploy/README.md, "Security model";
// peer_access.h in daemon/server has the rules it then applies per call).
Status CheckTcpSecurity(const DaemonConfig& c, std::vector<std::string>* warnings) {
  std::string tcp;
  for (const std::string& l : c.listen) {
    if (l.compare(0, 5, "unix:") != 0) tcp += (tcp.empty() ? "" : ", ") + l;
  }
  if (tcp.empty()) {
    if (c.insecure_tcp) warnings->push_back("insecure_tcp is set but no listener is TCP");
    return Status::Ok();
  }
  const bool mtls = !c.tls.client_ca_file.empty();
  if (!mtls && c.job_tokens.empty() && !c.insecure_tcp) {
    return AtKey(c, "listen",
                 tcp +
                     " is TCP without authentication: set job_tokens (or job_tokens_file) so "
                     "that every job needs its token, or mutual TLS (tls.client_ca); or, on a "
                     "trusted network only, insecure_tcp: true (deploy/README.md, security "
                     "model)");
  }
  if (c.insecure_tcp) {
    warnings->push_back("insecure_tcp: anyone who reaches " + tcp +
                        " may register jobs and read every job without a token");
  } else if (!mtls) {
    if (!c.tls.enabled()) {
      warnings->push_back("TCP listener " + tcp +
                          " without TLS: job tokens cross the network in plaintext");
    }
    if (c.admin_token.empty() && c.read_token.empty()) {
      warnings->push_back(
          "no read_token or admin_token: Admin reads over TCP (gnmrctl) are "
          "refused; use the Unix socket");
    }
  }
  return Status::Ok();
}

Status CheckTls(const DaemonConfig& c, std::vector<std::string>* warnings) {
  const DaemonTls& t = c.tls;
  if (t.cert_file.empty() && t.key_file.empty() && t.client_ca_file.empty()) {
    return Status::Ok();
  }
  if (t.cert_file.empty()) {
    return AtKey(c, t.key_file.empty() ? "tls.client_ca" : "tls.key", "needs tls.cert as well");
  }
  if (t.key_file.empty()) return AtKey(c, "tls.cert", "needs tls.key as well");
  for (const auto& [key, path] :
       {std::pair<const char*, const std::string*>{"tls.cert", &t.cert_file},
        {"tls.key", &t.key_file},
        {"tls.client_ca", &t.client_ca_file}}) {
    if (path->empty()) continue;
    GNMR_RETURN_IF_ERROR(CheckReadableFile(c, key, *path));
  }
  bool tcp = false;
  for (const std::string& l : c.listen) tcp = tcp || l.compare(0, 5, "unix:") != 0;
  if (!tcp) {
    warnings->push_back(
        "tls is configured but every listen address is a "
        "Unix socket: TLS applies to TCP listeners only");
  }
  return Status::Ok();
}

// Cross-key checks and the values that need the file system.
Status Finish(DaemonConfig* c, const Environment& env, std::vector<std::string>* warnings) {
  if (c->listen.empty()) {
    c->listen.push_back(DefaultListen(env));
    c->origin["listen"] = "default";
  }
  if (c->state_dir.empty()) {
    c->state_dir = DefaultStateDir(env);
    c->origin["state_dir"] = "default";
  }
  Status s = ReadTokenFile(c, "admin_token", "admin_token_file", c->admin_token_file,
                           &c->admin_token, warnings);
  if (s.ok()) {
    s = ReadTokenFile(c, "read_token", "read_token_file", c->read_token_file, &c->read_token,
                      warnings);
  }
  if (s.ok()) s = ReadJobTokens(c, warnings);
  if (s.ok()) s = CheckTls(*c, warnings);
  if (s.ok()) s = CheckTcpSecurity(*c, warnings);
  if (!s.ok()) return s;
  // Every job created with the default controller config would be refused.
  if (static_cast<uint64_t>(c->controller.max_o) > c->max_o_limit) {
    return AtKey(*c, c->origin.count("max_o_limit") ? "max_o_limit" : "controller",
                 "controller.max_o (" + std::to_string(c->controller.max_o) +
                     ") exceeds max_o_limit (" + std::to_string(c->max_o_limit) + ")");
  }
  if (!c->metrics_listen.empty() && !IsLoopbackAddress(c->metrics_listen)) {
    warnings->push_back("metrics endpoint " + c->metrics_listen +
                        " is reachable from other machines");
  }
  if (!c->allow_unregistered_jobs && c->job_tokens.empty()) {
    warnings->push_back(
        "allow_unregistered_jobs is false and job_tokens is "
        "empty: no job can register");
  }
  return Status::Ok();
}

StatusOr<LoadedConfig> LoadUnescaped(int argc, const char* const* argv, const Environment& env);

}  // namespace

Environment SystemEnvironment() {
  Environment env;
  env.getenv = [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
  env.writable_dir = [](const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
           ::access(path.c_str(), W_OK | X_OK) == 0;
  };
  env.uid = static_cast<uint32_t>(::getuid());
  return env;
}

std::string DefaultListen(const Environment& env) {
  if (env.writable_dir("/run/gnmr")) return "unix:/run/gnmr/gnmrd.sock";
  const std::optional<std::string> runtime = env.getenv("XDG_RUNTIME_DIR");
  if (IsAbsolute(runtime) && runtime->size() <= 90 && env.writable_dir(*runtime)) {
    return "unix:" + *runtime + "/gnmrd.sock";
  }
  return "unix:/tmp/gnmrd-" + std::to_string(env.uid) + ".sock";
}

std::string DefaultStateDir(const Environment& env) {
  if (env.writable_dir("/var/lib/gnmr") || env.writable_dir("/var/lib")) {
    return "/var/lib/gnmr";
  }
  const std::optional<std::string> state = env.getenv("XDG_STATE_HOME");
  if (IsAbsolute(state)) return *state + "/gnmr";
  const std::optional<std::string> home = env.getenv("HOME");
  if (IsAbsolute(home)) return *home + "/.local/state/gnmr";
  return "/tmp/gnmr-" + std::to_string(env.uid) + "/state";
}

StatusOr<LoadedConfig> LoadDaemonConfig(int argc, const char* const* argv, const Environment& env) {
  // Messages echo keys and values from the file and the command line:
  // escaped, so binary bytes never reach the terminal or the journal raw.
  StatusOr<LoadedConfig> loaded = LoadUnescaped(argc, argv, env);
  if (loaded.ok()) return loaded;
  return Status(loaded.status().code(), EscapeForLog(loaded.status().message(), 2048));
}

namespace {

StatusOr<LoadedConfig> LoadUnescaped(int argc, const char* const* argv, const Environment& env) {
  StatusOr<daemon_config::CommandLine> flags = daemon_config::ParseCommandLine(argc, argv);
  if (!flags.ok()) return flags.status();
  LoadedConfig out;
  out.show_help = flags->help;
  out.show_version = flags->version;
  if (out.show_help || out.show_version) return out;
  if (!flags->config_file.empty()) {
    GNMR_RETURN_IF_ERROR(daemon_config::ApplyConfigFile(flags->config_file, &out.config));
  }
  Status s = daemon_config::ApplyCommandLine(*flags, &out.config);
  if (s.ok()) s = Finish(&out.config, env, &out.warnings);
  if (!s.ok()) return s;
  return out;
}

}  // namespace

std::string DaemonHelpText(const std::string& program) {
  return daemon_config::CommandLineHelp(program);
}

std::string DaemonVersionText() { return std::string("gnmrd ") + GNMR_VERSION_STRING; }

std::string DescribeConfig(const DaemonConfig& c) {
  std::string out;
  auto line = [&](const std::string& key, const std::string& value) {
    auto it = c.origin.find(key);
    out += key + ": " + value + " (" + (it == c.origin.end() ? "default" : it->second) + ")\n";
  };
  std::string listen;
  for (const std::string& l : c.listen) listen += (listen.empty() ? "" : ", ") + l;
  std::string jobs;
  for (const auto& [job, token] : c.job_tokens) {
    jobs += (jobs.empty() ? "" : ", ") + job;
  }
  line("listen", listen);
  for (const daemon_config::ScalarKey& k : daemon_config::ScalarKeys()) {
    if (std::string(k.key) == "job_tokens_file") {
      line("job_tokens", jobs.empty() ? "none" : jobs + " (tokens not shown)");
    }
    line(k.key, daemon_config::DescribeValue(k, c));
  }
  std::string controller = ControllerConfigToYaml(c.controller);
  for (size_t i = 0;
       (i = controller.find('\n', i)) != std::string::npos && i + 1 < controller.size(); i += 3) {
    controller.replace(i, 1, "\n  ");
  }
  out += "controller:\n  " + controller;
  return out;
}

}  // namespace gnmr
