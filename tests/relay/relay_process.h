// RelayProcess: the real gnmr-relay binary as a child process, beside a
// real gnmrd (tests/daemon/gnmrd_process.h), for what needs processes:
// signals, message bounds end to end, gnmrd restarts.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/daemon/gnmrd_process.h"

namespace gnmr::testing {

// The gnmr-relay binary under test ($GNMR_RELAY_PATH overrides the build's).
inline std::string RelayPath() {
  const char* env_path = std::getenv("GNMR_RELAY_PATH");
  return env_path != nullptr && *env_path != '\0' ? env_path : GNMR_RELAY_PATH;
}

inline bool IsSocket(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

class RelayProcess {
 public:
  // `dir`: where its socket and log go.
  explicit RelayProcess(std::string dir) : dir_(std::move(dir)) {}
  ~RelayProcess() { Kill(SIGKILL); }

  std::string socket_path() const { return dir_ + "/relay.sock"; }
  std::string target() const { return "unix:" + socket_path(); }
  std::string log() const { return ReadText(dir_ + "/relay.log"); }
  pid_t pid() const { return pid_; }

  // Starts gnmr-relay towards `upstream` and waits for its socket.
  bool Start(const std::string& upstream, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {RelayPath(), "--listen", target(), "--upstream", upstream};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = SpawnLogged(args, dir_ + "/relay.log");
    for (int i = 0; i < 500; ++i) {
      if (IsSocket(socket_path())) return true;
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  // Sends `sig` and waits up to `limit` for the process; its wait status,
  // or -1 if it was still running (then killed).
  int Stop(int sig, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    const auto end = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > end) {
        Kill(SIGKILL);
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    return status;
  }

  // Sends `sig`; true if the process still runs `wait` later.
  bool SurvivesSignal(int sig, std::chrono::milliseconds wait = std::chrono::milliseconds(500)) {
    return ChildSurvivesSignal(&pid_, sig, wait);
  }

  void Kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  std::string dir_;
  pid_t pid_ = -1;
};

}  // namespace gnmr::testing
