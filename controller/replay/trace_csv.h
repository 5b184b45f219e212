// RFC 4180 fields of replay traces (docs/replay.md, "Traces"): how gnmrd's
// trace recorder writes a field and how TraceReader reads a quoted one, in
// one place so the two cannot drift apart.
//
// A field is quoted when it holds a comma, a quote, CR or LF, or starts or
// ends with a space or tab (the reader trims unquoted fields); a quote
// inside is doubled. Only a field whose first non-blank character is a
// quote is a quoted field: a quote inside an unquoted field is an ordinary
// character, as most CSV readers take it, so a hand-written `a"b` keeps
// its quote.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gnmr {

// `s` without its leading and trailing spaces and tabs (an unquoted
// field, a blank line).
inline std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
inline bool IsBlank(std::string_view s) { return TrimBlanks(s).empty(); }

// Appends `field` to *out, quoted only when it must be.
void AppendCsvField(std::string* out, std::string_view field);

// Whether `line` (without its newline) ends inside a quoted field: then
// the newline is part of the field and the record goes on to the next
// line. `starts_inside`: the line is such a continuation (it starts inside
// the quoted field of the line before), so each line is scanned once.
bool EndsInsideQuotes(std::string_view line, bool starts_inside);

enum class CsvField {
  kOk,
  kUnclosedQuote,   // a quoted field without its closing quote
  kTextAfterQuote,  // text between the closing quote and the comma
};

// Reads the field at *p, before `e`: *f its text (a quoted one with its
// doubled quotes made single - a view of the input when it holds none,
// else *scratch - an unquoted one trimmed of blanks), *comma the comma
// after it (null at `e`), *p past the closing quote of a quoted field.
CsvField ReadCsvField(const char** p, const char* e, std::string* scratch, std::string_view* f,
                      const char** comma);

// The number of fields of `record`, quotes honoured (for error messages).
size_t CountCsvFields(std::string_view record);

}  // namespace gnmr
