// gnmrctl: the project's command-line tool. `gnmrctl COMMAND [options]`;
// `gnmrctl COMMAND --help` describes each command.
#include <cstdio>
#include <cstring>
#include <string>

#include "common/defaults.h"
#include "tools/gnmrctl/commands.h"

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
    {"config", "get or set a job's controller config (set: admin)", &ConfigCommand},
    {"export", "write a job's controller state to a file", &ExportCommand},
    {"import", "load a job's controller state from a file (admin)", &ImportCommand},
    {"rewind", "start a job's steps over in a new generation (admin)", &RewindCommand},
    {"replay", "replay a recorded trace through the controller offline",
     &ReplayCommand},
};

void PrintHelp(std::FILE* f) {
  std::fprintf(f,
               "usage: gnmrctl COMMAND [options]\n\n"
               "GNMR runtime-stability controller: command-line tool.\n\n"
               "commands:\n");
  for (const Command& c : kCommands) {
    std::fprintf(f, "  %-12s %s\n", c.name, c.summary);
  }
  std::fprintf(f,
               "\noptions:\n"
               "  -h, --help   show this help (`gnmrctl COMMAND --help` for "
               "a command)\n"
               "  --version    print the version\n\n"
               "The daemon commands connect to --target T (default: $GNMR_TARGET,\n"
               "else %s); mutations need the admin token\n"
               "(--admin-token or $GNMR_ADMIN_TOKEN).\n\n"
               "exit codes: 0 success, 1 failure (e.g. daemon unreachable), 2 bad\n"
               "arguments or input\n",
               kDefaultTarget);
}

}  // namespace

int Main(int argc, char** argv) {
  if (argc < 2) {
    PrintHelp(stderr);
    return kExitUsage;
  }
  const std::string name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    if (name == "help" && argc > 2) {
      for (const Command& c : kCommands) {
        if (argv[2] == std::string(c.name)) {
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
    std::printf("gnmrctl %s\n", GNMR_VERSION);
    return kExitOk;
  }
  for (const Command& c : kCommands) {
    if (name == c.name) return c.run(argc - 2, argv + 2);
  }
  PrintError("unknown command '" + name + "' (see gnmrctl --help)");
  return kExitUsage;
}

}  // namespace cli
}  // namespace gnmr

int main(int argc, char** argv) { return gnmr::cli::Main(argc, argv); }
