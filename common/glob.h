// Shell-style glob matching for unit-name patterns.
//
// Syntax: `*` (any run, including empty), `?` (one character) and bracket
// sets `[abc]`, `[a-z]`, `[!abc]` (or `[^abc]`); a `]` right after the `[`
// (or `[!`) is a member; a bracket that is never closed is a literal '['.
// The whole text must match.
//
// Matching is linear in the text: a compiled pattern is a bit-parallel
// NFA (Shift-And) over its non-star positions, stars being self-loops, so
// a text of t bytes costs t * ceil((n + 1) / 64) word operations for n
// non-star positions, with no backtracking; a pattern with more non-star
// positions than the text has bytes is refused before any. (Backtracking
// matchers cost |pattern| * |text|: 256 rules `'*' + 'a' x 1022 + 'b'`
// cost ~13 ms per 256-byte unit name; docs/perf.md.)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace gnmr {

class GlobPattern {
 public:
  explicit GlobPattern(std::string_view pattern);

  bool Matches(std::string_view text) const;

  // Heap bytes held (the transition table), for memory accounting.
  size_t MemoryBytes() const { return (accept_.capacity() + star_.capacity()) * sizeof(uint64_t); }

 private:
  size_t positions_ = 0;  // non-star tokens
  bool has_star_ = false;
  size_t words_ = 1;  // ceil((positions_ + 1) / 64)
  // Bytes that no token tells apart share a class: the table has one row
  // per class instead of one per byte value.
  std::array<uint8_t, 256> class_of_{};
  std::vector<uint64_t> accept_;  // [class][word]: bit k if token k accepts
  std::vector<uint64_t> star_;    // [word]: bit k if a star precedes token k
};

// True if `text` matches `pattern` as a whole (compiles the pattern: use a
// GlobPattern to match one pattern against many texts).
bool GlobMatch(std::string_view pattern, std::string_view text);

}  // namespace gnmr
