// gnmrctl subcommands. main.cc dispatches on the first argument through
// kCommands; each group lives in its own file (replay_cmd.cc; the daemon's
// admin commands — status, jobs, units, events, release, config get/set,
// export/import — will follow the same shape).
#pragma once

#include <string>

namespace gnmr {
namespace cli {

// Exit codes shared by every subcommand.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // the operation failed (I/O, daemon, ...)
constexpr int kExitUsage = 2;    // bad arguments or bad input files

// Prints "gnmrctl: <message>" on stderr.
void PrintError(const std::string& message);

// A subcommand: gets the arguments after its name, returns an exit code.
using CommandFn = int (*)(int argc, char** argv);

struct Command {
  const char* name;
  const char* summary;  // one line, for `gnmrctl --help`
  CommandFn run;
};

int ReplayCommand(int argc, char** argv);

}  // namespace cli
}  // namespace gnmr
