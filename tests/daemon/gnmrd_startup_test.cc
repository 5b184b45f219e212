// The real gnmrd binary at start-up: a listener or state dir that cannot
// work is exit code 1 with a sentence naming the address (or directory) and
// why, never a crash; one daemon per state dir and per socket.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cstdio>

#include <gtest/gtest.h>

#include "tests/daemon/gnmrd_process.h"

namespace gnmr::testing {
namespace {

constexpr int kNobody = 65534;

class GnmrdStartupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gnmrd-startup-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fputs(text.c_str(), f);
    std::fclose(f);
    return path;
  }
  // Flags for a daemon in dir_: Unix socket, state, no metrics, and a
  // config with a job token so that a TCP listener is allowed.
  std::vector<std::string> Flags(std::vector<std::string> listen, const std::string& extra = "") {
    std::vector<std::string> f = {
        "--config",    Write("gnmrd.yaml", "job_tokens:\n  j: tok\n" + extra),
        "--state-dir", dir_ + "/state",
        "--metrics",   "off"};
    for (const std::string& l : listen) f.insert(f.end(), {"--listen", l});
    return f;
  }
  // A TCP port held by this test (bound and listening).
  int HeldPort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(fd, 4), 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    fds_.push_back(fd);
    return ntohs(a.sin_port);
  }
  // A Unix socket at `path`, listening if `listen`, else left stale.
  int UnixSocket(const std::string& path, bool listen) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    if (listen) {
      EXPECT_EQ(::listen(fd, 4), 0);
      fds_.push_back(fd);
    } else {
      ::close(fd);  // the file stays: a stale socket
    }
    return fd;
  }
  static ino_t Inode(const std::string& path) {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0 ? st.st_ino : 0;
  }
  // The uid to run gnmrd as for permission tests: nobody when root (root
  // may write anywhere), else -1 (this user, for whom 0555 is read-only).
  int UnprivilegedUid() { return ::geteuid() == 0 ? kNobody : -1; }

  std::string dir_;
  std::vector<int> fds_;
};

TEST_F(GnmrdStartupTest, PortInUseIsExitOneWithTheAddressNotACrash) {
  const std::string addr = "127.0.0.1:" + std::to_string(HeldPort());
  GnmrdExit r = RunGnmrdToExit(Flags({"unix:" + dir_ + "/g.sock", addr}), dir_);
  EXPECT_TRUE(r.exited_with(1)) << "status " << r.status << "\n" << r.output;
  EXPECT_NE(r.output.find("gnmrd: cannot listen on " + addr + ": the port is in use"),
            std::string::npos)
      << r.output;
}

TEST_F(GnmrdStartupTest, AddressOfAnotherMachineIsExitOne) {
  GnmrdExit r = RunGnmrdToExit(Flags({"192.0.2.1:7070"}), dir_);  // TEST-NET-1
  EXPECT_TRUE(r.exited_with(1)) << "status " << r.status << "\n" << r.output;
  EXPECT_NE(r.output.find("cannot listen on 192.0.2.1:7070: '192.0.2.1' is not an address of "
                          "this machine"),
            std::string::npos)
      << r.output;
}

TEST_F(GnmrdStartupTest, SocketInUnwritableDirectoryIsExitOne) {
  const std::string ro = dir_ + "/ro";
  ASSERT_EQ(::mkdir(ro.c_str(), 0555), 0);
  const std::string state = dir_ + "/state";
  ASSERT_EQ(::mkdir(state.c_str(), 0700), 0);
  const int uid = UnprivilegedUid();
  if (uid >= 0) {
    ASSERT_EQ(::chown(state.c_str(), uid, uid), 0);
    ASSERT_EQ(::chown(Write("gnmrd.yaml", "").c_str(), uid, uid), 0);
  }
  GnmrdExit r = RunGnmrdToExit(
      {"--listen", "unix:" + ro + "/g.sock", "--state-dir", state, "--metrics", "off"}, dir_, uid);
  EXPECT_TRUE(r.exited_with(1)) << "status " << r.status << "\n" << r.output;
  EXPECT_NE(r.output.find("cannot listen on unix:" + ro + "/g.sock: cannot create the socket in " +
                          ro + ": Permission denied"),
            std::string::npos)
      << r.output;
}

TEST_F(GnmrdStartupTest, ReadOnlyStateDirIsExitOneAtStart) {
  const std::string state = dir_ + "/state";
  ASSERT_EQ(::mkdir(state.c_str(), 0555), 0);
  GnmrdExit r = RunGnmrdToExit(
      {"--listen", "unix:" + dir_ + "/g.sock", "--state-dir", state, "--metrics", "off"}, dir_,
      UnprivilegedUid());
  EXPECT_TRUE(r.exited_with(1)) << "status " << r.status << "\n" << r.output;
  EXPECT_NE(r.output.find("gnmrd: state dir " + state + " is not writable: Permission denied"),
            std::string::npos)
      << r.output;
}

TEST_F(GnmrdStartupTest, TlsKeyNotMatchingOrNotPemIsExitOne) {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl";
  const std::string d = "cd '" + dir_ + "' && ";
  for (const char* who : {"a", "b"}) {
    ASSERT_EQ(std::system((d +
                           "openssl req -x509 -newkey ec -pkeyopt "
                           "ec_paramgen_curve:prime256v1 -nodes -keyout " +
                           who + ".key -out " + who + ".pem -days 2 -subj /CN=" + who +
                           " >/dev/null 2>&1")
                              .c_str()),
              0);
  }
  const std::string junk = Write("junk.pem", "not a certificate\n");
  struct Case {
    std::string cert, key, expected;
  };
  const std::vector<Case> cases = {
      {dir_ + "/a.pem", dir_ + "/b.key",
       "tls.key " + dir_ + "/b.key does not belong to the certificate in tls.cert " + dir_ +
           "/a.pem"},
      {junk, dir_ + "/a.key", "tls.cert " + junk + ": no PEM certificate in it"},
      {dir_ + "/a.pem", junk, "tls.key " + junk + ": no unencrypted PEM private key in it"},
  };
  for (const Case& c : cases) {
    GnmrdExit r = RunGnmrdToExit(
        Flags({"127.0.0.1:0"}, "tls:\n  cert: " + c.cert + "\n  key: " + c.key + "\n"), dir_);
    EXPECT_TRUE(r.exited_with(1)) << "status " << r.status << "\n" << r.output;
    EXPECT_NE(r.output.find("gnmrd: " + c.expected), std::string::npos) << r.output;
  }
}

TEST_F(GnmrdStartupTest, SecondDaemonOnTheStateDirIsRefusedAndTheFirstServesOn) {
  GnmrdProcess first;
  ASSERT_TRUE(first.Start()) << first.log();
  GnmrdExit r = RunGnmrdToExit({"--listen", "unix:" + dir_ + "/second.sock", "--state-dir",
                                first.state_dir(), "--metrics", "off"},
                               dir_);
  EXPECT_TRUE(r.exited_with(1)) << "status " << r.status << "\n" << r.output;
  EXPECT_NE(r.output.find("gnmrd: state dir " + first.state_dir() + " is locked by pid " +
                          std::to_string(first.pid())),
            std::string::npos)
      << r.output;
  EXPECT_EQ(Inode(dir_ + "/second.sock"), 0u);  // it never listened
  auto admin = v1::Admin::NewStub(first.Channel());
  grpc::ClientContext ctx;
  v1::GetStatusResponse status;
  EXPECT_TRUE(admin->GetStatus(&ctx, {}, &status).ok());
  EXPECT_EQ(first.Kill(SIGTERM), 0) << first.log();
}

TEST_F(GnmrdStartupTest, LiveSocketIsNotTakenOverAndStaleOneIsReplaced) {
  GnmrdProcess first;
  ASSERT_TRUE(first.Start()) << first.log();
  const ino_t before = Inode(first.socket_path());
  GnmrdExit r = RunGnmrdToExit(
      {"--listen", first.target(), "--state-dir", dir_ + "/state", "--metrics", "off"}, dir_);
  EXPECT_TRUE(r.exited_with(1)) << "status " << r.status << "\n" << r.output;
  EXPECT_NE(
      r.output.find("cannot listen on " + first.target() + ": another process is listening on it"),
      std::string::npos)
      << r.output;
  EXPECT_EQ(Inode(first.socket_path()), before);  // still the first daemon's socket
  EXPECT_EQ(first.Kill(SIGTERM), 0) << first.log();

  // A socket nobody listens on (left by a kill -9) is replaced.
  UnixSocket(first.socket_path(), /*listen=*/false);
  ASSERT_TRUE(first.Start()) << first.log();
  EXPECT_EQ(first.Kill(SIGTERM), 0) << first.log();
}

TEST_F(GnmrdStartupTest, ShutdownLeavesASocketThatIsNotItsOwn) {
  GnmrdProcess first;
  ASSERT_TRUE(first.Start()) << first.log();
  // Someone else now owns the path (an operator removed the socket and
  // another server took it): gnmrd must not unlink it when it stops.
  ASSERT_EQ(::unlink(first.socket_path().c_str()), 0);
  UnixSocket(first.socket_path(), /*listen=*/true);
  const ino_t theirs = Inode(first.socket_path());
  ASSERT_NE(theirs, 0u);
  EXPECT_EQ(first.Kill(SIGTERM), 0) << first.log();
  EXPECT_EQ(Inode(first.socket_path()), theirs);
}

}  // namespace
}  // namespace gnmr::testing
