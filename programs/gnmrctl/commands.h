// gnmrctl subcommands. main.cc dispatches on the first argument through
// kCommands; each group lives in its own file: replay_cmd.cc (offline
// replay), and the daemon's admin commands, which share admin_client.h
// (connection flags, errors) and table.h (output): overview_cmd.cc (status,
// jobs), units_cmd.cc (units, release), events_cmd.cc, config_cmd.cc
// (config get/set/keys), state_cmd.cc (export, import), top_cmd.cc (live view; its terminal in
// terminal.cc), job_cmd.cc (job delete).
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
int StatusCommand(int argc, char** argv);
int JobsCommand(int argc, char** argv);
int UnitsCommand(int argc, char** argv);
int ReleaseCommand(int argc, char** argv);
int EventsCommand(int argc, char** argv);
int TopCommand(int argc, char** argv);
int ConfigCommand(int argc, char** argv);
int ExportCommand(int argc, char** argv);
int ImportCommand(int argc, char** argv);
int JobCommand(int argc, char** argv);
int RewindCommand(int argc, char** argv);

// The help paragraph that lists the config keys (config_cmd.cc): "<lead>:
// warmup, ..., actions (a list of {...}; <actions_note>). ...", wrapped at
// 72 columns.
std::string ConfigKeysHelp(const std::string& lead, const std::string& actions_note);

}  // namespace cli
}  // namespace gnmr
