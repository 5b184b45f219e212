// EscapeForLog: no byte a peer sends can end a log line, forge a log level
// or reach a terminal as a control sequence.
#include <gtest/gtest.h>

#include <string>

#include "common/text.h"

namespace gnmr {
namespace {

TEST(EscapeForLogTest, KeepsPrintableAsciiAndEscapesEverythingElse) {
  EXPECT_EQ(EscapeForLog("layers.0.attn q_proj-1:x"), "layers.0.attn q_proj-1:x");
  EXPECT_EQ(EscapeForLog("a\nb"), "a\\x0ab");
  EXPECT_EQ(EscapeForLog(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(EscapeForLog("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(EscapeForLog("\x7f\xff\xc3\xa9"), "\\x7f\\xff\\xc3\\xa9");
  // A backslash is doubled, so a literal "\x0a" cannot pass for an escape.
  EXPECT_EQ(EscapeForLog("\\x0a"), "\\\\x0a");
}

TEST(EscapeForLogTest, ForgedLogLineStaysOnOneLine) {
  const std::string forged = "1.0\n[2024-01-01 00:00:00.000] [critical] disk on fire\r\n";
  const std::string out = EscapeForLog(forged);
  EXPECT_EQ(out.find('\n'), std::string::npos);
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_EQ(out.rfind("1.0\\x0a[2024", 0), 0u) << out;
}

TEST(EscapeForLogTest, CapsTheLengthAndSaysHowLongTheInputWas) {
  const std::string big(100000, 'a');
  EXPECT_EQ(EscapeForLog(big, 8), "aaaaaaaa...(100000 bytes)");
  EXPECT_EQ(EscapeForLog(std::string(300, 'b')).size(), 256u + std::string("...(300 bytes)").size());
  EXPECT_EQ(EscapeForLog("abc", 3), "abc");
  EXPECT_EQ(EscapeForLog(""), "");
}

}  // namespace
}  // namespace gnmr
