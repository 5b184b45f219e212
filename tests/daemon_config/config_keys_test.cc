// gnmrd's key table (config_keys.h) as the one source of its defaults:
// each key prints what it reads, and --help, the example file and the docs
// table state the defaults DaemonConfig{} holds. That no default is
// written twice in the code is tests/daemon_config/check_defaults_once.py's.
#include "daemon/daemon_config/config_keys.h"

#include <map>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include "daemon/daemon_config/config_file.h"
#include "tests/daemon_config/test_env.h"

namespace gnmr {
namespace {

using daemon_config::DefaultText;
using daemon_config::ScalarKey;
using daemon_config::ScalarKeys;
using testing_util::ReadFileOrEmpty;
using testing_util::ScratchDir;
using testing_util::WriteFileOrFail;

// A config with every scalar key away from its default.
DaemonConfig Changed() {
  ScratchDir dir;
  WriteFileOrFail(dir / "f", "x");
  const std::string file = dir / "f";
  const std::string path = dir / "gnmrd.yaml";
  WriteFileOrFail(path,
                  "unix_socket_mode: 0600\nmetrics: {listen: off, top_k_units: 3}\n"
                  "job_idle_expiry: 90m\nevent_log_max_bytes: 5000\nmax_message_bytes: 8MiB\n"
                  "trace: {dir: t, jobs: 'a-*', queue_bytes: 3GiB}\nstep_deadline_ms: 1500\n"
                  "memory_budget: 1536MiB\nallow_unregistered_jobs: no\nadmin_token: tok\n"
                  "tls: {cert: " +
                      file + ", key: " + file + "}\nlog_level: debug\n");
  DaemonConfig c;
  const Status s = daemon_config::ApplyConfigFile(path, &c);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return c;
}

// format and bind are inverses: a key set to what it prints is unchanged.
TEST(ConfigKeysTest, EveryKeyReadsBackWhatItPrints) {
  for (const DaemonConfig& c : {DaemonConfig{}, Changed()}) {
    for (const ScalarKey& k : ScalarKeys()) {
      const std::string text = k.format(c);
      SCOPED_TRACE(std::string(k.key) + " printed as '" + text + "'");
      if (text.empty()) continue;  // an unset path or token
      DaemonConfig again = c;
      ASSERT_TRUE(k.bind(&again)(text).ok());
      EXPECT_EQ(k.format(again), text);
      again.origin = c.origin;
      EXPECT_EQ(DescribeConfig(again), DescribeConfig(c));
    }
  }
  EXPECT_EQ(daemon_config::FindScalarKey("job_idle_expiry")->format(Changed()), "90m");
  EXPECT_EQ(daemon_config::FindScalarKey("trace.queue_bytes")->format(Changed()), "3GiB");
  EXPECT_EQ(daemon_config::FindScalarKey("memory_budget")->format(Changed()), "1536MiB");
  EXPECT_EQ(daemon_config::FindScalarKey("event_log_max_bytes")->format(Changed()), "5000");
  EXPECT_EQ(daemon_config::FindScalarKey("unix_socket_mode")->format(Changed()), "0600");
}

// --help appends each flag's default, generated from DaemonConfig{}.
TEST(ConfigKeysTest, HelpStatesTheDefaultsDaemonConfigHolds) {
  const std::string help = DaemonHelpText("gnmrd");
  int stated = 0;
  for (const ScalarKey& k : ScalarKeys()) {
    if (k.flag == nullptr || DefaultText(k).empty()) continue;
    const std::string want = "(default " + DefaultText(k) + ")";
    EXPECT_NE(help.find(want), std::string::npos) << k.key << ": " << want << "\n" << help;
    ++stated;
  }
  EXPECT_GE(stated, 9);
  EXPECT_NE(help.find("(default 64MiB)"), std::string::npos) << help;
  EXPECT_NE(help.find("(default 7d)"), std::string::npos) << help;
  EXPECT_NE(help.find("(default 2000)"), std::string::npos) << help;
  EXPECT_NE(help.find("(default " + std::string(daemon_config::kListenMachineDefault) + ")"),
            std::string::npos)
      << help;
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 80u) << line;
}

// deploy/gnmrd.example.yaml states every key with a value by default,
// commented-out blocks (trace:) too: the values must be DaemonConfig{}'s,
// as the key prints them.
TEST(ConfigKeysTest, ExampleFileStatesTheGeneratedDefaults) {
  const std::string text =
      ReadFileOrEmpty(std::string(GNMR_SOURCE_DIR) + "/deploy/gnmrd.example.yaml");
  ASSERT_FALSE(text.empty());
  const std::regex key_line(R"(^#? ?( *)(\w+):[ ]*(.*?)$)");
  std::map<std::string, std::string> stated;
  std::string block;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, key_line)) continue;
    std::string value = std::regex_replace(m[3].str(), std::regex(R"(\s+#.*$)"), "");
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'')) {
      value = value.substr(1, value.size() - 2);
    }
    if (m[1].length() == 0) {
      block = value.empty() ? m[2].str() : "";
      stated[m[2]] = value;
    } else if (!block.empty()) {
      stated[block + "." + m[2].str()] = value;
    }
  }
  const DaemonConfig defaults;
  int compared = 0;
  for (const ScalarKey& k : ScalarKeys()) {
    if (k.machine_default != nullptr || k.secret || k.format(defaults).empty()) continue;
    ASSERT_TRUE(stated.count(k.key)) << k.key << " is not stated in the example file";
    EXPECT_EQ(stated[k.key], k.format(defaults)) << k.key;
    ++compared;
  }
  EXPECT_GE(compared, 25);
}

// deploy/README.md holds the key table between two marker lines.
TEST(ConfigKeysTest, DocsTableIsCurrent) {
  const std::string doc = ReadFileOrEmpty(std::string(GNMR_SOURCE_DIR) + "/deploy/README.md");
  ASSERT_FALSE(doc.empty());
  const std::string begin =
      "<!-- gnmrd keys: begin (daemon_config::DaemonConfigKeysMarkdown) -->\n";
  const std::string end = "<!-- gnmrd keys: end -->\n";
  const size_t b = doc.find(begin);
  const size_t e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "marker missing: " << begin;
  ASSERT_NE(e, std::string::npos) << "marker missing: " << end;
  ASSERT_LT(b, e);
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()),
            daemon_config::DaemonConfigKeysMarkdown())
      << "deploy/README.md's key table is stale: replace it with the table above";
  for (const std::string& key : daemon_config::DaemonConfigKeys()) {
    EXPECT_NE(daemon_config::DaemonConfigKeysMarkdown().find("| `" + key), std::string::npos)
        << key;
  }
}

}  // namespace
}  // namespace gnmr
