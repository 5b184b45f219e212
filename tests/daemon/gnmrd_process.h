// GnmrdProcess: the real gnmrd binary as a child process, for tests that
// need process-level behaviour (kill -9, restart, signals).
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

#include "gnmr/v1/gnmr.grpc.pb.h"

namespace gnmr::testing {

// The gnmrd binary under test ($GNMRD_PATH overrides the build's: tests
// carried to another machine, scripts/gpu_check.sh).
inline std::string GnmrdPath() {
  const char* env_path = std::getenv("GNMRD_PATH");
  return env_path != nullptr && *env_path != '\0' ? env_path : GNMRD_PATH;
}

// Forks and execs `args` (argv[0] is the binary) with stdout and stderr
// appended to `log` and, when `uid` >= 0 (root only), as that user and
// group, and with `nofile` as its RLIMIT_NOFILE when given (as `prlimit
// --nofile=S:H` would). Everything is built before fork: after fork in a
// multi-threaded process only async-signal-safe calls are allowed.
inline pid_t SpawnLogged(std::vector<std::string> args, const std::string& log, int uid = -1,
                         const struct rlimit* nofile = nullptr) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    if (uid >= 0 && (::setgroups(0, nullptr) != 0 || ::setgid(static_cast<gid_t>(uid)) != 0 ||
                     ::setuid(static_cast<uid_t>(uid)) != 0)) {
      ::_exit(126);
    }
    if (nofile != nullptr && ::setrlimit(RLIMIT_NOFILE, nofile) != 0) ::_exit(125);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// Waits until gnmrd (process `pid`) answers GetStatus on `channel`: ready
// means an RPC is answered (a connection alone could be a stale one to a
// previous process). False if it exited (then reaped) or `limit` passed.
inline bool WaitServing(pid_t pid, const std::shared_ptr<grpc::Channel>& channel,
                        std::chrono::seconds limit) {
  auto admin = v1::Admin::NewStub(channel);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return false;  // exited
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    v1::GetStatusResponse resp;
    if (admin->GetStatus(&ctx, {}, &resp).ok()) return true;
  }
  return false;
}

inline std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A field of /proc/<pid>/status in KiB ("VmHWM:", "VmRSS:"); 0 if absent.
inline uint64_t ProcStatusKib(pid_t pid, const std::string& field) {
  std::istringstream in(ReadText("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(field.size()));
  }
  return 0;
}

// A process run expected to end by itself (a gnmrd start-up error, a
// gnmrctl command): its wait status and output.
struct GnmrdExit {
  int status = -1;  // as waitpid reports it; -1 if it had to be killed
  std::string output;
  bool exited_with(int code) const { return WIFEXITED(status) && WEXITSTATUS(status) == code; }
};

// Runs `args` (argv[0] is the binary) until it exits (killed after
// `timeout`: then status -1). `scratch` is a directory for the output file.
inline GnmrdExit RunToExit(const std::vector<std::string>& args, const std::string& scratch,
                           int uid = -1, std::chrono::seconds timeout = std::chrono::seconds(20)) {
  const std::string log = scratch + "/run-to-exit.log";
  ::unlink(log.c_str());
  const pid_t pid = SpawnLogged(args, log, uid);
  GnmrdExit out;
  const auto end = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      out.output = ReadText(log);
      return out;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  out.status = status;
  out.output = ReadText(log);
  return out;
}

// Runs gnmrd with `flags` until it exits (RunToExit).
inline GnmrdExit RunGnmrdToExit(const std::vector<std::string>& flags, const std::string& scratch,
                                int uid = -1,
                                std::chrono::seconds timeout = std::chrono::seconds(20)) {
  std::vector<std::string> args = {GnmrdPath()};
  args.insert(args.end(), flags.begin(), flags.end());
  return RunToExit(args, scratch, uid, timeout);
}

// Sends `sig` to the child *pid and reports whether it still runs `wait`
// later; if not, it is reaped and *pid set to -1.
inline bool ChildSurvivesSignal(pid_t* pid, int sig, std::chrono::milliseconds wait) {
  if (*pid <= 0) return false;
  ::kill(*pid, sig);
  std::this_thread::sleep_for(wait);
  if (::waitpid(*pid, nullptr, WNOHANG) == *pid) {
    *pid = -1;
    return false;
  }
  return true;
}

class GnmrdProcess {
 public:
  // A fresh private directory for the socket and the state.
  GnmrdProcess() {
    char tmpl[] = "/tmp/gnmrd-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  ~GnmrdProcess() {
    Kill(SIGKILL);
    std::system(("rm -rf " + dir_).c_str());
  }

  std::string dir() const { return dir_; }
  std::string target() const { return "unix:" + socket_path(); }
  std::string socket_path() const { return dir_ + "/gnmrd.sock"; }
  std::string state_dir() const { return dir_ + "/state"; }
  pid_t pid() const { return pid_; }
  // The RLIMIT_NOFILE of later starts (soft, hard), as `prlimit --nofile`.
  void set_nofile_limit(rlim_t soft, rlim_t hard) {
    nofile_ = {soft, hard};
    nofile_set_ = true;
  }
  // Everything the daemon wrote to stdout and stderr, over all its starts.
  std::string log() const { return ReadText(dir_ + "/gnmrd.log"); }

  // Starts gnmrd and waits until it accepts connections.
  bool Start(std::vector<std::string> extra = {}, const std::string& log_level = "warn") {
    std::vector<std::string> args = {GnmrdPath(),   "--listen",    target(),
                                     "--state-dir", state_dir(),   "--metrics",
                                     "off",         "--log-level", log_level};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = SpawnLogged(args, dir_ + "/gnmrd.log", -1, nofile_set_ ? &nofile_ : nullptr);
    if (WaitServing(pid_, Channel(), std::chrono::seconds(10))) return true;
    if (::kill(pid_, 0) != 0) pid_ = -1;  // exited (and reaped): no retry
    return false;
  }

  // Sends `sig` and waits for the process; returns its exit status.
  int Kill(int sig) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

  // Sends `sig` and reports whether the process is still running after
  // `wait` (for signals that must not stop it).
  bool SurvivesSignal(int sig, std::chrono::milliseconds wait = std::chrono::milliseconds(500)) {
    return ChildSurvivesSignal(&pid_, sig, wait);
  }

  // A channel with its own subchannel pool: never shares a connection made
  // to an earlier gnmrd process at the same address.
  std::shared_ptr<grpc::Channel> Channel() const {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(target(), grpc::InsecureChannelCredentials(), args);
  }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  struct rlimit nofile_ = {};
  bool nofile_set_ = false;
};

}  // namespace gnmr::testing
