// gnmrd's config and TCP listeners (deploy/README.md, "Security model": shipped
// configs are safe as shipped): a TCP listener without job tokens or mutual TLS
// is refused unless insecure_tcp opts in; job tokens and the read token can
// come from files (Kubernetes Secrets); risky but valid settings are warned
// about.
#include <gtest/gtest.h>

#include "daemon/daemon_config/daemon_config.h"
#include "tests/daemon_config/test_env.h"

namespace gnmr {
namespace {

using testing_util::LoadWith;
using testing_util::ScratchDir;
using testing_util::WriteFileOrFail;
using testing_util::WriteFileWithMode;

std::string AllWarnings(const LoadedConfig& c) {
  std::string all;
  for (const std::string& w : c.warnings) all += w + "\n";
  return all;
}

TEST(TcpSecurityTest, TcpWithoutTokensOrMutualTlsIsRefused) {
  StatusOr<LoadedConfig> got = LoadWith({"--listen", "unix:/a.sock", "--listen", "0.0.0.0:7070"});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(got.status().message().rfind("--listen: 0.0.0.0:7070 is TCP without authentication: "
                                         "set job_tokens",
                                         0),
            0u)
      << got.status().message();
  // A Unix socket alone needs nothing.
  EXPECT_TRUE(LoadWith({"--listen", "unix:/a.sock"}).ok());
}

TEST(TcpSecurityTest, JobTokensMutualTlsOrAnExplicitOptInAllowTcp) {
  ScratchDir dir;
  WriteFileOrFail(dir / "x.pem", "x");
  const std::string tls = "tls: {cert: " + (dir / "x.pem") + ", key: " + (dir / "x.pem");
  struct Case {
    std::string yaml, warning;
  };
  const std::vector<Case> cases = {
      {"job_tokens: {j: t}\n", "without TLS: job tokens cross the network in plaintext"},
      {tls + ", client_ca: " + (dir / "x.pem") + "}\n", ""},
      {"insecure_tcp: true\n",
       "insecure_tcp: anyone who reaches 0.0.0.0:7070 may register jobs and read every job"},
  };
  for (const Case& c : cases) {
    WriteFileOrFail(dir / "g.yaml", "listen: [0.0.0.0:7070]\n" + c.yaml);
    StatusOr<LoadedConfig> got = LoadWith({"--config", dir / "g.yaml"});
    ASSERT_TRUE(got.ok()) << c.yaml << got.status().ToString();
    if (!c.warning.empty()) {
      EXPECT_NE(AllWarnings(*got).find(c.warning), std::string::npos) << AllWarnings(*got);
    }
  }
  // Server-only TLS is not peer authentication: still refused.
  WriteFileOrFail(dir / "g.yaml", "listen: [0.0.0.0:7070]\n" + tls + "}\n");
  EXPECT_FALSE(LoadWith({"--config", dir / "g.yaml"}).ok());
}

TEST(TcpSecurityTest, JobTokensAndReadTokenFromFiles) {
  ScratchDir dir;
  WriteFileWithMode(dir / "jobs.yaml", "llama-7b-run3: s3cret-a\n'moe:1': s3cret-b\n", 0600);
  WriteFileWithMode(dir / "read.token", "r3ad\n", 0600);
  WriteFileOrFail(dir / "g.yaml",
                  "listen: [unix:/a.sock, 0.0.0.0:7070]\n"
                  "job_tokens_file: " +
                      (dir / "jobs.yaml") +
                      "\n"
                      "allow_unregistered_jobs: false\n"
                      "read_token_file: " +
                      (dir / "read.token") + "\n");
  StatusOr<LoadedConfig> got = LoadWith({"--config", dir / "g.yaml"});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->config.job_tokens, (std::map<std::string, std::string>{
                                        {"llama-7b-run3", "s3cret-a"}, {"moe:1", "s3cret-b"}}));
  EXPECT_EQ(got->config.read_token, "r3ad");
  const std::string described = DescribeConfig(got->config);
  EXPECT_EQ(described.find("s3cret"), std::string::npos) << described;
  EXPECT_EQ(described.find("r3ad"), std::string::npos) << described;
  EXPECT_EQ(AllWarnings(*got).find("Admin reads over TCP"), std::string::npos);

  // The flag replaces the file's tokens.
  WriteFileWithMode(dir / "other.yaml", "other: tok\n", 0600);
  WriteFileOrFail(dir / "g2.yaml", "listen: [0.0.0.0:7070]\njob_tokens: {j: t}\n");
  got = LoadWith({"--config", dir / "g2.yaml", "--job-tokens-file", dir / "other.yaml"});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->config.job_tokens, (std::map<std::string, std::string>{{"other", "tok"}}));
}

TEST(TcpSecurityTest, BadJobTokensFilesNameTheFileAndLine) {
  ScratchDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "names no job"},
      {"ok: t\n../x: t\n", "jobs.yaml:2: job_tokens: job id"},
      {"a: 'has space'\n", "jobs.yaml:1: job_tokens.a: "},
      {"- a\n", "must map job ids to tokens"},
      {"a: [t\n", "invalid YAML"},
  };
  for (const auto& [text, needle] : cases) {
    WriteFileWithMode(dir / "jobs.yaml", text, 0600);
    StatusOr<LoadedConfig> got = LoadWith({"--job-tokens-file", dir / "jobs.yaml"});
    ASSERT_FALSE(got.ok()) << text;
    EXPECT_EQ(got.status().message().rfind("--job-tokens-file: ", 0), 0u) << got.status().message();
    EXPECT_NE(got.status().message().find(needle), std::string::npos)
        << got.status().message() << "\nwanted: " << needle;
  }
  WriteFileWithMode(dir / "jobs.yaml", "a: t\n", 0600);
  WriteFileOrFail(dir / "g.yaml",
                  "job_tokens: {b: t}\njob_tokens_file: " + (dir / "jobs.yaml") + "\n");
  StatusOr<LoadedConfig> got = LoadWith({"--config", dir / "g.yaml"});
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find(":2: job_tokens_file: job_tokens is also set"),
            std::string::npos)
      << got.status().message();
}

}  // namespace
}  // namespace gnmr
