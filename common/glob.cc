#include "common/glob.h"

#include <cstddef>

namespace gnmr {
namespace {

// Matches the bracket expression starting at pattern[p] ('[') against c.
// Sets *end to the index just past ']' and returns whether c is in the set;
// returns false with *end = p when the bracket is not closed.
bool MatchBracket(std::string_view pattern, size_t p, char c, size_t* end) {
  size_t i = p + 1;
  bool negate = false;
  if (i < pattern.size() && (pattern[i] == '!' || pattern[i] == '^')) {
    negate = true;
    ++i;
  }
  bool matched = false;
  bool first = true;
  while (i < pattern.size() && (first || pattern[i] != ']')) {
    first = false;
    char lo = pattern[i];
    char hi = lo;
    if (i + 2 < pattern.size() && pattern[i + 1] == '-' &&
        pattern[i + 2] != ']') {
      hi = pattern[i + 2];
      i += 3;
    } else {
      i += 1;
    }
    if (lo <= c && c <= hi) matched = true;
  }
  if (i >= pattern.size()) {  // unterminated: not a bracket expression
    *end = p;
    return false;
  }
  *end = i + 1;
  return matched != negate;
}

}  // namespace

bool GlobMatch(std::string_view pattern, std::string_view text) {
  size_t p = 0, t = 0;
  size_t star_p = std::string_view::npos, star_t = 0;
  while (t < text.size()) {
    if (p < pattern.size()) {
      char pc = pattern[p];
      if (pc == '*') {
        star_p = p++;
        star_t = t;
        continue;
      }
      if (pc == '?') {
        ++p;
        ++t;
        continue;
      }
      if (pc == '[') {
        size_t end;
        bool in_set = MatchBracket(pattern, p, text[t], &end);
        if (end != p) {
          if (in_set) {
            p = end;
            ++t;
            continue;
          }
        } else if (text[t] == '[') {  // literal '['
          ++p;
          ++t;
          continue;
        }
      } else if (pc == text[t]) {
        ++p;
        ++t;
        continue;
      }
    }
    if (star_p == std::string_view::npos) return false;
    p = star_p + 1;  // backtrack: let the last '*' swallow one more char
    t = ++star_t;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace gnmr
