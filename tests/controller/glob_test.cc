#include "common/glob.h"

#include <gtest/gtest.h>

#include <string>

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
}

TEST(GlobMatch, PathologicalPatternIsFast) {
  // Exponential for naive recursive matchers; linear backtracking here.
  const std::string text(5000, 'a');
  EXPECT_FALSE(GlobMatch("*a*a*a*a*a*a*a*a*a*a*b", text));
}

}  // namespace
}  // namespace gnmr
