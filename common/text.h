// Small text helpers shared by the machine-readable outputs (JSON Lines,
// YAML): exact number formatting and string escaping.
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

}  // namespace gnmr
