#include "daemon/store/job_dir.h"

#include <cstdint>

namespace gnmr {
namespace store {
namespace {

constexpr char kHex[] = "0123456789ABCDEF";

bool IsPlain(unsigned char c, bool first) {
  if (c == '.') return !first;
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == ':';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;  // lowercase is never produced, so never accepted
}

uint64_t Fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

std::string EscapeJobId(std::string_view job_id) {
  if (job_id.empty()) return "%";
  std::string out;
  out.reserve(job_id.size());
  for (size_t i = 0; i < job_id.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(job_id[i]);
    if (IsPlain(c, i == 0)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  if (out.size() <= kMaxJobDirName) return out;
  // Cut to leave room for "~" + 16 hex digits, never inside a %XX escape.
  size_t cut = kMaxJobDirName - 17;
  if (cut >= 1 && out[cut - 1] == '%') cut -= 1;
  if (cut >= 2 && out[cut - 2] == '%') cut -= 2;
  out.resize(cut);
  out.push_back('~');
  const uint64_t h = Fnv1a64(job_id);
  for (int shift = 60; shift >= 0; shift -= 4) {
    out.push_back(kHex[(h >> shift) & 15]);
  }
  return out;
}

std::optional<std::string> UnescapeJobDir(std::string_view name) {
  if (name == "%") return std::string();
  if (name.empty() || name.size() > kMaxJobDirName) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c == '%') {
      if (i + 2 >= name.size()) return std::nullopt;
      const int hi = HexValue(name[i + 1]);
      const int lo = HexValue(name[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (IsPlain(c, i == 0)) {
      out.push_back(static_cast<char>(c));
    } else {
      return std::nullopt;
    }
  }
  // Only the canonical spelling is accepted ("%41" is not a name for "A").
  if (EscapeJobId(out) != name) return std::nullopt;
  return out;
}

std::string JobsDir(const std::string& state_dir) { return state_dir + "/jobs"; }

std::string JobDir(const std::string& state_dir, std::string_view job_id) {
  return JobsDir(state_dir) + "/" + EscapeJobId(job_id);
}

}  // namespace store
}  // namespace gnmr
