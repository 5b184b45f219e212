// gnmrctl: the project's command-line tool. `gnmrctl [connection options]
// COMMAND [options]`; `gnmrctl COMMAND --help` describes each command.
// Connection options may come before the command (as git and kubectl
// accept): they are handed to the command after its own arguments.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/defaults.h"
#include "gnmr/version.h"
#include "programs/gnmrctl/commands.h"

namespace gnmr {
namespace cli {

void PrintError(const std::string& message) {
  std::fprintf(stderr, "gnmrctl: %s\n", message.c_str());
}

namespace {

const Command kCommands[] = {
    {"status", "the daemon: version, uptime, jobs, sessions, addresses", &StatusCommand},
    {"jobs", "jobs and their ranks: steps, recovery budget, admissions", &JobsCommand},
    {"units", "a job's units: GNMR, Delta-GNMR, norm, mu, state", &UnitsCommand},
    {"events", "a job's admissions, releases, denials, config changes", &EventsCommand},
    {"top", "a live view of one job: budget, recovery, top units, ranks", &TopCommand},
    {"release", "end a unit's recovery now (admin)", &ReleaseCommand},
    {"config", "get or set a job's controller config (set: admin), list its keys", &ConfigCommand},
    {"export", "write a job's controller state to a file", &ExportCommand},
    {"import", "load a job's controller state from a file (admin)", &ImportCommand},
    {"job", "job lifecycle: `job delete` forgets a job and its files (admin)", &JobCommand},
    {"rewind", "start a job's steps over in a new generation (admin)", &RewindCommand},
    {"replay", "replay a recorded trace through the controller offline", &ReplayCommand},
};

// The daemon commands' connection options (admin_client.cc), accepted
// before the command too; `json` takes no value.
const char* const kGlobalOptions[] = {"target",  "admin-token",     "admin-token-file",
                                      "timeout", "tls-ca",          "tls-cert",
                                      "tls-key", "tls-server-name", "json"};

bool IsGlobalOption(const std::string& name) {
  for (const char* o : kGlobalOptions) {
    if (name == o) return true;
  }
  return false;
}

// `gnmrctl completion bash`: commands, then each command's options as its
// --help lists them.
int Completion(int argc, char** argv) {
  if (argc != 1 || std::strcmp(argv[0], "bash") != 0) {
    std::fprintf(argc == 1 && std::strcmp(argv[0], "--help") == 0 ? stdout : stderr,
                 "usage: gnmrctl completion bash\n\n"
                 "Prints a bash completion script:\n"
                 "  source <(gnmrctl completion bash)\n"
                 "or save it as /etc/bash_completion.d/gnmrctl.\n");
    return argc == 1 && std::strcmp(argv[0], "--help") == 0 ? kExitOk : kExitUsage;
  }
  std::string commands;
  for (const Command& c : kCommands) commands += std::string(c.name) + " ";
  std::string globals;
  for (const char* o : kGlobalOptions) globals += std::string("--") + o + " ";
  std::printf(
      "# bash completion for gnmrctl (gnmrctl completion bash)\n"
      "_gnmrctl() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]} cmd= i\n"
      "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      "    case ${COMP_WORDS[i]} in -*) ;; *) cmd=${COMP_WORDS[i]}; break ;; esac\n"
      "  done\n"
      "  if [ -z \"$cmd\" ]; then\n"
      "    COMPREPLY=($(compgen -W \"%s completion help --help --version %s\" -- \"$cur\"))\n"
      "    return\n"
      "  fi\n"
      "  local opts\n"
      "  opts=$(gnmrctl \"$cmd\" --help 2>/dev/null | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u)\n"
      "  COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
      "}\n"
      "complete -o default -F _gnmrctl gnmrctl\n",
      commands.c_str(), globals.c_str());
  return kExitOk;
}

void PrintHelp(std::FILE* f) {
  std::fprintf(f,
               "usage: gnmrctl [connection options] COMMAND [options]\n\n"
               "GNMR runtime-stability controller: command-line tool.\n\n"
               "commands:\n");
  for (const Command& c : kCommands) {
    std::fprintf(f, "  %-12s %s\n", c.name, c.summary);
  }
  std::fprintf(f, "  %-12s %s\n", "completion", "print a bash completion script");
  std::fprintf(f,
               "\noptions:\n"
               "  -h, --help   show this help (`gnmrctl COMMAND --help` for "
               "a command)\n"
               "  --version    print the version\n\n"
               "The daemon commands connect to --target T (default: $GNMR_TARGET,\n"
               "else %s); mutations need the admin token\n"
               "(--admin-token or $GNMR_ADMIN_TOKEN). Connection options (--target,\n"
               "--admin-token[-file], --timeout, --tls-*, --json) may also come before\n"
               "the command: gnmrctl --target T status.\n\n"
               "exit codes: 0 success, 1 failure (e.g. daemon unreachable), 2 bad\n"
               "arguments or input\n",
               kDefaultTarget);
}

}  // namespace

int Main(int argc, char** argv) {
  // Connection options before the command move behind its arguments.
  std::vector<char*> globals;
  int first = 1;
  while (first < argc && std::strncmp(argv[first], "--", 2) == 0 && argv[first][2] != '\0') {
    std::string opt = argv[first] + 2;
    const size_t eq = opt.find('=');
    const std::string name = opt.substr(0, eq);
    if (!IsGlobalOption(name)) break;  // --help, --version, or a mistake: below
    globals.push_back(argv[first++]);
    if (eq == std::string::npos && name != "json") {
      if (first >= argc) {
        PrintError("option '--" + name + "' needs a value (see gnmrctl --help)");
        return kExitUsage;
      }
      globals.push_back(argv[first++]);
    }
  }
  if (argc - first < 1) {
    if (!globals.empty()) {
      PrintError("options given but no command (see gnmrctl --help)");
      return kExitUsage;
    }
    PrintHelp(stderr);
    return kExitUsage;
  }
  const std::string name = argv[first];
  std::vector<char*> rest(argv + first + 1, argv + argc);
  rest.insert(rest.end(), globals.begin(), globals.end());
  const int rest_argc = static_cast<int>(rest.size());
  char** rest_argv = rest.data();
  if (name == "-h" || name == "--help" || name == "help") {
    if (name == "help" && rest_argc > 0) {
      for (const Command& c : kCommands) {
        if (rest_argv[0] == std::string(c.name)) {
          char help[] = "--help";
          char* args[] = {help};
          return c.run(1, args);
        }
      }
    }
    PrintHelp(stdout);
    return kExitOk;
  }
  if (name == "--version") {
    std::printf("gnmrctl %s\n", GNMR_VERSION_STRING);
    return kExitOk;
  }
  if (name == "completion") return Completion(rest_argc, rest_argv);
  for (const Command& c : kCommands) {
    if (name == c.name) return c.run(rest_argc, rest_argv);
  }
  if (name.compare(0, 1, "-") == 0) {
    PrintError("unknown option '" + name + "' before the command (see gnmrctl --help)");
    return kExitUsage;
  }
  PrintError("unknown command '" + name + "' (see gnmrctl --help)");
  return kExitUsage;
}

}  // namespace cli
}  // namespace gnmr

int main(int argc, char** argv) { return gnmr::cli::Main(argc, argv); }
