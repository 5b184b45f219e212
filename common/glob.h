// Shell-style glob matching for unit-name patterns.
#pragma once

#include <string_view>

namespace gnmr {

// True if `text` matches `pattern` as a whole. Supports `*` (any run,
// including empty), `?` (one character) and bracket sets `[abc]`, `[a-z]`,
// `[!abc]`. A malformed bracket matches the literal '['. No recursion, so a
// hostile pattern cannot blow the stack; worst case O(|pattern| * |text|).
bool GlobMatch(std::string_view pattern, std::string_view text);

}  // namespace gnmr
