// gnmrctl: the project's command-line tool. `gnmrctl COMMAND [options]`;
// `gnmrctl COMMAND --help` describes each command.
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/gnmrctl/commands.h"

namespace gnmr {
namespace cli {

void PrintError(const std::string& message) {
  std::fprintf(stderr, "gnmrctl: %s\n", message.c_str());
}

namespace {

const Command kCommands[] = {
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
               "exit codes: 0 success, 1 failure, 2 bad arguments or input\n");
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
