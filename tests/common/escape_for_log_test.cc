// EscapeForLog: no byte a peer sends can end a log line, forge a log level
// or reach a terminal as a control sequence.
#include <string>

#include <gtest/gtest.h>

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
  EXPECT_EQ(EscapeForLog(std::string(300, 'b')).size(),
            256u + std::string("...(300 bytes)").size());
  EXPECT_EQ(EscapeForLog("abc", 3), "abc");
  EXPECT_EQ(EscapeForLog(""), "");
}

TEST(EscapeForLogTest, MessageOfOursKeepsItsEscapesAndStillCannotEndTheLine) {
  // A status message carries a unit name escaped once already.
  const std::string message = "unit name '" + EscapeForLog("u\n[critical] x") + "' is invalid";
  EXPECT_EQ(EscapeMessageForLog(message), "unit name 'u\\x0a[critical] x' is invalid");
  // Raw bytes in a message are escaped all the same.
  EXPECT_EQ(EscapeMessageForLog(std::string("a\nb\0\x1b", 5)), "a\\x0ab\\x00\\x1b");
  EXPECT_EQ(EscapeMessageForLog(std::string(600, 'm')), std::string(512, 'm') + "...(600 bytes)");
}

}  // namespace
}  // namespace gnmr
