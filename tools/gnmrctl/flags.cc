#include "tools/gnmrctl/flags.h"

#include <cstring>

namespace gnmr {
namespace cli {

FlagParser::FlagParser(std::string usage, std::string description)
    : usage_(std::move(usage)), description_(std::move(description)) {}

void FlagParser::AddString(const char* name, const char* metavar,
                           const char* help, std::string* out) {
  flags_.push_back({name, metavar, help, Kind::kString, out});
}

void FlagParser::AddRepeated(const char* name, const char* metavar,
                             const char* help, std::vector<std::string>* out) {
  flags_.push_back({name, metavar, help, Kind::kRepeated, out});
}

void FlagParser::AddBool(const char* name, const char* help, bool* out) {
  flags_.push_back({name, "", help, Kind::kBool, out});
}

const FlagParser::Flag* FlagParser::Find(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

Status FlagParser::Parse(int argc, char** argv,
                         std::vector<std::string>* positional) {
  bool flags_done = false;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      if (positional == nullptr) {
        return InvalidArgument("unexpected argument '" + arg + "'");
      }
      positional->push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      help_ = true;
      continue;
    }
    if (arg.compare(0, 2, "--") != 0) {
      return InvalidArgument("unknown option '" + arg + "'");
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos
                                               ? std::string::npos
                                               : eq - 2);
    const Flag* f = Find(name);
    if (f == nullptr) return InvalidArgument("unknown option '--" + name + "'");
    if (f->kind == Kind::kBool) {
      if (eq != std::string::npos) {
        return InvalidArgument("option '--" + name + "' takes no value");
      }
      *static_cast<bool*>(f->out) = true;
      continue;
    }
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return InvalidArgument("option '--" + name + "' needs a value (" +
                             f->metavar + ")");
    }
    if (f->kind == Kind::kString) {
      *static_cast<std::string*>(f->out) = value;
    } else {
      static_cast<std::vector<std::string>*>(f->out)->push_back(value);
    }
  }
  return Status::Ok();
}

std::string FlagParser::Help() const {
  std::string out = "usage: " + usage_ + "\n\n" + description_ + "\n\noptions:\n";
  for (const Flag& f : flags_) {
    std::string lead = "  --" + f.name;
    if (!f.metavar.empty()) lead += " " + f.metavar;
    if (lead.size() < 26) {
      lead.resize(26, ' ');
    } else {
      lead += "\n" + std::string(26, ' ');
    }
    // Continuation lines of the help text are indented under it.
    std::string help;
    for (char c : f.help) {
      help += c;
      if (c == '\n') help += std::string(26, ' ');
    }
    out += lead + help + "\n";
  }
  out += "  -h, --help              show this help\n";
  return out;
}

}  // namespace cli
}  // namespace gnmr
