// FlagParser: the one command-line parser of gnmrd, gnmrctl, gnmr-synth and
// the benchmarks.
//
// Accepts `--name value`, `--name=value`, boolean `--name`, repeated flags,
// `-h`/`--help` and `--` (end of flags). A program declares each flag once,
// with its help line, and the same declarations produce its `--help` text,
// so usage and behaviour cannot drift apart. Values are checked when they
// are parsed: an error names the flag and what it expects.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gnmr/status.h"

namespace gnmr {

class FlagParser {
 public:
  // Called with a flag's value; an error is reported as "--name: <message>".
  using ValueFn = std::function<Status(const std::string& value)>;

  // `usage` is the synopsis after "usage: ", e.g. "gnmrctl replay --trace
  // TRACE.csv"; `description` the paragraph under it.
  FlagParser(std::string usage, std::string description);

  void AddString(const char* name, const char* metavar, const char* help, std::string* out);
  void AddRepeated(const char* name, const char* metavar, const char* help,
                   std::vector<std::string>* out);
  void AddBool(const char* name, const char* help, bool* out);
  // An integer in [lo, hi], or a finite double.
  void AddInt(const char* name, const char* metavar, const char* help, int64_t lo, int64_t hi,
              int64_t* out);
  void AddDouble(const char* name, const char* metavar, const char* help, double* out);
  // Any other value: `fn` parses and stores it (it runs once per occurrence).
  void AddValue(const char* name, const char* metavar, const char* help, ValueFn fn);
  // Text printed after the options in Help() (exit codes, notes).
  void SetEpilog(std::string epilog) { epilog_ = std::move(epilog); }

  // Parses argv[0..argc) (the arguments after the program or subcommand
  // name). InvalidArgument names the offending argument. Positional
  // arguments are rejected unless `positional` is given.
  Status Parse(int argc, const char* const* argv, std::vector<std::string>* positional = nullptr);
  Status Parse(const std::vector<std::string>& args,
               std::vector<std::string>* positional = nullptr);
  bool help_requested() const { return help_; }
  std::string Help() const;

 private:
  enum class Kind { kValue, kBool };
  struct Flag {
    std::string name;
    std::string metavar;
    std::string help;
    Kind kind;
    ValueFn on_value;  // kValue
    bool* bool_out;    // kBool
  };
  const Flag* Find(const std::string& name) const;

  std::string usage_;
  std::string description_;
  std::string epilog_;
  std::vector<Flag> flags_;
  bool help_ = false;
};

// Strict number parsing for flag values: the whole string, no overflow.
bool ParseFlagInt(const std::string& s, int64_t lo, int64_t hi, int64_t* out);
bool ParseFlagDouble(const std::string& s, double* out);  // finite only

}  // namespace gnmr
