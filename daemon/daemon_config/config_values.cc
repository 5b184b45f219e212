#include "daemon/daemon_config/config_values.h"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <utility>

namespace gnmr {
namespace daemon_config {
namespace {

std::string Quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

bool IsDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool IsIpv4(std::string_view host) {
  int parts = 0;
  size_t start = 0;
  for (;;) {
    const size_t dot = host.find('.', start);
    const std::string_view part = host.substr(start, dot - start);
    uint64_t v = 0;
    if (part.size() > 3 || !IsDigits(part) || !ParseUint(part, 0, 255, &v).ok()) {
      return false;
    }
    ++parts;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts == 4;
}

bool IsBracketedIpv6(std::string_view host) {
  if (host.size() < 4 || host.front() != '[' || host.back() != ']') {
    return false;
  }
  for (char c : host.substr(1, host.size() - 2)) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') {
      return false;
    }
  }
  return true;
}

bool IsHostName(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  for (char c : host) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

// Splits "host:port"; false if there is no port or it is out of range.
bool SplitHostPort(std::string_view text, std::string_view* host) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return false;
  uint64_t port = 0;
  if (!ParseUint(text.substr(colon + 1), 0, 65535, &port).ok()) return false;
  *host = text.substr(0, colon);
  return true;
}

}  // namespace

Status ParseUint(std::string_view text, uint64_t lo, uint64_t hi, uint64_t* out) {
  uint64_t v = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (!IsDigits(text) || r.ec != std::errc() || v < lo || v > hi) {
    return InvalidArgument("must be an integer in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "], got " + Quoted(text));
  }
  *out = v;
  return Status::Ok();
}

Status ParseByteSize(std::string_view text, uint64_t lo, uint64_t hi, uint64_t* out) {
  static const struct {
    const char* suffix;
    int shift;
  } kUnits[] = {{"KiB", 10}, {"MiB", 20}, {"GiB", 30}};
  std::string_view number = text;
  int shift = 0;
  for (const auto& u : kUnits) {
    const std::string_view suffix = u.suffix;
    if (number.size() > suffix.size() && number.substr(number.size() - suffix.size()) == suffix) {
      number.remove_suffix(suffix.size());
      shift = u.shift;
      break;
    }
  }
  uint64_t v = 0;
  const bool ok = ParseUint(number, 0, hi >> shift, &v).ok();
  if (!ok || (v << shift) < lo) {
    return InvalidArgument("must be a size in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                           "] bytes (suffix KiB, MiB or GiB allowed), got " + Quoted(text));
  }
  *out = v << shift;
  return Status::Ok();
}

Status ParseDurationMs(std::string_view text, uint64_t hi_ms, uint64_t* out_ms) {
  static const struct {
    const char* suffix;
    uint64_t ms;
  } kUnits[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
  if (text == "0" || Lower(text) == "off") {
    *out_ms = 0;
    return Status::Ok();
  }
  for (const auto& u : kUnits) {  // "ms" before "s" and "m"
    const std::string_view suffix = u.suffix;
    if (text.size() <= suffix.size() || text.substr(text.size() - suffix.size()) != suffix) {
      continue;
    }
    const std::string_view number = text.substr(0, text.size() - suffix.size());
    uint64_t v = 0;
    if (IsDigits(number) && ParseUint(number, 0, hi_ms / u.ms, &v).ok()) {
      *out_ms = v * u.ms;
      return Status::Ok();
    }
    break;
  }
  return InvalidArgument("must be a duration like 7d, 12h, 30m, 45s or 500ms (at most " +
                         std::to_string(hi_ms / 86400000) + "d), or 0/off, got " + Quoted(text));
}

std::string FormatByteSize(uint64_t bytes) {
  for (const auto& [suffix, shift] :
       {std::pair<const char*, int>{"GiB", 30}, {"MiB", 20}, {"KiB", 10}}) {
    const uint64_t unit = uint64_t{1} << shift;
    if (bytes != 0 && bytes % unit == 0) return std::to_string(bytes / unit) + suffix;
  }
  return std::to_string(bytes);
}

std::string FormatDurationMs(uint64_t ms) {
  if (ms == 0) return "off";
  for (const auto& [suffix, unit] : {std::pair<const char*, uint64_t>{"d", 86400000},
                                     {"h", 3600000},
                                     {"m", 60000},
                                     {"s", 1000}}) {
    if (ms % unit == 0) return std::to_string(ms / unit) + suffix;
  }
  return std::to_string(ms) + "ms";
}

std::string FormatFileMode(uint32_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "0%03o", mode);
  return text;
}

Status ParseBool(std::string_view text, bool* out) {
  const std::string s = Lower(text);
  if (s == "true" || s == "yes" || s == "on") {
    *out = true;
  } else if (s == "false" || s == "no" || s == "off") {
    *out = false;
  } else {
    return InvalidArgument("must be true or false, got " + Quoted(text));
  }
  return Status::Ok();
}

Status ParseFileMode(std::string_view text, uint32_t* out) {
  std::string_view digits = text;
  if (digits.size() > 2 && (digits.substr(0, 2) == "0o" || digits.substr(0, 2) == "0O")) {
    digits.remove_prefix(2);
  }
  uint32_t v = 0;
  auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v, 8);
  if (!IsDigits(digits) || r.ec != std::errc() || r.ptr != digits.data() + digits.size() ||
      v > 0777) {
    return InvalidArgument("must be octal permission bits like 0660, got " + Quoted(text));
  }
  *out = v;
  return Status::Ok();
}

Status ParseListenAddress(std::string_view text, std::string* normalized) {
  const std::string_view unix_prefix = "unix:";
  if (text.substr(0, unix_prefix.size()) == unix_prefix) {
    std::string_view path = text.substr(unix_prefix.size());
    if (path.substr(0, 3) == "///") path.remove_prefix(2);
    // sun_path holds 108 bytes with the terminating NUL.
    if (path.empty() || path[0] != '/' || path.size() > 107 ||
        path.find('\0') != std::string_view::npos) {
      return InvalidArgument(
          "a Unix socket must be 'unix:/absolute/path' of at most 107 bytes, "
          "got " +
          Quoted(text));
    }
    *normalized = "unix:" + std::string(path);
    return Status::Ok();
  }
  std::string_view host;
  if (!SplitHostPort(text, &host) || !(IsHostName(host) || IsIpv4(host) || IsBracketedIpv6(host))) {
    return InvalidArgument(
        "must be 'unix:/path' or 'host:port' (port 0..65535, IPv6 in "
        "brackets), got " +
        Quoted(text));
  }
  *normalized = std::string(text);
  return Status::Ok();
}

Status ParseMetricsAddress(std::string_view text, std::string* normalized) {
  if (text.empty() || Lower(text) == "off") {
    normalized->clear();
    return Status::Ok();
  }
  std::string_view host;
  if (!SplitHostPort(text, &host) ||
      !(host == "localhost" || IsIpv4(host) || IsBracketedIpv6(host))) {
    return InvalidArgument(
        "must be 'ip:port' (IPv4, [IPv6] or localhost; port 0..65535) or "
        "'off', got " +
        Quoted(text));
  }
  *normalized = std::string(text);
  return Status::Ok();
}

bool IsLoopbackAddress(std::string_view host_port) {
  std::string_view host;
  if (!SplitHostPort(host_port, &host)) return false;
  return host == "localhost" || host == "[::1]" || (IsIpv4(host) && host.substr(0, 4) == "127.");
}

Status CheckLogLevel(std::string_view level) {
  for (const char* known : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    if (level == known) return Status::Ok();
  }
  return InvalidArgument("must be one of trace, debug, info, warn, error, critical, off, got " +
                         Quoted(level));
}

Status CheckJobId(std::string_view job_id) {
  bool ok = !job_id.empty() && job_id.size() <= 128;
  for (char c : job_id) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' ||
                c == '-');
  }
  if (!ok) {
    return InvalidArgument(
        "job id must be 1..128 bytes of [A-Za-z0-9._:-], "
        "got " +
        Quoted(job_id));
  }
  return Status::Ok();
}

Status CheckToken(std::string_view token) {
  bool ok = !token.empty() && token.size() <= 4096;
  for (char c : token) ok = ok && c > 0x20 && c < 0x7f;
  if (!ok) {
    return InvalidArgument("a token must be 1..4096 bytes of printable ASCII without spaces");
  }
  return Status::Ok();
}

}  // namespace daemon_config
}  // namespace gnmr
