#include "common/flag_parser.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <utility>

namespace gnmr {
namespace {

constexpr size_t kHelpColumn = 26;

}  // namespace

bool ParseFlagInt(const std::string& s, int64_t lo, int64_t hi, int64_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool ParseFlagDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

FlagParser::FlagParser(std::string usage, std::string description)
    : usage_(std::move(usage)), description_(std::move(description)) {}

void FlagParser::AddValue(const char* name, const char* metavar, const char* help, ValueFn fn) {
  flags_.push_back({name, metavar, help, Kind::kValue, std::move(fn), nullptr});
}

void FlagParser::AddString(const char* name, const char* metavar, const char* help,
                           std::string* out) {
  AddValue(name, metavar, help, [out](const std::string& v) {
    *out = v;
    return Status::Ok();
  });
}

void FlagParser::AddRepeated(const char* name, const char* metavar, const char* help,
                             std::vector<std::string>* out) {
  AddValue(name, metavar, help, [out](const std::string& v) {
    out->push_back(v);
    return Status::Ok();
  });
}

void FlagParser::AddBool(const char* name, const char* help, bool* out) {
  flags_.push_back({name, "", help, Kind::kBool, nullptr, out});
}

void FlagParser::AddInt(const char* name, const char* metavar, const char* help, int64_t lo,
                        int64_t hi, int64_t* out) {
  AddValue(name, metavar, help, [lo, hi, out](const std::string& v) {
    if (ParseFlagInt(v, lo, hi, out)) return Status::Ok();
    return InvalidArgument("'" + v + "': expected an integer in " + std::to_string(lo) + ".." +
                           std::to_string(hi));
  });
}

void FlagParser::AddDouble(const char* name, const char* metavar, const char* help, double* out) {
  AddValue(name, metavar, help, [out](const std::string& v) {
    if (ParseFlagDouble(v, out)) return Status::Ok();
    return InvalidArgument("'" + v + "': expected a finite number");
  });
}

const FlagParser::Flag* FlagParser::Find(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

Status FlagParser::Parse(const std::vector<std::string>& args,
                         std::vector<std::string>* positional) {
  std::vector<const char*> argv;
  argv.reserve(args.size());
  for (const std::string& a : args) argv.push_back(a.c_str());
  return Parse(static_cast<int>(argv.size()), argv.data(), positional);
}

Status FlagParser::Parse(int argc, const char* const* argv, std::vector<std::string>* positional) {
  bool flags_done = false;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      if (positional == nullptr) return InvalidArgument("unexpected argument '" + arg + "'");
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
    if (arg.compare(0, 2, "--") != 0) return InvalidArgument("unknown option '" + arg + "'");
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const Flag* f = Find(name);
    if (f == nullptr) return InvalidArgument("unknown option '--" + name + "'");
    if (f->kind == Kind::kBool) {
      if (eq != std::string::npos) {
        return InvalidArgument("option '--" + name + "' takes no value");
      }
      *f->bool_out = true;
      continue;
    }
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return InvalidArgument("option '--" + name + "' needs a value (" + f->metavar + ")");
    }
    Status s = f->on_value(value);
    if (!s.ok()) return Status(s.code(), "--" + name + ": " + s.message());
  }
  return Status::Ok();
}

std::string FlagParser::Help() const {
  std::string out = "usage: " + usage_ + "\n\n" + description_ + "\n\noptions:\n";
  for (const Flag& f : flags_) {
    std::string lead = "  --" + f.name;
    if (!f.metavar.empty()) lead += " " + f.metavar;
    if (lead.size() < kHelpColumn) {
      lead.resize(kHelpColumn, ' ');
    } else {
      lead += "\n" + std::string(kHelpColumn, ' ');
    }
    // Continuation lines of the help text are indented under it.
    std::string help;
    for (char c : f.help) {
      help += c;
      if (c == '\n') help += std::string(kHelpColumn, ' ');
    }
    out += lead + help + "\n";
  }
  out += "  -h, --help              show this help\n";
  if (!epilog_.empty()) out += "\n" + epilog_;
  return out;
}

}  // namespace gnmr
