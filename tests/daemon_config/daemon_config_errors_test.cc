// Every way gnmrd's config can be wrong gives one line that names the file
// and line, or the flag, and says what is wrong.
#include <gtest/gtest.h>

#include "daemon/daemon_config/config_values.h"
#include "daemon/daemon_config/daemon_config.h"
#include "tests/daemon_config/test_env.h"

namespace gnmr {
namespace {

using testing_util::ScratchDir;
using testing_util::WriteFileOrFail;

Status LoadArgs(const std::vector<std::string>& args) {
  return testing_util::LoadWith(args).status();
}

struct FileCase {
  const char* yaml;
  int line;            // expected line in the message
  const char* needle;  // expected text in the message
};

class FileErrorTest : public ::testing::TestWithParam<FileCase> {};

TEST_P(FileErrorTest, NamesFileLineAndProblem) {
  ScratchDir dir;
  const std::string path = dir / "gnmrd.yaml";
  WriteFileOrFail(path, GetParam().yaml);
  const Status s = LoadArgs({"--config", path});
  ASSERT_FALSE(s.ok()) << GetParam().yaml;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  const std::string prefix = path + ":" + std::to_string(GetParam().line) + ": ";
  EXPECT_EQ(s.message().rfind(prefix, 0), 0u) << s.message();
  EXPECT_NE(s.message().find(GetParam().needle), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
}

INSTANTIATE_TEST_SUITE_P(
    Keys, FileErrorTest,
    ::testing::Values(FileCase{"log_level: info\nlistn: x\n", 2, "unknown key 'listn'"},
                      FileCase{"max_jobs: 1\nmax_jobs: 2\n", 2, "duplicate key"},
                      FileCase{"- a\n- b\n", 1, "expected a mapping"},
                      FileCase{"listen: {a: b}\n", 1, "address or a list"},
                      FileCase{"listen: []\n", 1, "names no address"},
                      FileCase{"listen:\n  - unix:/a\n  - unix:relative\n", 3,
                               "unix:/absolute/path"},
                      FileCase{"listen: [host]\n", 1, "'host:port'"},
                      FileCase{"listen: ['h:70000']\n", 1, "'host:port'"},
                      FileCase{"listen: [unix:/a, 'unix:///a']\n", 1, "listed twice"},
                      FileCase{"listen: [[a]]\n", 1, "must be a string"},
                      FileCase{"unix_socket_mode: 999\n", 1, "octal"},
                      FileCase{"metrics: {listen: example.com:9464}\n", 1, "ip:port"},
                      FileCase{"metrics:\n  top_k_units: -1\n", 2, "metrics.top_k_units"},
                      FileCase{"metrics:\n  port: 1\n", 2,
                               "unknown key (known: listen, "
                               "top_k_units, unit_group_depth, max_unit_groups)"},
                      FileCase{"metrics:\n  max_unit_groups: 0\n", 2, "metrics.max_unit_groups"},
                      FileCase{"metrics: off\n", 1, "must be a mapping"},
                      FileCase{"state_dir: ''\n", 1, "must not be empty"},
                      FileCase{"state_dir:\n", 1, "got nothing"},
                      FileCase{"snapshot_every_steps: 0\n", 1, "[1, 1000000]"},
                      FileCase{"step_deadline_ms: abc\n", 1, "got 'abc'"},
                      FileCase{"step_deadline_ms: [1]\n", 1, "single value"},
                      FileCase{"max_message_bytes: 1KiB\n", 1, "[4096, 2147483647]"},
                      FileCase{"max_message_bytes: 3GiB\n", 1, "bytes"},
                      FileCase{"max_jobs: 0\n", 1, "max_jobs"},
                      FileCase{"max_ranks_per_job: 70000\n", 1, "[1, 65536]"},
                      FileCase{"max_units_per_job: 1e6\n", 1, "max_units_per_job"},
                      FileCase{"max_window_cells_per_job: 0\n", 1, "max_window_cells_per_job"},
                      FileCase{"max_o_limit: 20000000\n", 1, "[1, 16777216]"},
                      FileCase{"max_open_step_bytes: 1KiB\n", 1, "max_open_step_bytes"},
                      FileCase{"memory_budget: 1MiB\n", 1, "memory_budget"},
                      FileCase{"job_tokens: [a]\n", 1, "map job ids to tokens"},
                      FileCase{"job_tokens:\n  ok: t\n  ../etc: t\n", 3, "job id"},
                      FileCase{"job_tokens:\n  a: 'has space'\n", 2, "printable ASCII"},
                      FileCase{"job_tokens:\n  a: {x: y}\n", 2, "must be a string"},
                      FileCase{"allow_unregistered_jobs: maybe\n", 1, "true or false"},
                      FileCase{"admin_token: ''\n", 1, "token"},
                      FileCase{"tls:\n  cert: /x\n  pem: /y\n", 3, "tls.pem"},
                      FileCase{"log_level: loud\n", 1, "trace, debug"},
                      FileCase{"controller:\n  warmup: 5\n  max_o: -1\n", 3, "max_o"},
                      FileCase{"controller:\n  maxo: 3\n", 2, "unknown config key 'maxo'"},
                      FileCase{"controller: [1]\n", 1, "expected a mapping"},
                      FileCase{"listen: [a\nmax_jobs: 1\n", 2, "invalid YAML"}));

struct CrossCase {
  std::string yaml;
  std::string needle;
};

TEST(DaemonConfigErrorsTest, CrossKeyAndFileSystemChecks) {
  ScratchDir dir;
  const std::string token = dir / "token";
  const std::string empty = dir / "empty";
  const std::string pem = dir / "x.pem";
  WriteFileOrFail(token, "tok");
  WriteFileOrFail(empty, "\n");
  WriteFileOrFail(pem, "x");
  const std::string missing = dir / "missing.pem";
  const std::vector<CrossCase> cases = {
      {"admin_token: a\nadmin_token_file: " + token + "\n",
       ":2: admin_token_file: admin_token is also set"},
      {"admin_token_file: " + missing + "\n",
       ":1: admin_token_file: " + missing + ": No such file"},
      {"admin_token_file: " + empty + "\n", ":1: admin_token_file: " + empty},
      {"admin_token_file: " + dir.path() + "\n", "not a file"},
      {"tls: {cert: " + pem + "}\n", ":1: tls.cert: needs tls.key"},
      {"tls: {key: " + pem + "}\n", ":1: tls.key: needs tls.cert"},
      {"tls: {client_ca: " + pem + "}\n", ":1: tls.client_ca: needs tls.cert"},
      {"tls:\n  cert: " + pem + "\n  key: " + missing + "\n",
       ":3: tls.key: " + missing + ": No such file"},
      // A default config every job would be refused with (issue 12 item 8).
      {"max_o_limit: 16\ncontroller: {max_o: 32}\n",
       ":1: max_o_limit: controller.max_o (32) exceeds max_o_limit (16)"},
      {"controller: {max_o: 5000}\n",
       ":1: controller: controller.max_o (5000) exceeds max_o_limit"},
  };
  for (const CrossCase& c : cases) {
    const std::string path = dir / "gnmrd.yaml";
    WriteFileOrFail(path, c.yaml);
    const Status s = LoadArgs({"--config", path});
    ASSERT_FALSE(s.ok()) << c.yaml;
    EXPECT_EQ(s.message().rfind(path + ":", 0), 0u) << s.message();
    EXPECT_NE(s.message().find(c.needle), std::string::npos)
        << s.message() << "\nwanted: " << c.needle;
  }
}

TEST(DaemonConfigErrorsTest, FlagErrorsNameTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--bogus"}, "unknown option '--bogus'"},
      {{"--bogus=1"}, "unknown option '--bogus'"},
      {{"-x"}, "unknown option '-x'"},
      {{"positional"}, "unexpected argument 'positional'"},
      {{"--listen"}, "option '--listen' needs a value (ADDR)"},
      {{"--config="}, "--config: needs a file"},
      {{"--listen", "nope"}, "--listen: must be 'unix:/path'"},
      {{"--listen", "unix:/a", "--listen", "unix:/a"}, "given twice"},
      {{"--step-deadline-ms", "0"}, "--step-deadline-ms: must be an integer"},
      {{"--snapshot-every=x"}, "--snapshot-every: must be an integer"},
      {{"--log-level", "LOUD"}, "--log-level: must be one of"},
      {{"--metrics", "9464"}, "--metrics: must be 'ip:port'"},
      {{"--state-dir="}, "--state-dir: must not be empty"},
      {{"--admin-token-file", "/does/not/exist"},
       "--admin-token-file: /does/not/exist: No such file"},
  };
  for (const auto& [args, needle] : cases) {
    const Status s = LoadArgs(args);
    ASSERT_FALSE(s.ok()) << args[0];
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message() << "\nwanted: " << needle;
  }
}

TEST(DaemonConfigErrorsTest, BinaryBytesInErrorsAreEscaped) {
  ScratchDir dir;
  const std::string path = dir / "gnmrd.yaml";
  WriteFileOrFail(path, "log_level: info\nstep_deadline_ms: \"\x1b[2J\x07\"\n");
  Status s = LoadArgs({"--config", path});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), path +
                             ":2: step_deadline_ms: must be an integer in [1, 3600000], got "
                             "'\\x1b[2J\\x07'");
  WriteFileOrFail(path, "\"bad\\nkey\x7f\": 1\n");
  s = LoadArgs({"--config", path});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("unknown key 'bad\\x0akey\\x7f'"), std::string::npos) << s.message();
  s = LoadArgs({"--log-level", "x\x1b[0m"});
  EXPECT_NE(s.message().find("got 'x\\x1b[0m'"), std::string::npos) << s.message();
}

TEST(DaemonConfigErrorsTest, MissingConfigFileIsNotFound) {
  const Status s = LoadArgs({"--config", "/does/not/exist.yaml"});
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message().rfind("/does/not/exist.yaml: cannot open", 0), 0u) << s.message();
}

TEST(ConfigValuesTest, Spellings) {
  using namespace daemon_config;
  uint64_t n = 0;
  EXPECT_TRUE(ParseByteSize("64MiB", 0, 1u << 30, &n).ok());
  EXPECT_EQ(n, 64u << 20);
  EXPECT_TRUE(ParseByteSize("4096", 0, 1u << 30, &n).ok());
  EXPECT_FALSE(ParseByteSize("MiB", 0, 1u << 30, &n).ok());
  EXPECT_FALSE(ParseByteSize("-1", 0, 1u << 30, &n).ok());
  EXPECT_TRUE(ParseDurationMs("500ms", 1000000, &n).ok());
  EXPECT_EQ(n, 500u);
  EXPECT_TRUE(ParseDurationMs("2m", 1000000, &n).ok());
  EXPECT_EQ(n, 120000u);
  EXPECT_TRUE(ParseDurationMs("0", 1000000, &n).ok());
  EXPECT_EQ(n, 0u);
  EXPECT_FALSE(ParseDurationMs("1d", 1000000, &n).ok());  // past the bound
  EXPECT_FALSE(ParseDurationMs("5", 1000000, &n).ok());   // no unit
  EXPECT_FALSE(ParseDurationMs("h", 1000000, &n).ok());
  EXPECT_FALSE(ParseDurationMs("-1s", 1000000, &n).ok());
  EXPECT_FALSE(ParseUint("+5", 0, 10, &n).ok());
  EXPECT_FALSE(ParseUint("99999999999999999999999", 0, ~0ull, &n).ok());
  uint32_t mode = 0;
  EXPECT_TRUE(ParseFileMode("0o640", &mode).ok());
  EXPECT_EQ(mode, 0640u);
  EXPECT_TRUE(ParseFileMode("660", &mode).ok());
  EXPECT_EQ(mode, 0660u);
  EXPECT_FALSE(ParseFileMode("0680", &mode).ok());
  bool b = false;
  EXPECT_TRUE(ParseBool("On", &b).ok());
  EXPECT_TRUE(b);
  std::string out;
  EXPECT_TRUE(ParseListenAddress("localhost:50051", &out).ok());
  EXPECT_TRUE(ParseListenAddress("[::]:50051", &out).ok());
  EXPECT_FALSE(ParseListenAddress("[::]", &out).ok());
  EXPECT_FALSE(ParseListenAddress(":50051", &out).ok());
  EXPECT_FALSE(ParseListenAddress("unix:/" + std::string(107, 'a'), &out).ok());
  EXPECT_TRUE(ParseMetricsAddress("OFF", &out).ok());
  EXPECT_EQ(out, "");
  EXPECT_TRUE(ParseMetricsAddress("[::1]:9464", &out).ok());
  EXPECT_FALSE(ParseMetricsAddress("256.0.0.1:9464", &out).ok());
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.2:1"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:1"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:1"));
  EXPECT_FALSE(CheckJobId(std::string(129, 'a')).ok());
  EXPECT_TRUE(CheckJobId("a.b:c_d-e").ok());
  EXPECT_FALSE(CheckToken("tab\there").ok());
}

}  // namespace
}  // namespace gnmr
