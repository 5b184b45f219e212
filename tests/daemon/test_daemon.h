// An in-process gnmrd core on loopback and a Unix socket, with a listener
// that records the jobs' side effects for assertions.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "daemon/server/daemon.h"
#include "tests/daemon/raw_rank.h"

namespace gnmr::testing {

class RecordingListener : public JobListener {
 public:
  void OnJobStarted(const std::string&, uint32_t, const Controller&) override { jobs_started++; }
  void OnReport(const std::string&, uint32_t, size_t, const v1::ClientOverhead&) override {
    reports++;
  }
  void OnLateReport(const std::string&, uint32_t) override { late++; }
  void OnDecision(const std::string&, const StepAggregator::ClosedStep& step, const Decision&,
                  const Controller&, const StepTiming&) override {
    decisions++;
    incomplete += step.incomplete_units;
    if (step.by_deadline) by_deadline++;
  }
  void OnEvents(const std::string& job, const std::vector<v1::Event>& events) override {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& e : events) this->events[job].push_back(e);
  }
  void OnAckMismatch(const std::string&, uint32_t) override { ack_mismatches++; }
  void OnControllerChanged(const std::string&, const Controller&) override {}
  void OnSessions(const std::string&, uint32_t) override {}
  void OnSnapshot(const std::string& job, const v1::ControllerState& state,
                  const v1::JobMeta& meta) override {
    std::lock_guard<std::mutex> lock(mu);
    snapshots[job] = {state, meta};
    snapshot_count++;
  }
  std::vector<v1::Event> EventsOf(const std::string& job) {
    std::lock_guard<std::mutex> lock(mu);
    return events[job];
  }

  std::atomic<uint64_t> jobs_started{0}, reports{0}, late{0}, decisions{0}, incomplete{0}, by_deadline{0},
      ack_mismatches{0}, snapshot_count{0};
  std::mutex mu;
  std::map<std::string, std::vector<v1::Event>> events;
  std::map<std::string, std::pair<v1::ControllerState, v1::JobMeta>> snapshots;
};

inline v1::ControllerConfig FastConfig(int max_o = 2, int warmup = 5, int lag = 1) {
  v1::ControllerConfig c;
  c.set_warmup(warmup);
  c.set_ema_decay(0.9);
  c.set_tau(2.5);
  c.set_tau_delta(1.0);
  c.set_gnmr_floor(1.5);
  c.set_short_window(4);
  c.set_max_o(max_o);
  c.set_lock_steps(5);
  c.set_lag(lag);
  c.set_entry(v1::ENTRY_CLIP);
  c.set_clip_min_scale(0.1);
  return c;
}

class DaemonTest : public ::testing::Test {
 protected:
  void StartDaemon(DaemonOptions opts = {}) {
    socket_path_ = "/tmp/gnmr-test-" + std::to_string(::getpid()) + "-" +
                   std::to_string(counter_++) + ".sock";
    if (opts.listen.empty()) opts.listen = {"127.0.0.1:0", "unix:" + socket_path_};
    // Most tests drive jobs over loopback TCP without tokens: their daemon
    // opts in to trusting TCP peers. The TCP access rules themselves are
    // tested with it off (tcp_access_test.cc).
    opts.insecure_tcp = insecure_tcp_;
    if (opts.registry.job.aggregation.deadline == std::chrono::seconds(2)) {
      opts.registry.job.aggregation.deadline = std::chrono::milliseconds(300);
    }
    AdminContext admin;
    admin.version = "test";
    admin.admin_token = admin_token_;
    admin.read_token = read_token_;
    auto d = Daemon::Start(opts, &listener_, admin);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    daemon_ = std::move(d).value();
  }
  void TearDown() override {
    if (daemon_) daemon_->Shutdown(std::chrono::milliseconds(100));
  }
  std::shared_ptr<grpc::Channel> Tcp() {
    return grpc::CreateChannel(daemon_->bound()[0], grpc::InsecureChannelCredentials());
  }
  std::shared_ptr<grpc::Channel> Unix() {
    return grpc::CreateChannel(daemon_->bound()[1], grpc::InsecureChannelCredentials());
  }

  static inline int counter_ = 0;
  std::string socket_path_;
  std::string admin_token_ = "admin-secret";
  std::string read_token_;
  bool insecure_tcp_ = true;
  RecordingListener listener_;
  std::unique_ptr<Daemon> daemon_;
};

}  // namespace gnmr::testing
