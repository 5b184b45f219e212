// Test harness for gnmrctl's admin commands: runs the real binary as a
// subprocess (stdout, stderr and exit code captured) against an in-process
// daemon on loopback TCP and a Unix socket, with one job "j" driven by a
// RawRank so that a unit is in recovery and another was denied.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/daemon/test_daemon.h"

extern char** environ;

namespace gnmr::testing {

struct CtlResult {
  int code = -1;  // exit code; -1 if killed or timed out
  std::string out, err;
};

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Lines of `text` containing `needle`.
inline std::vector<std::string> LinesWith(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos) out.push_back(line);
  }
  return out;
}

// Whitespace-separated fields of a table line.
inline std::vector<std::string> Fields(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string f; in >> f;) out.push_back(f);
  return out;
}

// The job's unit layout and the spike driven through it.
inline const std::vector<RawRank::Unit>& TestUnits() {
  static const std::vector<RawRank::Unit> units = {
      {"layers.0.attn"}, {"layers.0.mlp"}, {"layers.1.attn"}, {"layers.1.mlp"}};
  return units;
}

class CtlTest : public ::testing::Test {
 protected:
  // A fresh directory for the test's files.
  void SetUp() override {
    static int counter = 0;
    const std::string id = std::to_string(::getpid()) + "-" + std::to_string(counter++);
    dir_ = ::testing::TempDir() + "/gnmrctl-" + id;
    socket_ = "/tmp/gnmrctl-test-" + id + ".sock";
    ASSERT_EQ(std::system(("rm -rf '" + dir_ + "' && mkdir -p '" + dir_ + "'").c_str()), 0);
  }

  // Starts the daemon (events served from the listener, as the store does).
  void Start(DaemonOptions opts = {}) {
    if (opts.listen.empty()) opts.listen = {"127.0.0.1:0", "unix:" + socket_};
    // The views and mutations are tested over loopback TCP without job
    // tokens: this daemon opts in to trusting TCP peers, unless a test asks
    // for the production rules (insecure_tcp_ false).
    opts.insecure_tcp = insecure_tcp_;
    opts.registry.job.aggregation.deadline = std::chrono::milliseconds(300);
    AdminContext admin;
    admin.version = "test-1.2";
    admin.admin_token = admin_token_;
    admin.state_dir = "/var/lib/gnmr-test";
    admin.events = [this](const std::string& job, int64_t since, uint32_t limit) {
      std::vector<v1::Event> out;
      for (const v1::Event& e : listener_.EventsOf(job)) {
        if (e.observed_step() >= since) out.push_back(e);
      }
      if (out.size() > limit) out.erase(out.begin(), out.end() - limit);  // newest
      return out;
    };
    auto d = Daemon::Start(opts, &listener_, admin);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    daemon_ = std::move(d).value();
    tcp_ = daemon_->bound()[0];
    unix_ = daemon_->bound().size() > 1 ? daemon_->bound()[1] : "";
  }

  // Job "j": 4 units, max_o 1, lock 5 steps, lag 1. Steps 0..9 are calm; at
  // step 10 layers.1.mlp (GNMR 20) and layers.1.attn (GNMR 10) spike: the
  // first is admitted (since 11, until 16), the second denied.
  void DriveSpike() {
    rank_ = std::make_unique<RawRank>(Channel(), "j", 0, 1);
    const v1::ControllerConfig cfg = FastConfig(/*max_o=*/1);
    ASSERT_TRUE(rank_->Register(TestUnits(), nullptr, &cfg).ok());
    rank_->Open();
    for (int64_t step = 0; step <= 10; ++step) {
      const bool spike = step == 10;
      const v1::Decision d =
          Step(rank_.get(), step, {1.0, 1.0, spike ? 100.0 : 1.0, spike ? 400.0 : 1.0});
      ASSERT_EQ(d.admitted_size(), spike ? 1 : 0);
    }
  }

  // Sends one step and waits for its decision. One step at a time: gnmrd's
  // SessionSink::WriteDone can start a second write when a decision is
  // queued while it finishes the previous one (see the report), which
  // aborts or stalls the daemon; pacing keeps the tests clear of that race.
  static v1::Decision Step(RawRank* rank, int64_t step, const std::vector<double>& sumsq) {
    v1::Decision d;
    EXPECT_TRUE(rank->SendStats(step, sumsq));
    EXPECT_TRUE(rank->WaitDecision(step, &d)) << "step " << step;
    return d;
  }

  void TearDown() override {
    rank_.reset();
    if (daemon_) daemon_->Shutdown(std::chrono::milliseconds(100));
    if (!dir_.empty()) (void)std::system(("rm -rf '" + dir_ + "'").c_str());
  }

  std::shared_ptr<grpc::Channel> Channel() {
    return grpc::CreateChannel(tcp_, grpc::InsecureChannelCredentials());
  }
  std::unique_ptr<v1::Admin::Stub> Admin() { return v1::Admin::NewStub(Channel()); }
  v1::ControllerState ExportVia(const std::string& job) {
    grpc::ClientContext ctx;
    v1::ExportStateRequest req;
    req.set_job_id(job);
    v1::ExportStateResponse resp;
    EXPECT_TRUE(Admin()->ExportState(&ctx, req, &resp).ok());
    return resp.state();
  }
  v1::GetConfigResponse ConfigVia(const std::string& job) {
    grpc::ClientContext ctx;
    v1::GetConfigRequest req;
    req.set_job_id(job);
    v1::GetConfigResponse resp;
    EXPECT_TRUE(Admin()->GetConfig(&ctx, req, &resp).ok());
    return resp;
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(Path(name), std::ios::binary) << text;
    return Path(name);
  }

  // Starts `gnmrctl ARGS` with stdout/stderr to files. The environment is
  // this process's without GNMR_TARGET and GNMR_ADMIN_TOKEN, plus `env`.
  pid_t Spawn(const std::vector<std::string>& args, const std::string& out, const std::string& err,
              const std::map<std::string, std::string>& env = {}) {
    std::vector<std::string> argv_s = {GNMRCTL_PATH};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      if (kv.rfind("GNMR_TARGET=", 0) == 0 || kv.rfind("GNMR_ADMIN_TOKEN=", 0) == 0) continue;
      env_s.push_back(kv);
    }
    for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (std::string& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    EXPECT_EQ(rc, 0) << "posix_spawn " << GNMRCTL_PATH;
    return rc == 0 ? pid : -1;
  }

  // Waits for `pid` (killing it after `timeout`); its exit code or -1.
  static int Wait(pid_t pid, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    if (pid < 0) return -1;
    const auto end = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > end) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        ADD_FAILURE() << "gnmrctl did not finish in time";
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // Runs `gnmrctl ARGS` to completion.
  CtlResult Run(const std::vector<std::string>& args,
                const std::map<std::string, std::string>& env = {}) {
    const std::string out = Path("stdout"), err = Path("stderr");
    CtlResult r;
    r.code = Wait(Spawn(args, out, err, env));
    r.out = ReadAll(out);
    r.err = ReadAll(err);
    return r;
  }
  // The same against the daemon's TCP address, with the admin token.
  CtlResult RunTcp(std::vector<std::string> args) {
    args.insert(args.end(), {"--target", tcp_, "--admin-token", admin_token_});
    return Run(args);
  }

  std::string admin_token_ = "admin-secret";
  bool insecure_tcp_ = true;  // as in DaemonTest
  RecordingListener listener_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<RawRank> rank_;
  std::string dir_, socket_, tcp_, unix_;
};

// For EXPECT output: the command's streams.
inline std::string Show(const CtlResult& r) {
  return "exit " + std::to_string(r.code) + "\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
}

}  // namespace gnmr::testing
