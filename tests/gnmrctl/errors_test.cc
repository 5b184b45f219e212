// gnmrctl's failures: an unreachable daemon (exit 1, one clear line) and
// bad command lines (exit 2, before anything is sent).
#include <netinet/in.h>
#include <sys/socket.h>

#include "tests/gnmrctl/ctl_harness.h"

namespace gnmr::testing {
namespace {

// A loopback port that nothing listens on (bound, then closed).
int ClosedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST_F(CtlTest, UnreachableDaemonIsOneLineAndExitOne) {
  const std::string sock = "unix:" + Path("no-such.sock");
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"status"},
                                             {"jobs"},
                                             {"units", "--job", "j"},
                                             {"events", "--job", "j", "--follow"},
                                             {"config", "get", "--job", "j"},
                                             {"config", "set", "--job", "j", "--set", "max_o=2"},
                                             {"release", "--job", "j", "--unit", "u"},
                                             {"export", "--job", "j", "--out", "-"}}) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--target", sock});
    const CtlResult r = Run(a);
    EXPECT_EQ(r.code, 1) << args[0] << "\n" << Show(r);
    EXPECT_EQ(r.err.rfind("gnmrctl: cannot reach gnmrd at " + sock + ": ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("ENOENT"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.out, "") << args[0];
  }
  const std::string tcp = "127.0.0.1:" + std::to_string(ClosedPort());
  CtlResult r = Run({"jobs", "--target", tcp});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err.rfind("gnmrctl: cannot reach gnmrd at " + tcp + ": ", 0), 0u) << r.err;
  // The environment names the target when --target does not.
  r = Run({"status"}, {{"GNMR_TARGET", sock}});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err.rfind("gnmrctl: cannot reach gnmrd at " + sock + ": ", 0), 0u) << r.err;
}

// A socket path without "unix:" is resolved by gRPC as a host name (a DNS
// error); gnmrctl says what was meant.
TEST_F(CtlTest, ASocketPathWithoutUnixGetsAHint) {
  Start();
  const std::string path = unix_.substr(5);
  const CtlResult r = Run({"status", "--target", path, "--timeout", "2"});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_NE(r.err.find("did you mean unix:" + path + "?"), std::string::npos) << r.err;
}

TEST_F(CtlTest, BadCommandLinesExitTwo) {
  Start();
  DriveSpike();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"nosuch"}, "gnmrctl: unknown command 'nosuch'"},
      {{"status", "--bogus"}, "gnmrctl: status: unknown option '--bogus' (see gnmrctl status"},
      {{"status", "extra"}, "gnmrctl: status: unexpected argument 'extra'"},
      {{"units"}, "gnmrctl: units: --job is required (see gnmrctl units --help)"},
      {{"units", "--job", "j", "--top", "0"}, "gnmrctl: units: --top: '0': expected an integer"},
      {{"units", "--job", "j", "--top", "x"}, "--top: 'x'"},
      {{"units", "--job", "j", "--state", "sleeping"}, "--state 'sleeping'"},
      {{"events", "--job", "j", "--since", "1.5"}, "--since '1.5'"},
      {{"events", "--job", "j", "--limit", "0"}, "--limit '0'"},
      {{"release", "--job", "j"}, "--unit is required"},
      {{"config"}, "usage: gnmrctl config get"},
      {{"config", "show", "--job", "j"}, "gnmrctl: config: unknown subcommand 'show'"},
      {{"config", "get"}, "gnmrctl: config get: --job is required"},
      {{"export", "--job", "j"}, "--out is required"},
      {{"export", "--job", "j", "--out", "x", "--format", "xml"}, "--format 'xml'"},
      {{"export", "--job", "j", "--out", "/nonexistent-dir/x.pb"}, "cannot open for writing"},
      {{"import", "--job", "j"}, "--in is required"},
      {{"jobs", "--timeout", "0"}, "--timeout '0'"},
      {{"jobs", "--timeout"}, "needs a value"},
      {{"jobs", "--admin-token", "a", "--admin-token-file", "f"}, "not both"},
      {{"jobs", "--admin-token-file", "/nonexistent/token"}, "cannot read"},
      {{"jobs", "--tls-cert", "c.pem", "--tls-key", "k.pem"}, "need --tls-ca"},
      {{"jobs", "--tls-ca", "/nonexistent/ca.pem"}, "--tls-ca /nonexistent/ca.pem: cannot read"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> a = args;
    if (args[0] != "nosuch" && args[0] != "config") {  // else it fails before the options
      a.insert(a.begin() + 1, {"--target", tcp_});
    }
    const CtlResult r = Run(a);
    EXPECT_EQ(r.code, 2) << args[0] << "\n" << Show(r);
    EXPECT_NE(r.err.find(message), std::string::npos) << Show(r);
    EXPECT_EQ(r.out, "") << args[0];
  }
  // Nothing was changed by any of them.
  EXPECT_EQ(ConfigVia("j").config_version(), 1u);
}

// Connection options before the command, as git and kubectl accept them.
TEST_F(CtlTest, ConnectionOptionsMayComeBeforeTheCommand) {
  Start();
  DriveSpike();
  CtlResult before = Run({"--target", unix_, "--json", "status"});
  ASSERT_EQ(before.code, 0) << Show(before);
  CtlResult after = Run({"status", "--json", "--target", unix_});
  ASSERT_EQ(after.code, 0) << Show(after);
  // The same answer either way (uptime aside).
  EXPECT_NE(before.out.find("\"jobs\":1"), std::string::npos) << before.out;
  EXPECT_NE(after.out.find("\"jobs\":1"), std::string::npos) << after.out;
  CtlResult eq_form = Run({"--target=" + tcp_, "units", "--job", "j", "--top", "1"});
  EXPECT_EQ(eq_form.code, 0) << Show(eq_form);

  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--target"}, "option '--target' needs a value"},
      {{"--target", tcp_}, "options given but no command"},
      {{"--bogus", "status"}, "unknown option '--bogus' before the command"},
      {{"--target", tcp_, "nosuch"}, "unknown command 'nosuch'"},
      // Given twice: the command's own parser sees both and keeps the last.
      {{"--timeout", "0", "jobs", "--target", tcp_}, "--timeout '0'"},
  };
  for (const auto& [args, message] : cases) {
    const CtlResult r = Run(args);
    EXPECT_EQ(r.code, 2) << Show(r);
    EXPECT_NE(r.err.find(message), std::string::npos) << Show(r);
  }
}

TEST_F(CtlTest, BashCompletionScriptParsesAndNamesTheCommands) {
  CtlResult r = Run({"completion", "bash"});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_NE(r.out.find("complete -o default -F _gnmrctl gnmrctl"), std::string::npos) << r.out;
  for (const char* command : {"status", "jobs", "units", "replay", "completion"}) {
    EXPECT_NE(r.out.find(std::string(command) + " "), std::string::npos) << command;
  }
  EXPECT_EQ(Run({"completion", "fish"}).code, 2);
}

}  // namespace
}  // namespace gnmr::testing
