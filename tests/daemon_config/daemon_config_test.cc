// gnmrd's config: defaults, the example file, file parsing, flags over the
// file, machine defaults, and every error path naming file:line or flag.
#include "daemon/daemon_config/daemon_config.h"

#include <map>
#include <set>

#include <gtest/gtest.h>

#include "daemon/daemon_config/config_file.h"
#include "daemon/daemon_config/config_keys.h"
#include "tests/daemon_config/test_env.h"

namespace gnmr {
namespace {

using testing_util::ReadFileOrEmpty;
using testing_util::ScratchDir;
using testing_util::WriteFileOrFail;

using testing_util::BareMachine;
using testing_util::WriteFileWithMode;

StatusOr<LoadedConfig> Load(const std::vector<std::string>& args) {
  return testing_util::LoadWith(args);
}

TEST(DaemonConfigTest, DefaultsWithoutFileOrFlags) {
  StatusOr<LoadedConfig> got = Load({});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const DaemonConfig& c = got->config;
  EXPECT_EQ(c.listen, std::vector<std::string>{"unix:/tmp/gnmrd-1234.sock"});
  EXPECT_EQ(c.state_dir, "/tmp/gnmr-1234/state");
  EXPECT_EQ(c.unix_socket_mode, 0660u);
  EXPECT_EQ(c.metrics_listen, "127.0.0.1:9464");
  EXPECT_EQ(c.metrics_top_k_units, 10u);
  EXPECT_EQ(c.snapshot_every_steps, 50u);
  EXPECT_EQ(c.step_deadline_ms, 2000u);
  EXPECT_EQ(c.max_message_bytes, 64u << 20);
  EXPECT_EQ(c.max_jobs, 1024u);
  EXPECT_EQ(c.max_ranks_per_job, 65536u);
  EXPECT_EQ(c.max_units_per_job, 1u << 20);
  EXPECT_EQ(c.max_step_jump, 1000000u);
  EXPECT_EQ(c.max_queued_decision_bytes, 4u << 20);
  EXPECT_EQ(c.max_window_cells_per_job, 1u << 22);
  EXPECT_EQ(c.max_rank_units_per_job, 1u << 24);
  EXPECT_EQ(c.max_slots_per_job, 1u << 22);
  EXPECT_EQ(c.max_o_limit, 4096u);
  EXPECT_EQ(c.max_open_step_bytes, 64u << 20);
  EXPECT_EQ(c.memory_budget, 1u << 30);
  EXPECT_EQ(c.max_request_bytes_in_flight, 64u << 20);
  EXPECT_TRUE(c.allow_unregistered_jobs);
  EXPECT_TRUE(c.job_tokens.empty());
  EXPECT_TRUE(c.admin_token.empty());
  EXPECT_FALSE(c.tls.enabled());
  EXPECT_EQ(c.log_level, "info");
  EXPECT_EQ(c.controller, ControllerConfig());
  EXPECT_EQ(c.origin.at("listen"), "default");
  EXPECT_FALSE(got->show_help);
  EXPECT_TRUE(got->warnings.empty());
}

TEST(DaemonConfigTest, MachineDefaultsFollowTheDocumentedOrder) {
  std::map<std::string, std::string> vars;
  std::set<std::string> writable;
  Environment env = BareMachine();
  env.getenv = [&vars](const std::string& n) -> std::optional<std::string> {
    auto it = vars.find(n);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
  env.writable_dir = [&writable](const std::string& d) { return writable.count(d) != 0; };
  EXPECT_EQ(DefaultListen(env), "unix:/tmp/gnmrd-1234.sock");
  EXPECT_EQ(DefaultStateDir(env), "/tmp/gnmr-1234/state");
  vars["HOME"] = "/home/u";
  EXPECT_EQ(DefaultStateDir(env), "/home/u/.local/state/gnmr");
  vars["XDG_STATE_HOME"] = "/xdg/state";
  EXPECT_EQ(DefaultStateDir(env), "/xdg/state/gnmr");
  vars["XDG_RUNTIME_DIR"] = "/run/user/1234";
  EXPECT_EQ(DefaultListen(env), "unix:/tmp/gnmrd-1234.sock");  // not writable
  writable.insert("/run/user/1234");
  EXPECT_EQ(DefaultListen(env), "unix:/run/user/1234/gnmrd.sock");
  vars["XDG_RUNTIME_DIR"] = "relative/dir";
  writable.insert("relative/dir");
  EXPECT_EQ(DefaultListen(env), "unix:/tmp/gnmrd-1234.sock");
  writable.insert("/run/gnmr");
  EXPECT_EQ(DefaultListen(env), "unix:/run/gnmr/gnmrd.sock");
  writable.insert("/var/lib");
  EXPECT_EQ(DefaultStateDir(env), "/var/lib/gnmr");
}

TEST(DaemonConfigTest, ExampleFileDocumentsEveryKeyAndHoldsTheDefaults) {
  const std::string path = std::string(GNMR_SOURCE_DIR) + "/deploy/gnmrd.example.yaml";
  const std::string text = ReadFileOrEmpty(path);
  ASSERT_FALSE(text.empty()) << path;
  for (const std::string& key : daemon_config::DaemonConfigKeys()) {
    EXPECT_NE(text.find(key + ":"), std::string::npos) << key;
  }
  for (const daemon_config::ScalarKey& k : daemon_config::ScalarKeys()) {
    const std::string key = k.key;
    const std::string leaf = key.substr(key.rfind('.') + 1);
    EXPECT_NE(text.find(leaf + ":"), std::string::npos) << key;
    if (k.flag != nullptr) {
      EXPECT_NE(text.find(std::string("--") + k.flag), std::string::npos) << k.flag;
    }
  }
  StatusOr<LoadedConfig> got = Load({"--config", path});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  StatusOr<LoadedConfig> defaults = Load({});
  ASSERT_TRUE(defaults.ok());
  DaemonConfig a = got->config;
  const DaemonConfig& b = defaults->config;
  EXPECT_EQ(a.listen, std::vector<std::string>{"unix:/run/gnmr/gnmrd.sock"});
  EXPECT_EQ(a.state_dir, "/var/lib/gnmr");
  // Every other value is the default.
  a.listen = b.listen;
  a.state_dir = b.state_dir;
  a.origin = b.origin;
  EXPECT_EQ(DescribeConfig(a), DescribeConfig(b));
}

TEST(DaemonConfigTest, FileSetsEveryKeyAndRecordsWhere) {
  ScratchDir dir;
  const std::string token_file = dir / "admin.token";
  WriteFileWithMode(token_file, "s3cret-admin\n", 0600);
  WriteFileOrFail(dir / "cert.pem", "x");
  WriteFileOrFail(dir / "key.pem", "x");
  WriteFileOrFail(dir / "ca.pem", "x");
  const std::string path = dir / "gnmrd.yaml";
  WriteFileOrFail(path,
                  "listen: [unix:///run/x/g.sock, 0.0.0.0:50051, '[::1]:0']\n"
                  "unix_socket_mode: 0600\n"
                  "metrics: {listen: off, top_k_units: 3}\n"
                  "state_dir: " +
                      dir.path() +
                      "/state\n"
                      "snapshot_every_steps: 7\n"
                      "step_deadline_ms: 500\n"
                      "max_message_bytes: 8MiB\n"
                      "max_jobs: 2\n"
                      "max_ranks_per_job: 8\n"
                      "max_units_per_job: 100\n"
                      "max_step_jump: 77\n"
                      "max_queued_decision_bytes: 1MiB\n"
                      "max_window_cells_per_job: 1000\n"
                      "max_rank_units_per_job: 2000\n"
                      "max_slots_per_job: 3000\n"
                      "max_o_limit: 16\n"
                      "max_open_step_bytes: 2MiB\n"
                      "memory_budget: 512MiB\n"
                      "max_request_bytes_in_flight: 8MiB\n"
                      "job_tokens:\n"
                      "  job-a: tok-a\n"
                      "  'job:b.1': tok-b\n"
                      "allow_unregistered_jobs: no\n"
                      "admin_token_file: " +
                      token_file +
                      "\n"
                      "tls:\n"
                      "  cert: " +
                      dir.path() +
                      "/cert.pem\n"
                      "  key: " +
                      dir.path() +
                      "/key.pem\n"
                      "  client_ca: " +
                      dir.path() +
                      "/ca.pem\n"
                      "log_level: debug\n"
                      "controller:\n"
                      "  max_o: 2\n"
                      "  actions: [{pattern: '*.fc1', action: clip}]\n");
  StatusOr<LoadedConfig> got = Load({"--config=" + path});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const DaemonConfig& c = got->config;
  EXPECT_EQ(c.listen, (std::vector<std::string>{"unix:/run/x/g.sock", "0.0.0.0:50051", "[::1]:0"}));
  EXPECT_EQ(c.unix_socket_mode, 0600u);
  EXPECT_EQ(c.metrics_listen, "");
  EXPECT_EQ(c.metrics_top_k_units, 3u);
  EXPECT_EQ(c.state_dir, dir.path() + "/state");
  EXPECT_EQ(c.snapshot_every_steps, 7u);
  EXPECT_EQ(c.step_deadline_ms, 500u);
  EXPECT_EQ(c.max_message_bytes, 8u << 20);
  EXPECT_EQ(c.max_jobs, 2u);
  EXPECT_EQ(c.max_ranks_per_job, 8u);
  EXPECT_EQ(c.max_units_per_job, 100u);
  EXPECT_EQ(c.max_step_jump, 77u);
  EXPECT_EQ(c.max_queued_decision_bytes, 1u << 20);
  EXPECT_EQ(c.max_window_cells_per_job, 1000u);
  EXPECT_EQ(c.max_rank_units_per_job, 2000u);
  EXPECT_EQ(c.max_slots_per_job, 3000u);
  EXPECT_EQ(c.max_o_limit, 16u);
  EXPECT_EQ(c.max_open_step_bytes, 2u << 20);
  EXPECT_EQ(c.memory_budget, 512u << 20);
  EXPECT_EQ(c.max_request_bytes_in_flight, 8u << 20);
  EXPECT_EQ(c.job_tokens,
            (std::map<std::string, std::string>{{"job-a", "tok-a"}, {"job:b.1", "tok-b"}}));
  EXPECT_FALSE(c.allow_unregistered_jobs);
  EXPECT_EQ(c.admin_token, "s3cret-admin");
  EXPECT_EQ(c.tls.client_ca_file, dir.path() + "/ca.pem");
  EXPECT_EQ(c.log_level, "debug");
  EXPECT_EQ(c.controller.max_o, 2);
  ASSERT_EQ(c.controller.actions.size(), 1u);
  EXPECT_EQ(c.origin.at("step_deadline_ms"), path + ":6");
  EXPECT_EQ(c.origin.at("metrics.top_k_units"), path + ":3");
  EXPECT_EQ(c.origin.at("tls.key"), path + ":27");
  EXPECT_TRUE(got->warnings.empty()) << got->warnings[0];
  const std::string described = DescribeConfig(c);
  EXPECT_EQ(described.find("tok-a"), std::string::npos) << described;
  EXPECT_EQ(described.find("s3cret"), std::string::npos) << described;
  EXPECT_NE(described.find("step_deadline_ms: 500 (" + path + ":6)"), std::string::npos)
      << described;
  EXPECT_NE(described.find("\n  max_o: 2\n"), std::string::npos) << described;
}

TEST(DaemonConfigTest, FlagsOverrideTheFile) {
  ScratchDir dir;
  const std::string token_file = dir / "t";
  WriteFileWithMode(token_file, "from-file-flag", 0600);
  const std::string path = dir / "gnmrd.yaml";
  WriteFileOrFail(path,
                  "listen: [unix:/a.sock, 127.0.0.1:1]\n"
                  "job_tokens: {j: tok}\n"  // TCP listeners need authentication
                  "step_deadline_ms: 500\n"
                  "snapshot_every_steps: 9\n"
                  "admin_token: in-the-file\n"
                  "log_level: warn\n");
  StatusOr<LoadedConfig> got = Load(
      {"--config", path, "--listen", "unix:/b.sock", "--listen=[::]:7", "--step-deadline-ms=700",
       "--snapshot-every", "3", "--metrics", "off", "--state-dir", "rel/state", "--log-level=error",
       "--admin-token-file", token_file, "--step-deadline-ms", "800"});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const DaemonConfig& c = got->config;
  EXPECT_EQ(c.listen, (std::vector<std::string>{"unix:/b.sock", "[::]:7"}));
  EXPECT_EQ(c.step_deadline_ms, 800u);  // the last one wins
  EXPECT_EQ(c.snapshot_every_steps, 3u);
  EXPECT_EQ(c.metrics_listen, "");
  EXPECT_EQ(c.state_dir[0], '/');  // made absolute
  EXPECT_EQ(c.state_dir.substr(c.state_dir.size() - 10), "/rel/state");
  EXPECT_EQ(c.log_level, "error");
  EXPECT_EQ(c.admin_token, "from-file-flag");
  EXPECT_EQ(c.origin.at("step_deadline_ms"), "--step-deadline-ms");
  EXPECT_EQ(c.origin.at("listen"), "--listen");
}

TEST(DaemonConfigTest, HelpAndVersionReadNothingElse) {
  StatusOr<LoadedConfig> got = Load({"--config", "/does/not/exist", "--help"});
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->show_help);
  got = Load({"--version"});
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->show_version);
  EXPECT_EQ(DaemonVersionText().rfind("gnmrd ", 0), 0u);
  const std::string help = DaemonHelpText("gnmrd");
  for (const char* flag : {"--config FILE", "--listen ADDR", "--metrics ADDR", "--state-dir DIR",
                           "--log-level LEVEL", "--admin-token-file FILE", "--step-deadline-ms MS",
                           "--snapshot-every N", "--help", "--version"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag << "\n" << help;
  }
}

TEST(DaemonConfigTest, WarningsForRiskyButValidSettings) {
  ScratchDir dir;
  const std::string token_file = dir / "t";
  WriteFileWithMode(token_file, "tok", 0644);
  WriteFileOrFail(dir / "c", "x");
  const std::string path = dir / "gnmrd.yaml";
  WriteFileOrFail(path,
                  "metrics: {listen: 0.0.0.0:9464}\n"
                  "allow_unregistered_jobs: false\n"
                  "tls: {cert: " +
                      dir.path() + "/c, key: " + dir.path() +
                      "/c}\n"
                      "admin_token_file: " +
                      token_file + "\n");
  StatusOr<LoadedConfig> got = Load({"--config", path});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->warnings.size(), 4u);
  std::string all;
  for (const std::string& w : got->warnings) all += w + "\n";
  for (const char* part :
       {"readable by other users", "reachable from other", "no job can register", "Unix socket"}) {
    EXPECT_NE(all.find(part), std::string::npos) << part << "\n" << all;
  }
}

TEST(DaemonConfigTest, JobLifecycleKeys) {
  StatusOr<LoadedConfig> got = Load({});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->config.job_idle_expiry_ms, 7ull * 24 * 3600 * 1000);
  EXPECT_EQ(got->config.event_log_max_bytes, 64ull << 20);
  ScratchDir dir;
  const std::string path = dir / "gnmrd.yaml";
  WriteFileOrFail(path, "job_idle_expiry: 36h\nevent_log_max_bytes: 1MiB\n");
  got = Load({"--config", path});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->config.job_idle_expiry_ms, 36ull * 3600 * 1000);
  EXPECT_EQ(got->config.event_log_max_bytes, 1ull << 20);
  got = Load({"--config", path, "--job-idle-expiry", "off", "--event-log-max-bytes", "4096"});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->config.job_idle_expiry_ms, 0u);
  EXPECT_EQ(got->config.event_log_max_bytes, 4096u);
  EXPECT_NE(DescribeConfig(got->config).find("job_idle_expiry: off (--job-idle-expiry)"),
            std::string::npos)
      << DescribeConfig(got->config);
  got = Load({"--job-idle-expiry", "7"});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(),
            "--job-idle-expiry: must be a duration like 7d, 12h, 30m, 45s or 500ms (at most "
            "3650d), or 0/off, got '7'");
  got = Load({"--event-log-max-bytes", "1KiB"});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message().rfind("--event-log-max-bytes: must be a size in [4096, ", 0), 0u)
      << got.status().message();
}

// Live trace recording (docs/replay.md): off by default; the directory is
// made absolute; the flag overrides the file; bad values name their key.
TEST(DaemonConfigTest, TraceKeys) {
  StatusOr<LoadedConfig> got = Load({});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->config.trace_dir, "");
  EXPECT_EQ(got->config.trace_jobs, "*");
  EXPECT_EQ(got->config.trace_max_file_bytes, 256ull << 20);
  EXPECT_EQ(got->config.trace_queue_bytes, 64ull << 20);
  EXPECT_NE(DescribeConfig(got->config).find("trace.dir: off (default)"), std::string::npos);
  ScratchDir dir;
  const std::string path = dir / "gnmrd.yaml";
  WriteFileOrFail(path,
                  "trace:\n  dir: /srv/traces\n  jobs: \"pre-*\"\n  max_file_bytes: 1MiB\n"
                  "  queue_bytes: 8MiB\n");
  got = Load({"--config", path});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->config.trace_dir, "/srv/traces");
  EXPECT_EQ(got->config.trace_jobs, "pre-*");
  EXPECT_EQ(got->config.trace_max_file_bytes, 1ull << 20);
  EXPECT_EQ(got->config.trace_queue_bytes, 8ull << 20);
  got = Load({"--config", path, "--trace-dir", "rel/traces"});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->config.trace_dir.front(), '/');  // made absolute
  EXPECT_EQ(got->config.trace_dir.substr(got->config.trace_dir.size() - 11), "/rel/traces");

  WriteFileOrFail(path, "trace:\n  queue_bytes: 1KiB\n");
  got = Load({"--config", path});
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("trace.queue_bytes"), std::string::npos)
      << got.status().message();
  WriteFileOrFail(path, "trace:\n  directory: /x\n");
  got = Load({"--config", path});
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find(
                "trace.directory: unknown key (known: dir, jobs, max_file_bytes, queue_bytes)"),
            std::string::npos)
      << got.status().message();
  WriteFileOrFail(path, "trace:\n  jobs: \"\"\n");
  EXPECT_FALSE(Load({"--config", path}).ok());
}

}  // namespace
}  // namespace gnmr
