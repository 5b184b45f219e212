// GnmrdProcess: the real gnmrd binary as a child process, for tests that
// need process-level behaviour (kill -9, restart, signals).
#pragma once

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gnmr/v1/gnmr.grpc.pb.h"

namespace gnmr::testing {

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

  std::string target() const { return "unix:" + dir_ + "/gnmrd.sock"; }
  std::string state_dir() const { return dir_ + "/state"; }

  // Starts gnmrd and waits until it accepts connections.
  bool Start(std::vector<std::string> extra = {}) {
    // $GNMRD_PATH overrides the build's gnmrd (tests carried to another
    // machine, scripts/gpu_check.sh).
    const char* env_path = std::getenv("GNMRD_PATH");
    const std::string path = env_path != nullptr && *env_path != '\0' ? env_path : GNMRD_PATH;
    std::vector<std::string> args = {path, "--listen", target(), "--state-dir", state_dir(),
                                     "--metrics", "off", "--log-level", "warn"};
    args.insert(args.end(), extra.begin(), extra.end());
    // Everything the child needs is built before fork: after fork in a
    // multi-threaded process only async-signal-safe calls are allowed.
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    // Ready means an RPC is answered (a connection alone could be a stale
    // one to the previous process).
    auto admin = v1::Admin::NewStub(Channel());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      grpc::ClientContext ctx;
      ctx.set_wait_for_ready(true);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
      v1::GetStatusResponse resp;
      if (admin->GetStatus(&ctx, {}, &resp).ok()) return true;
    }
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
};

}  // namespace gnmr::testing
