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
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/daemon/gnmrd_process.h"
#include "tests/daemon/raw_rank.h"
#include "tests/daemon/test_daemon.h"

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

  // Sends `sig` (none if 0) and waits up to `limit` for the process; its
  // wait status, or -1 if it was still running (then killed).
  int Stop(int sig, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    if (pid_ <= 0) return -1;
    if (sig != 0) ::kill(pid_, sig);
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

// A real gnmrd and a real gnmr-relay (each started by the test), and raw
// ranks through the relay.
class RelayProcessTest : public ::testing::Test {
 protected:
  // Starts gnmrd on its Unix socket with `config` (YAML) as its config
  // file, if any.
  bool StartGnmrd(const std::string& config = "", std::vector<std::string> extra = {}) {
    if (!config.empty()) {
      const std::string path = gnmrd_.dir() + "/gnmrd.yaml";
      std::ofstream(path) << config;
      extra.insert(extra.end(), {"--config", path});
    }
    return gnmrd_.Start(extra);
  }
  void StartRelay(std::vector<std::string> extra = {}) {
    ASSERT_TRUE(relay_.Start(gnmrd_.target(), extra)) << relay_.log();
  }
  std::shared_ptr<grpc::Channel> Relay() {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxSendMessageSize(-1);
    return grpc::CreateCustomChannel(relay_.target(), grpc::InsecureChannelCredentials(), args);
  }
  // Rank `rank` of `job` (world `world`) through the relay, registered,
  // its stream open and its hello sent.
  RawRank* Attach(const std::string& job, uint32_t rank, uint32_t world,
                  const std::string& token = "") {
    ranks_.push_back(std::make_unique<RawRank>(Relay(), job, rank, world, token));
    RawRank* r = ranks_.back().get();
    const v1::ControllerConfig config = FastConfig();
    // The relay may still be reaching gnmrd (a loaded sanitizer run took
    // over 5 s once): retry what a real client would retry, for up to 30 s.
    grpc::Status registered;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    do {
      registered = r->Register({{"a"}, {"b"}}, nullptr, &config);
    } while (!registered.ok() &&
             (registered.error_code() == grpc::StatusCode::UNAVAILABLE ||
              registered.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) &&
             std::chrono::steady_clock::now() < give_up);
    EXPECT_TRUE(registered.ok()) << registered.error_message();
    r->Open();
    EXPECT_TRUE(r->WaitMessages(1)) << "no GenerationStart for " << job << " rank " << rank;
    return r;
  }

  GnmrdProcess gnmrd_;
  RelayProcess relay_{gnmrd_.dir()};
  std::vector<std::unique_ptr<RawRank>> ranks_;
};

}  // namespace gnmr::testing
