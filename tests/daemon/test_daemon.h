// An in-process gnmrd core on loopback and a Unix socket, with a listener
// that records the jobs' side effects for assertions.
#pragma once

#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include <gtest/gtest.h>

#include "controller/publish/wire_names.h"
#include "daemon/server/daemon.h"
#include "tests/daemon/raw_rank.h"
#include "tests/testing/manual_clock.h"

namespace gnmr::testing {

// Records what tests assert on, and passes every call on to `forward` when
// set (e.g. gnmrd's own DaemonSideEffects with metrics).
class RecordingListener : public JobListener {
 public:
  void OnJobStarted(const std::string& j, uint32_t w, const Controller& c) override {
    jobs_started++;
    if (forward) forward->OnJobStarted(j, w, c);
  }
  void OnReport(const std::string& j, uint32_t r, size_t b, const v1::ClientOverhead& o) override {
    reports++;
    if (forward) forward->OnReport(j, r, b, o);
  }
  void OnStandbyNote(const std::string& j, uint32_t r, const v1::ClientOverhead& o) override {
    standby_notes++;
    if (forward) forward->OnStandbyNote(j, r, o);
  }
  void OnReplicaCheck(const std::string& j, bool match) override {
    replica_checks++;
    if (!match) replica_mismatches++;
    if (forward) forward->OnReplicaCheck(j, match);
  }
  void OnLateReport(const std::string& j, uint32_t r) override {
    late++;
    if (forward) forward->OnLateReport(j, r);
  }
  void OnDecision(const std::string& j, const StepAggregator::ClosedStep& step, const Decision& d,
                  const Controller& c, const StepTiming& t) override {
    decisions++;
    incomplete += step.incomplete_units;
    omitted += step.omitted_units;
    if (step.by_deadline) by_deadline++;
    if (forward) forward->OnDecision(j, step, d, c, t);
  }
  void OnEvents(const std::string& job, const std::vector<v1::Event>& events) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& e : events) this->events[job].push_back(e);
    }
    if (forward) forward->OnEvents(job, events);
  }
  void OnAckMismatch(const std::string& j, const AckMismatch& m) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      mismatches.push_back(m);
    }
    ack_mismatches++;
    if (forward) forward->OnAckMismatch(j, m);
  }
  void OnDecisionFailed(const std::string& j) override {
    decision_failures++;
    if (forward) forward->OnDecisionFailed(j);
  }
  void OnControllerChanged(const std::string& j, const Controller& c) override {
    if (forward) forward->OnControllerChanged(j, c);
  }
  void OnRanksWithoutDecisions(const std::string& j, uint32_t n) override {
    ranks_without_decisions = n;
    if (forward) forward->OnRanksWithoutDecisions(j, n);
  }
  void OnSessions(const std::string& j, uint32_t n) override {
    if (forward) forward->OnSessions(j, n);
  }
  void OnSnapshot(const std::string& job, v1::ControllerState state,
                  const v1::JobMeta& meta) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      snapshots[job] = {state, meta};
    }
    snapshot_count++;
    if (forward) forward->OnSnapshot(job, std::move(state), meta);
  }
  Status OnJobRemoved(const std::string& job) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      removed.push_back(job);
    }
    return forward ? forward->OnJobRemoved(job) : Status::Ok();
  }
  // Events of `kind` of `job`.
  std::vector<v1::Event> EventsOf(const std::string& job, const std::string& kind) {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<v1::Event> out;
    for (const v1::Event& e : events[job]) {
      if (EventKindName(e.kind()) == kind) out.push_back(e);
    }
    return out;
  }
  std::vector<std::string> Removed() {
    std::lock_guard<std::mutex> lock(mu);
    return removed;
  }
  std::vector<v1::Event> EventsOf(const std::string& job) {
    std::lock_guard<std::mutex> lock(mu);
    return events[job];
  }

  JobListener* forward = nullptr;  // set before the daemon starts
  std::atomic<uint64_t> jobs_started{0}, reports{0}, late{0}, decisions{0}, incomplete{0},
      omitted{0}, by_deadline{0}, ack_mismatches{0}, decision_failures{0}, snapshot_count{0},
      standby_notes{0}, replica_checks{0}, replica_mismatches{0};
  std::atomic<uint32_t> ranks_without_decisions{0};  // the newest count
  std::mutex mu;
  std::vector<AckMismatch> mismatches;
  std::map<std::string, std::vector<v1::Event>> events;
  std::map<std::string, std::pair<v1::ControllerState, v1::JobMeta>> snapshots;
  std::vector<std::string> removed;  // OnJobRemoved, in order (read: Removed())
};

// The ids of the jobs the daemon at `channel` lists (ListJobs), in order.
inline std::vector<std::string> ListJobIds(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::ClientContext ctx;
  v1::ListJobsResponse resp;
  EXPECT_TRUE(v1::Admin::NewStub(channel)->ListJobs(&ctx, {}, &resp).ok());
  std::vector<std::string> ids;
  for (const v1::JobInfo& j : resp.jobs()) ids.push_back(j.job_id());
  return ids;
}

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
    socket_path_ =
        "/tmp/gnmr-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++) + ".sock";
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

  // Admin RPCs (the mutating ones with the admin token).
  grpc::Status ExportState(const std::string& job, v1::ControllerState* out) {
    grpc::ClientContext ctx;
    v1::ExportStateRequest req;
    req.set_job_id(job);
    v1::ExportStateResponse resp;
    grpc::Status s = v1::Admin::NewStub(Tcp())->ExportState(&ctx, req, &resp);
    *out = resp.state();
    return s;
  }
  // `resume`: as a trainer's checkpoint load (the switch is at once), not
  // an operator's import.
  grpc::Status ImportState(const std::string& job, const v1::ControllerState& state,
                           v1::ImportStateResponse* out = nullptr, bool resume = false) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-gnmr-admin-token", admin_token_);
    v1::ImportStateRequest req;
    req.set_job_id(job);
    req.set_resume(resume);
    *req.mutable_state() = state;
    v1::ImportStateResponse resp;
    grpc::Status s = v1::Admin::NewStub(Tcp())->ImportState(&ctx, req, &resp);
    if (out) *out = resp;
    return s;
  }
  grpc::Status GetConfig(const std::string& job, v1::ControllerConfig* out) {
    grpc::ClientContext ctx;
    v1::GetConfigRequest req;
    req.set_job_id(job);
    v1::GetConfigResponse resp;
    grpc::Status s = v1::Admin::NewStub(Tcp())->GetConfig(&ctx, req, &resp);
    *out = resp.config();
    return s;
  }
  grpc::Status SetConfig(const std::string& job, const v1::ControllerConfig& config) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-gnmr-admin-token", admin_token_);
    v1::SetConfigRequest req;
    req.set_job_id(job);
    *req.mutable_config() = config;
    v1::SetConfigResponse resp;
    return v1::Admin::NewStub(Tcp())->SetConfig(&ctx, req, &resp);
  }

  static inline int counter_ = 0;
  std::string socket_path_;
  std::string admin_token_ = "admin-secret";
  std::string read_token_;
  bool insecure_tcp_ = true;
  RecordingListener listener_;
  // For a test that drives the daemon's time (opts.clock = &clock_): a
  // member, so it outlives the daemon, whose ticker reads it until
  // TearDown's Shutdown.
  ManualClock clock_;
  std::unique_ptr<Daemon> daemon_;
};

}  // namespace gnmr::testing
