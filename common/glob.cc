#include "common/glob.h"

#include <algorithm>
#include <utility>

namespace gnmr {
namespace {

// A bracket expression starting at pattern[p] ('['): its ranges (compared
// as `char`, as the syntax has always been) and whether it is negated.
struct Bracket {
  bool negate = false;
  std::vector<std::pair<char, char>> ranges;
  bool Contains(char c) const {
    bool in = false;
    for (const auto& [lo, hi] : ranges) in = in || (lo <= c && c <= hi);
    return in != negate;
  }
};

// Parses the bracket at pattern[p]; returns the index just past its ']',
// or p when it is never closed (then the '[' is a literal).
size_t ParseBracket(std::string_view pattern, size_t p, Bracket* out) {
  size_t i = p + 1;
  if (i < pattern.size() && (pattern[i] == '!' || pattern[i] == '^')) {
    out->negate = true;
    ++i;
  }
  bool first = true;
  while (i < pattern.size() && (first || pattern[i] != ']')) {
    first = false;
    const char lo = pattern[i];
    char hi = lo;
    if (i + 2 < pattern.size() && pattern[i + 1] == '-' && pattern[i + 2] != ']') {
      hi = pattern[i + 2];
      i += 3;
    } else {
      i += 1;
    }
    out->ranges.emplace_back(lo, hi);
  }
  if (i >= pattern.size()) return p;
  return i + 1;
}

constexpr size_t kStackWords = 16;  // patterns of up to 1023 positions

}  // namespace

GlobPattern::GlobPattern(std::string_view pattern) {
  // Pass 1: tokens. Each non-star token becomes a position; `rows` holds,
  // per byte value, the positions that accept it (filled in pass 2).
  struct Token {
    enum Kind { kLiteral, kAny, kSet } kind;
    char literal;
    Bracket set;
  };
  std::vector<Token> tokens;
  std::vector<size_t> star_before;  // positions preceded by a star
  for (size_t p = 0; p < pattern.size();) {
    const char pc = pattern[p];
    if (pc == '*') {
      has_star_ = true;
      if (star_before.empty() || star_before.back() != tokens.size()) {
        star_before.push_back(tokens.size());
      }
      ++p;
      continue;
    }
    if (pc == '?') {
      tokens.push_back({Token::kAny, 0, {}});
      ++p;
      continue;
    }
    if (pc == '[') {
      Bracket b;
      const size_t end = ParseBracket(pattern, p, &b);
      if (end != p) {
        tokens.push_back({Token::kSet, 0, std::move(b)});
        p = end;
        continue;
      }
    }
    tokens.push_back({Token::kLiteral, pc, {}});
    ++p;
  }
  positions_ = tokens.size();
  words_ = (positions_ + 1 + 63) / 64;

  // Pass 2: the acceptance row of every byte value.
  std::vector<uint64_t> rows(256 * words_, 0);
  for (size_t k = 0; k < tokens.size(); ++k) {
    const Token& t = tokens[k];
    const uint64_t bit = uint64_t{1} << (k % 64);
    auto set = [&](int b) { rows[static_cast<size_t>(b) * words_ + k / 64] |= bit; };
    if (t.kind == Token::kLiteral) {
      set(static_cast<uint8_t>(t.literal));
      continue;
    }
    for (int b = 0; b < 256; ++b) {
      if (t.kind == Token::kAny || t.set.Contains(static_cast<char>(b))) set(b);
    }
  }
  // Bytes with equal rows share a class (at most 256 classes; usually a
  // handful: the bytes the pattern names, and the rest).
  std::vector<uint64_t> class_hash;
  for (size_t b = 0; b < 256; ++b) {
    const uint64_t* row = &rows[b * words_];
    uint64_t h = 1469598103934665603ull;
    for (size_t w = 0; w < words_; ++w) h = (h ^ row[w]) * 1099511628211ull;
    size_t id = 0;
    while (
        id < class_hash.size() &&
        (class_hash[id] != h ||
         !std::equal(row, row + words_, accept_.begin() + static_cast<ptrdiff_t>(id * words_)))) {
      ++id;
    }
    if (id == class_hash.size()) {
      class_hash.push_back(h);
      accept_.insert(accept_.end(), row, row + words_);
    }
    class_of_[b] = static_cast<uint8_t>(id);
  }
  accept_.shrink_to_fit();
  star_.assign(words_, 0);
  for (size_t k : star_before) star_[k / 64] |= uint64_t{1} << (k % 64);
}

bool GlobPattern::Matches(std::string_view text) const {
  if (positions_ > text.size()) return false;
  if (!has_star_ && positions_ != text.size()) return false;
  // state bit k: the first k tokens match the text read so far.
  if (words_ == 1) {
    const uint64_t star = star_[0];
    uint64_t d = 1;
    for (const char ch : text) {
      const uint64_t a = accept_[class_of_[static_cast<uint8_t>(ch)]];
      d = ((d & a) << 1) | (d & star);
      if (d == 0) return false;
    }
    return (d >> positions_) & 1;
  }
  uint64_t stack[kStackWords];
  std::vector<uint64_t> heap;
  uint64_t* d = stack;
  if (words_ > kStackWords) {
    heap.resize(words_);
    d = heap.data();
  }
  for (size_t w = 0; w < words_; ++w) d[w] = 0;
  d[0] = 1;
  for (const char ch : text) {
    const uint64_t* a = &accept_[class_of_[static_cast<uint8_t>(ch)] * words_];
    uint64_t carry = 0, any = 0;
    for (size_t w = 0; w < words_; ++w) {
      const uint64_t x = d[w] & a[w];
      const uint64_t next = (x << 1) | carry | (d[w] & star_[w]);
      carry = x >> 63;
      d[w] = next;
      any |= next;
    }
    if (any == 0) return false;
  }
  return (d[positions_ / 64] >> (positions_ % 64)) & 1;
}

bool GlobMatch(std::string_view pattern, std::string_view text) {
  return GlobPattern(pattern).Matches(text);
}

}  // namespace gnmr
