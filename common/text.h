// Small text helpers shared by the machine-readable outputs (JSON Lines,
// YAML) and the logs: exact number formatting and string escaping.
//
// Numbers are written with the shortest representation that parses back to
// the same double (std::to_chars), so a replayed decision or a rendered
// config round-trips bit-identically and stays readable ("0.98", not
// "0.97999999999999998").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace gnmr {

// Appends the shortest round-trip form of `v`. NaN and infinities come out
// as "nan", "inf" and "-inf"; callers writing JSON must handle them first.
void AppendDouble(std::string* out, double v);
void AppendInt(std::string* out, int64_t v);
void AppendUint(std::string* out, uint64_t v);
std::string FormatDouble(double v);

// Appends `s` as a double-quoted JSON string (also a valid YAML
// double-quoted scalar): quotes, backslashes and control characters are
// escaped; other bytes are copied as they are.
void AppendJsonString(std::string* out, std::string_view s);

// Bytes from a peer (a job id, a unit name, a client version, a YAML value)
// made safe for one log line or terminal row: printable ASCII 0x20..0x7e
// stays (a backslash is doubled); every other byte (newline, ESC, NUL,
// UTF-8 lead bytes) becomes \xNN. So a peer cannot end a log line,
// forge a "[critical]" line or send terminal escapes. At most `max_bytes`
// input bytes are shown; a longer input ends in "...(N bytes)".
std::string EscapeForLog(std::string_view s, size_t max_bytes = 256);

// A message of ours (a Status message, which may carry a peer's strings)
// for one log line. The peer's strings in it are escaped already
// (EscapeForLog, e.g. common/unit_name.h), so a backslash is kept as it is:
// escaping it again would log a unit name "u<newline>" as "u\\x0a", not
// "u\x0a". Every byte outside printable ASCII still becomes \xNN, so a
// message built from raw bytes cannot end the line either. Capped like
// EscapeForLog.
std::string EscapeMessageForLog(std::string_view message, size_t max_bytes = 512);

}  // namespace gnmr
