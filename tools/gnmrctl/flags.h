// FlagParser: the small command-line parser every gnmrctl subcommand uses.
//
// Accepts `--name value`, `--name=value`, boolean `--name`, repeated flags,
// `-h`/`--help` and `--` (end of flags). Each subcommand declares its flags
// once, and the same declarations produce its `--help` text, so usage and
// behaviour cannot drift apart.
#pragma once

#include <string>
#include <vector>

#include "gnmr/status.h"

namespace gnmr {
namespace cli {

class FlagParser {
 public:
  // `usage` is the synopsis line, e.g. "gnmrctl replay --trace TRACE.csv".
  FlagParser(std::string usage, std::string description);

  void AddString(const char* name, const char* metavar, const char* help,
                 std::string* out);
  void AddRepeated(const char* name, const char* metavar, const char* help,
                   std::vector<std::string>* out);
  void AddBool(const char* name, const char* help, bool* out);

  // Parses the arguments after the subcommand name. InvalidArgument names
  // the offending argument. Positional arguments are rejected unless
  // `positional` is given.
  Status Parse(int argc, char** argv,
               std::vector<std::string>* positional = nullptr);
  bool help_requested() const { return help_; }
  std::string Help() const;

 private:
  enum class Kind { kString, kRepeated, kBool };
  struct Flag {
    std::string name;
    std::string metavar;
    std::string help;
    Kind kind;
    void* out;
  };
  const Flag* Find(const std::string& name) const;

  std::string usage_;
  std::string description_;
  std::vector<Flag> flags_;
  bool help_ = false;
};

}  // namespace cli
}  // namespace gnmr
