#include "common/text.h"

#include <algorithm>
#include <charconv>

namespace gnmr {

void AppendDouble(std::string* out, double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}

void AppendInt(std::string* out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}

void AppendUint(std::string* out, uint64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}

std::string FormatDouble(double v) {
  std::string s;
  AppendDouble(&s, v);
  return s;
}

void AppendJsonString(std::string* out, std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  size_t run = 0;  // start of the pending run of plain bytes
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out->append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default: {
        const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
        out->append(esc, sizeof(esc));
      }
    }
  }
  out->append(s.data() + run, s.size() - run);
  out->push_back('"');
}

namespace {

std::string Escape(std::string_view s, size_t max_bytes, bool double_backslash) {
  static const char kHex[] = "0123456789abcdef";
  const size_t shown = std::min(s.size(), max_bytes);
  std::string out;
  out.reserve(shown + 16);
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\' && double_backslash) {
      out.append("\\\\");
    } else if (c >= 0x20 && c <= 0x7e) {
      out.push_back(static_cast<char>(c));
    } else {
      const char esc[] = {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
      out.append(esc, sizeof(esc));
    }
  }
  if (shown < s.size()) {
    out.append("...(");
    AppendUint(&out, s.size());
    out.append(" bytes)");
  }
  return out;
}

}  // namespace

std::string EscapeForLog(std::string_view s, size_t max_bytes) {
  return Escape(s, max_bytes, /*double_backslash=*/true);
}

std::string EscapeMessageForLog(std::string_view message, size_t max_bytes) {
  return Escape(message, max_bytes, /*double_backslash=*/false);
}

}  // namespace gnmr
