// Runs the real gnmrctl binary: the bundled example, --help, and bad inputs
// (exit code 2 and one error line "gnmrctl: FILE:LINE: problem").
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace {

const std::string kSource = GNMR_SOURCE_DIR;
const std::string kTrace = kSource + "/examples/traces/example.csv";
const std::string kConfig = kSource + "/examples/configs/replay.yaml";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

class Gnmrctl : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = ::testing::TempDir() + "/gnmrctl_" + info->name();
    ASSERT_EQ(std::system(("rm -rf '" + dir_ + "' && mkdir -p '" + dir_ + "'").c_str()), 0);
  }
  void TearDown() override { (void)std::system(("rm -rf '" + dir_ + "'").c_str()); }

  // Runs `gnmrctl ARGS` (ARGS already shell-quoted); captures both streams.
  int Run(const std::string& args) {
    const std::string cmd = std::string("'") + GNMRCTL_PATH + "' " + args + " >'" + dir_ +
                            "/stdout' 2>'" + dir_ + "/stderr'";
    const int status = std::system(cmd.c_str());
    out_ = ReadFile(dir_ + "/stdout");
    err_ = ReadFile(dir_ + "/stderr");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  std::string dir_, out_, err_;
};

size_t CountLines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST_F(Gnmrctl, ReplaysTheExampleToAFile) {
  const std::string out = dir_ + "/decisions.jsonl";
  ASSERT_EQ(Run("replay --trace '" + kTrace + "' --config '" + kConfig + "' --out '" + out + "'"),
            0)
      << err_;
  EXPECT_EQ(out_, "");  // decisions went to the file
  const std::string jsonl = ReadFile(out);
  ASSERT_GT(CountLines(jsonl), 5u);
  EXPECT_EQ(jsonl.rfind("{\"observed_step\":", 0), 0u);
  // The NaN at step 190 (layers.3.mlp.fc2): non-finite admission and a
  // global skip; the burst at step 250 exceeds max_o 3: two denials.
  EXPECT_NE(jsonl.find("{\"observed_step\":190,\"apply_step\":191,"
                       "\"admitted\":[{\"unit\":\"layers.3.mlp.fc2\","
                       "\"action\":\"promote\",\"until\":201,\"trigger\":"
                       "\"nonfinite\",\"gnmr\":null,\"delta\":null}]"),
            std::string::npos)
      << jsonl;
  EXPECT_NE(jsonl.find("\"global_skip\":true"), std::string::npos);
  EXPECT_NE(jsonl.find("\"denied\":[\"layers.5.attn.qkv\","
                       "\"layers.3.attn.qkv\"]"),
            std::string::npos)
      << jsonl;
  EXPECT_NE(jsonl.find("\"trigger\":\"delta\""), std::string::npos);
  // Summary on stderr.
  EXPECT_NE(err_.find("320 steps (0..319), 26 units, 8320 unit observations"), std::string::npos)
      << err_;
  EXPECT_NE(err_.find("denials: 2;"), std::string::npos) << err_;
  EXPECT_NE(err_.find("peak units in recovery: 3"), std::string::npos) << err_;
  EXPECT_NE(err_.find("to " + out), std::string::npos) << err_;
  EXPECT_FALSE(Exists(out + ".tmp"));
}

TEST_F(Gnmrctl, WritesToStdoutWithoutOutAndSetOverridesTheConfig) {
  ASSERT_EQ(Run("replay --trace '" + kTrace + "' --config '" + kConfig +
                "' --set max_o=1 --set lock_steps=30"),
            0)
      << err_;
  EXPECT_EQ(out_.rfind("{\"observed_step\":", 0), 0u);
  EXPECT_NE(out_.find("\"until\":126"), std::string::npos) << out_;  // 96+30
  EXPECT_NE(err_.find("peak units in recovery: 1"), std::string::npos) << err_;
  EXPECT_EQ(err_.find("denials: 0;"), std::string::npos) << err_;
}

TEST_F(Gnmrctl, QuietSuppressesTheSummary) {
  ASSERT_EQ(Run("replay --quiet --trace '" + kTrace + "'"), 0) << err_;
  EXPECT_EQ(err_, "");
  EXPECT_GT(CountLines(out_), 0u);
}

TEST_F(Gnmrctl, Help) {
  ASSERT_EQ(Run("--help"), 0);
  EXPECT_NE(out_.find("usage: gnmrctl [connection options] COMMAND"), std::string::npos);
  EXPECT_NE(out_.find("  completion "), std::string::npos);
  EXPECT_NE(out_.find("  replay "), std::string::npos);
  ASSERT_EQ(Run("replay --help"), 0);
  EXPECT_NE(out_.find("usage: gnmrctl replay --trace TRACE.csv"), std::string::npos);
  for (const char* flag : {"--config", "--set", "--out", "--quiet"}) {
    EXPECT_NE(out_.find(flag), std::string::npos) << flag;
  }
  EXPECT_EQ(Run("frobnicate"), 2);
  EXPECT_EQ(err_, "gnmrctl: unknown command 'frobnicate' (see gnmrctl --help)\n");
}

// `config keys` needs no daemon: every key from the schema, and with
// --markdown the table docs/controller.md holds (config_schema_test checks
// the docs against the schema itself).
TEST_F(Gnmrctl, ConfigKeys) {
  ASSERT_EQ(Run("config keys"), 0) << err_;
  for (const char* key : {"warmup", "gnmr_floor", "entry", "clip_min_scale", "actions"}) {
    EXPECT_NE(out_.find(std::string("\n") + key + " "), std::string::npos) << key << "\n" << out_;
  }
  EXPECT_NE(out_.find("none, clip, skip"), std::string::npos) << out_;
  ASSERT_EQ(Run("config keys --markdown"), 0) << err_;
  EXPECT_EQ(out_.rfind("| key | type | default | valid values | meaning |\n", 0), 0u) << out_;
  EXPECT_NE(ReadFile(kSource + "/docs/controller.md").find(out_), std::string::npos) << out_;
  ASSERT_EQ(Run("config set --help"), 0) << err_;
  EXPECT_NE(out_.find("gnmr_floor"), std::string::npos) << out_;
  EXPECT_EQ(Run("config keys --bogus"), 2);
}

// Bad input: exit 2 and exactly one line on stderr.
void ExpectBadInput(int code, const std::string& err, const std::string& line) {
  EXPECT_EQ(code, 2);
  EXPECT_EQ(err, line + "\n");
}

TEST_F(Gnmrctl, BadTracesNameFileAndLine) {
  const std::string out = dir_ + "/never.jsonl";
  std::string t = Write("nocol.csv", "step,unit,amax\n0,a,1\n");
  ExpectBadInput(Run("replay --trace '" + t + "' --out '" + out + "'"), err_,
                 "gnmrctl: " + t +
                     ":1: missing column 'sumsq' in the header (required: "
                     "step, unit, sumsq; optional: amax, nonfinite, zeros, "
                     "numel, fwd_sumsq, fwd_amax, fwd_saturated, fwd_zeros, fwd_numel, "
                     "fwd_order, fwd_blocks, fwd_saturated_blocks, fwd_dead_blocks, "
                     "fwd_scale_clamps, fwd_source_numel, fwd_underflow, fwd_error_sumsq, "
                     "fwd_source_sumsq, bwd_sumsq, bwd_saturated, bwd_zeros, bwd_numel, "
                     "bwd_order)");
  t = Write("nan.csv", "step,unit,sumsq\n0,a,1\n0,b,1..2\n");
  ExpectBadInput(Run("replay --trace '" + t + "' --out '" + out + "'"), err_,
                 "gnmrctl: " + t + ":3: column 'sumsq': '1..2' is not a number");
  t = Write("back.csv", "step,unit,sumsq\n3,a,1\n4,a,1\n2,a,1\n");
  ExpectBadInput(Run("replay --trace '" + t + "' --out '" + out + "'"), err_,
                 "gnmrctl: " + t +
                     ":4: step 2 goes backwards after step 4 (steps must "
                     "increase and the rows of a step be contiguous)");
  EXPECT_FALSE(Exists(out));  // nothing half-written
  EXPECT_FALSE(Exists(out + ".tmp"));
  ExpectBadInput(Run("replay --trace '" + dir_ + "/missing.csv'"), err_,
                 "gnmrctl: " + dir_ + "/missing.csv: cannot open: No such file or directory");
}

TEST_F(Gnmrctl, BadConfigsNameFileAndLine) {
  std::string c = Write("unknown.yaml", "warmup: 5\nmaxo: 2\n");
  Run("replay --trace '" + kTrace + "' --config '" + c + "'");
  EXPECT_EQ(err_.rfind("gnmrctl: " + c + ":2: unknown config key 'maxo'", 0), 0u) << err_;
  EXPECT_EQ(CountLines(err_), 1u);
  c = Write("neg.yaml", "# budget\nmax_o: -2\n");
  ExpectBadInput(Run("replay --trace '" + kTrace + "' --config '" + c + "'"), err_,
                 "gnmrctl: " + c + ":2: config key 'max_o' must be >= 0, got -2");
  ExpectBadInput(Run("replay --trace '" + kTrace + "' --set max_o=-1"), err_,
                 "gnmrctl: --set max_o=-1: config key 'max_o' must be >= 0, "
                 "got -1");
  ExpectBadInput(Run("replay --trace '" + kTrace + "' --set tau=x"), err_,
                 "gnmrctl: --set tau=x: config key 'tau' must be a number, "
                 "got 'x'");
}

TEST_F(Gnmrctl, BadArguments) {
  ExpectBadInput(Run("replay"), err_,
                 "gnmrctl: replay: --trace is required (see gnmrctl replay "
                 "--help)");
  ExpectBadInput(Run("replay --trace '" + kTrace + "' --frob"), err_,
                 "gnmrctl: replay: unknown option '--frob' (see gnmrctl "
                 "replay --help)");
  ExpectBadInput(Run("replay --trace"), err_,
                 "gnmrctl: replay: option '--trace' needs a value (TRACE.csv) "
                 "(see gnmrctl replay --help)");
}

}  // namespace
