#include "common/flag_parser.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace gnmr {
namespace {

struct Fixture {
  std::string name;
  std::vector<std::string> tags;
  bool verbose = false;
  int64_t count = 3;
  double ratio = 0.5;
  FlagParser p{"prog [options]", "A test program."};
  Fixture() {
    p.AddString("name", "N", "a name", &name);
    p.AddRepeated("tag", "T", "repeatable", &tags);
    p.AddBool("verbose", "talk", &verbose);
    p.AddInt("count", "K", "1..10", 1, 10, &count);
    p.AddDouble("ratio", "R", "finite", &ratio);
  }
};

TEST(FlagParser, BothValueFormsRepeatsAndPositionals) {
  Fixture f;
  std::vector<std::string> rest;
  ASSERT_TRUE(f.p.Parse({"--name=a", "--tag", "x", "--tag=y", "--verbose", "--count", "10",
                         "--ratio=2.5", "file", "--", "--not-a-flag"},
                        &rest)
                  .ok());
  EXPECT_EQ(f.name, "a");
  EXPECT_EQ(f.tags, (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(f.verbose);
  EXPECT_EQ(f.count, 10);
  EXPECT_EQ(f.ratio, 2.5);
  EXPECT_EQ(rest, (std::vector<std::string>{"file", "--not-a-flag"}));
}

TEST(FlagParser, ErrorsNameTheFlagAndWhatItExpects) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--count", "11"}, "--count: '11': expected an integer in 1..10"},
      {{"--count=3x"}, "--count: '3x': expected an integer in 1..10"},
      {{"--ratio", "inf"}, "--ratio: 'inf': expected a finite number"},
      {{"--name"}, "option '--name' needs a value (N)"},
      {{"--verbose=1"}, "option '--verbose' takes no value"},
      {{"--bogus"}, "unknown option '--bogus'"},
      {{"-x"}, "unknown option '-x'"},
      {{"stray"}, "unexpected argument 'stray'"},
  };
  for (const auto& [args, want] : cases) {
    Fixture f;
    const Status s = f.p.Parse(args);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << args[0];
    EXPECT_EQ(s.message(), want);
  }
}

TEST(FlagParser, HelpComesFromTheDeclarations) {
  Fixture f;
  ASSERT_TRUE(f.p.Parse({"-h"}).ok());
  EXPECT_TRUE(f.p.help_requested());
  f.p.SetEpilog("exit codes: none\n");
  const std::string help = f.p.Help();
  EXPECT_EQ(help.rfind("usage: prog [options]\n\nA test program.\n", 0), 0u) << help;
  for (const char* line :
       {"  --name N                a name\n", "  --count K               1..10\n",
        "  --verbose               talk\n", "\nexit codes: none\n"}) {
    EXPECT_NE(help.find(line), std::string::npos) << line << "\n" << help;
  }
}

}  // namespace
}  // namespace gnmr
