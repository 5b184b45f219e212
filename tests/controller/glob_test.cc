#include "common/glob.h"

#include <random>
#include <string>

#include <gtest/gtest.h>

#include "controller/action_resolver.h"

namespace gnmr {
namespace {

TEST(GlobMatch, Basics) {
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_TRUE(GlobMatch("*", "anything"));
  EXPECT_TRUE(GlobMatch("layers.*.attn", "layers.3.attn"));
  EXPECT_FALSE(GlobMatch("layers.*.attn", "layers.3.attn.qkv"));
  EXPECT_TRUE(GlobMatch("*.fc?", "mlp.fc1"));
  EXPECT_FALSE(GlobMatch("*.fc?", "mlp.fc12"));
  EXPECT_TRUE(GlobMatch("l[0-3].x", "l2.x"));
  EXPECT_FALSE(GlobMatch("l[0-3].x", "l7.x"));
  EXPECT_TRUE(GlobMatch("l[!0-3].x", "l7.x"));
  EXPECT_TRUE(GlobMatch("a[bc]d", "acd"));
  EXPECT_TRUE(GlobMatch("a[", "a["));  // unterminated bracket is literal
  EXPECT_FALSE(GlobMatch("abc", "abcd"));
  EXPECT_TRUE(GlobMatch("a*b*c", "aXXbYYc"));
  EXPECT_FALSE(GlobMatch("a*b*c", "aXXbYY"));
  EXPECT_TRUE(GlobMatch("", ""));
  EXPECT_FALSE(GlobMatch("", "a"));
  EXPECT_TRUE(GlobMatch("[]]", "]"));  // ']' first in a set is a member
  EXPECT_TRUE(GlobMatch("[!]]", "x"));
}

TEST(GlobMatch, PathologicalPatternIsFast) {
  // Exponential for naive recursive matchers; linear here.
  const std::string text(5000, 'a');
  EXPECT_FALSE(GlobMatch("*a*a*a*a*a*a*a*a*a*a*b", text));
}

TEST(GlobMatch, LongPatternsSpanSeveralWords) {
  // 200 positions: the state vector spans four 64-bit words; carries
  // between words must survive.
  const std::string body(199, 'a');
  EXPECT_TRUE(GlobMatch("*" + body + "b", "xx" + body + "b"));
  EXPECT_FALSE(GlobMatch("*" + body + "b", "xx" + body + "c"));
  EXPECT_TRUE(GlobMatch(body + "*b", body + "zzzb"));
  EXPECT_TRUE(GlobMatch("*" + std::string(70, '?') + "*", std::string(70, 'q')));
  EXPECT_FALSE(GlobMatch("*" + std::string(70, '?') + "*", std::string(69, 'q')));
  // The hostile rule of issue 12: more positions than any name has bytes.
  EXPECT_FALSE(GlobMatch("*" + std::string(1022, 'a') + "b", std::string(255, 'a') + "c"));
}

// The backtracking matcher this project used before (O(|p| * |t|)): the
// reference the linear one must agree with on every input.
bool ReferenceBracket(std::string_view pattern, size_t p, char c, size_t* end) {
  size_t i = p + 1;
  bool negate = false;
  if (i < pattern.size() && (pattern[i] == '!' || pattern[i] == '^')) {
    negate = true;
    ++i;
  }
  bool matched = false, first = true;
  while (i < pattern.size() && (first || pattern[i] != ']')) {
    first = false;
    char lo = pattern[i], hi = lo;
    if (i + 2 < pattern.size() && pattern[i + 1] == '-' && pattern[i + 2] != ']') {
      hi = pattern[i + 2];
      i += 3;
    } else {
      i += 1;
    }
    if (lo <= c && c <= hi) matched = true;
  }
  if (i >= pattern.size()) {
    *end = p;
    return false;
  }
  *end = i + 1;
  return matched != negate;
}

bool ReferenceMatch(std::string_view pattern, std::string_view text) {
  size_t p = 0, t = 0, star_p = std::string_view::npos, star_t = 0;
  while (t < text.size()) {
    if (p < pattern.size()) {
      const char pc = pattern[p];
      if (pc == '*') {
        star_p = p++;
        star_t = t;
        continue;
      }
      if (pc == '?') {
        ++p, ++t;
        continue;
      }
      if (pc == '[') {
        size_t end;
        const bool in_set = ReferenceBracket(pattern, p, text[t], &end);
        if (end != p) {
          if (in_set) {
            p = end, ++t;
            continue;
          }
        } else if (text[t] == '[') {
          ++p, ++t;
          continue;
        }
      } else if (pc == text[t]) {
        ++p, ++t;
        continue;
      }
    }
    if (star_p == std::string_view::npos) return false;
    p = star_p + 1;
    t = ++star_t;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

TEST(GlobMatch, AgreesWithTheBacktrackingMatcherOnRandomInputs) {
  std::mt19937_64 rng(12);
  // Small alphabets make matches, brackets, ranges and bytes >= 0x80
  // (negative as `char`) frequent.
  const std::string pattern_chars = "ab*?[]!^-\x81";
  const std::string text_chars = "ab[]!-\x81\xfe";
  uint64_t matches = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string pattern, text;
    const int plen = std::uniform_int_distribution<int>(0, 12)(rng);
    const int tlen = std::uniform_int_distribution<int>(0, 12)(rng);
    for (int k = 0; k < plen; ++k) pattern += pattern_chars[rng() % pattern_chars.size()];
    for (int k = 0; k < tlen; ++k) text += text_chars[rng() % text_chars.size()];
    const bool want = ReferenceMatch(pattern, text);
    ASSERT_EQ(GlobMatch(pattern, text), want)
        << "pattern '" << pattern << "' text '" << text << "'";
    matches += want ? 1 : 0;
  }
  EXPECT_GT(matches, 2000u);  // the comparison covered both outcomes
}

TEST(ActionResolver, FirstMatchWinsAndFallsBackToPromote) {
  ControllerConfig c;
  c.clip_min_scale = 0.3;
  c.actions = {{"*.fc[12]", Action::kClip, -1.0}, {"*.fc?", Action::kSkip, 0.5}};
  const ActionResolver r(c);
  EXPECT_EQ(r.Resolve("mlp.fc1").action, Action::kClip);
  EXPECT_EQ(r.Resolve("mlp.fc1").clip_min_scale, 0.3);
  EXPECT_EQ(r.Resolve("mlp.fc3").action, Action::kSkip);
  EXPECT_EQ(r.Resolve("mlp.fc3").clip_min_scale, 0.5);
  EXPECT_EQ(r.Resolve("attn").action, Action::kPromote);
  EXPECT_EQ(r.Resolve("attn").clip_min_scale, 0.3);
  for (const char* name : {"mlp.fc1", "mlp.fc3", "attn"}) {
    EXPECT_EQ(r.Resolve(name).action, ResolveAction(c, name).action) << name;
  }
}

}  // namespace
}  // namespace gnmr
