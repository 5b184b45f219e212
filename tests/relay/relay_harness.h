// RelayTest: a real gnmr-relay (in process) between raw ranks (raw gRPC
// clients, tests/daemon/raw_rank.h) and a real gnmrd core, all over Unix
// sockets and loopback (docs/relay.md). Shared by tests/relay/*_test.cc.
#pragma once

#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "relay/relay_server.h"
#include "tests/daemon/raw_rank.h"
#include "tests/daemon/test_daemon.h"

namespace gnmr::testing {

class RelayTest : public DaemonTest {
 protected:
  void SetUp() override {
    const std::string base = "/tmp/gnmr-relay-test-" + std::to_string(::getpid()) + "-" +
                             std::to_string(relay_counter_++);
    gnmrd_socket_ = base + "-gnmrd.sock";
    relay_socket_ = base + "-relay.sock";
    StartGnmrd();
    StartRelay(DefaultRelayOptions());
  }
  relay::RelayOptions DefaultRelayOptions() const {
    relay::RelayOptions options;
    options.listen = "unix:" + relay_socket_;
    options.upstream = "unix:" + gnmrd_socket_;
    return options;
  }
  // (Re)starts the relay with `options`.
  void StartRelay(const relay::RelayOptions& options) {
    if (relay_) relay_->Shutdown();
    relay_.reset();
    auto r = relay::RelayServer::Start(options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    relay_ = std::move(r).value();
  }
  void TearDown() override {
    ranks_.clear();
    if (relay_) relay_->Shutdown();
    DaemonTest::TearDown();
    ::unlink(relay_socket_.c_str());
  }
  void StartGnmrd() {
    DaemonOptions opts;
    opts.listen = {"127.0.0.1:0", "unix:" + gnmrd_socket_};
    StartDaemon(opts);
  }
  std::shared_ptr<grpc::Channel> Relay() {
    return grpc::CreateChannel("unix:" + relay_socket_, grpc::InsecureChannelCredentials());
  }
  // Rank `rank` of job "j" (world `world`, units "a" and "b"), through the
  // relay or not, registered; its stream not opened yet.
  RawRank* RegisterRank(uint32_t rank, uint32_t world, bool through_relay) {
    ranks_.push_back(std::make_unique<RawRank>(through_relay ? Relay() : Tcp(), "j", rank, world));
    RawRank* r = ranks_.back().get();
    config_ = FastConfig();
    EXPECT_TRUE(r->Register({{"a"}, {"b"}}, nullptr, &config_).ok());
    return r;
  }
  // The same, its stream open and its hello sent.
  RawRank* AddRank(uint32_t rank, uint32_t world, bool through_relay) {
    RawRank* r = RegisterRank(rank, world, through_relay);
    r->Open();
    return r;
  }
  uint32_t Connected() {
    auto job = daemon_->registry().Find("j");
    return job.ok() ? (*job)->connected_sessions() : 0;
  }
  bool WaitConnected(uint32_t n) {
    for (int i = 0; i < 250; ++i) {
      if (Connected() == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  static inline int relay_counter_ = 0;
  std::string gnmrd_socket_, relay_socket_;
  std::unique_ptr<relay::RelayServer> relay_;
  v1::ControllerConfig config_;
  std::vector<std::unique_ptr<RawRank>> ranks_;
};

}  // namespace gnmr::testing
