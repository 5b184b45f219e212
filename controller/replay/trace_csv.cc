#include "controller/replay/trace_csv.h"

#include <cstring>

namespace gnmr {
namespace {

bool IsBlankChar(char c) { return c == ' ' || c == '\t'; }

// Walks `record` field by field, quotes honoured (from inside a quoted
// field with `starts_inside`); calls on_comma at each comma that separates
// fields. Returns whether it ends inside quotes.
template <typename OnComma>
bool ScanRecord(std::string_view record, bool starts_inside, OnComma on_comma) {
  enum {
    kFieldStart,
    kUnquoted,
    kQuoted,
    kQuoteInQuoted
  } state = starts_inside ? kQuoted : kFieldStart;
  for (char c : record) {
    switch (state) {
      case kFieldStart:
        if (c == '"') {
          state = kQuoted;
        } else if (c == ',') {
          on_comma();
        } else if (!IsBlankChar(c)) {
          state = kUnquoted;
        }
        break;
      case kUnquoted:
        if (c == ',') {
          on_comma();
          state = kFieldStart;
        }
        break;
      case kQuoted:
        if (c == '"') state = kQuoteInQuoted;
        break;
      case kQuoteInQuoted:  // the closing quote, or the first of a doubled one
        if (c == '"') {
          state = kQuoted;
        } else if (c == ',') {
          on_comma();
          state = kFieldStart;
        } else {
          state = kUnquoted;  // text after the closing quote: the reader refuses it
        }
        break;
    }
  }
  return state == kQuoted;
}

}  // namespace

void AppendCsvField(std::string* out, std::string_view field) {
  const bool quote = field.find_first_of(",\"\r\n") != std::string_view::npos ||
                     (!field.empty() && (IsBlankChar(field.front()) || IsBlankChar(field.back())));
  if (!quote) {
    out->append(field);
    return;
  }
  out->push_back('"');
  for (char c : field) {
    if (c == '"') out->push_back('"');
    out->push_back(c);
  }
  out->push_back('"');
}

bool EndsInsideQuotes(std::string_view line, bool starts_inside) {
  if (std::memchr(line.data(), '"', line.size()) == nullptr) return starts_inside;
  return ScanRecord(line, starts_inside, [] {});
}

CsvField ReadCsvField(const char** p, const char* e, std::string* scratch, std::string_view* f,
                      const char** comma) {
  const char* q = *p;
  while (q < e && IsBlankChar(*q)) ++q;
  if (q == e || *q != '"') {
    *comma = static_cast<const char*>(std::memchr(q, ',', static_cast<size_t>(e - q)));
    const char* end = *comma != nullptr ? *comma : e;
    while (end > q && IsBlankChar(end[-1])) --end;
    *f = std::string_view(q, static_cast<size_t>(end - q));
    return CsvField::kOk;
  }
  const char* const begin = q + 1;
  bool doubled = false;
  for (const char* from = begin;;) {
    const char* quote =
        static_cast<const char*>(std::memchr(from, '"', static_cast<size_t>(e - from)));
    if (quote == nullptr) return CsvField::kUnclosedQuote;
    if (quote + 1 < e && quote[1] == '"') {
      doubled = true;
      from = quote + 2;
      continue;
    }
    *f = std::string_view(begin, static_cast<size_t>(quote - begin));
    q = quote + 1;
    break;
  }
  if (doubled) {
    scratch->clear();
    for (size_t i = 0; i < f->size(); ++i) {
      scratch->push_back((*f)[i]);
      if ((*f)[i] == '"') ++i;  // the second of a doubled quote
    }
    *f = *scratch;
  }
  *p = q;
  while (q < e && IsBlankChar(*q)) ++q;
  *comma = q < e ? q : nullptr;
  return q == e || *q == ',' ? CsvField::kOk : CsvField::kTextAfterQuote;
}

size_t CountCsvFields(std::string_view record) {
  size_t fields = 1;
  ScanRecord(record, /*starts_inside=*/false, [&] { ++fields; });
  return fields;
}

}  // namespace gnmr
