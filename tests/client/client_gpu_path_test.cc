// The client's GPU path without a GPU: device tensors on a machine (or a
// build) without CUDA are refused clearly while host units keep working;
// with a fake device backend, mixed host + device units reach an
// in-process daemon exactly as the CPU path's, reports wait for their
// launch, pointers are refreshed, and the overhead ratio comes from a fake
// activity profiler (measured, unavailable, backing off).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "client/src/overhead_accountant.h"
#include "daemon/server/daemon.h"
#include "gnmr/client.h"
#include "gnmr/gnmr_c.h"
#include "gnmr/v1/gnmr.grpc.pb.h"
#include "tests/client/fake_gpu.h"
#include "tests/client/unit_figures.h"
#include "tests/testing/eventually.h"

namespace gnmr {
namespace {

using testing::Eventually;

using Clock = std::chrono::steady_clock;
using testing::FakeGpuInstall;
using testing::FakeGpuState;

TensorRef Ref(const std::vector<float>& v, int32_t device) {
  TensorRef t;
  t.data = v.data();
  t.numel = v.size();
  t.device = device;
  return t;
}

ClientOptions Options(const std::string& target, const std::string& job) {
  ClientOptions o;
  o.target = target;
  o.job_id = job;
  ControllerConfig c;
  c.warmup = 3;
  c.lag = 1;
  o.config = c;
  return o;
}

TEST(ClientGpuFallbackTest, DeviceTensorsWithoutGpuAreRefusedHostUnitsWork) {
  if (CreateCudaStatsBackend(0).ok()) GTEST_SKIP() << "a CUDA device is present";
  std::vector<float> g(64, 0.5f), h(32, 0.25f);
  auto client = std::move(Client::Create(Options("unix:/nonexistent/gnmr.sock", "j"))).value();
  StatusOr<UnitHandle> dev = client->AddUnit("dev", {Ref(g, 0)});
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(dev.status().message().find("GPU statistics are unavailable"), std::string::npos)
      << dev.status().message();
  EXPECT_NE(dev.status().message().find("host units are unaffected"), std::string::npos);
  // Mixed placement inside one unit is a usage error, whatever the machine.
  StatusOr<UnitHandle> mixed = client->AddUnit("mixed", {Ref(g, kHostDevice), Ref(h, 0)});
  EXPECT_EQ(mixed.status().code(), StatusCode::kInvalidArgument);
  StatusOr<UnitHandle> host = client->AddUnit("host", {Ref(g, kHostDevice)});
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  ASSERT_TRUE(client->Start().ok());
  EXPECT_TRUE(client->Observe(0).ok());
  EXPECT_TRUE(client->Observe(1, nullptr).ok());
  // A host unit cannot move to a device.
  EXPECT_EQ(client->SetTensors(*host, {Ref(g, 0)}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Counters().reports_enqueued, 2u);
  EXPECT_EQ(client->Counters().overhead_source, OverheadSource::kHostWall);
  EXPECT_EQ(client->Counters().stats_gpu_seconds, 0.0);
}

TEST(ClientGpuFallbackTest, CApiDeviceTensorsWithoutGpu) {
  if (CreateCudaStatsBackend(0).ok()) GTEST_SKIP() << "a CUDA device is present";
  gnmr_options o;
  gnmr_options_init(&o);
  o.target = "unix:/nonexistent/gnmr.sock";
  o.job_id = "j";
  gnmr_client* c = nullptr;
  ASSERT_EQ(gnmr_client_create(&o, &c), GNMR_OK);
  std::vector<float> g(16, 1.0f);
  gnmr_tensor dev = {g.data(), g.size(), GNMR_DTYPE_FP32, GNMR_LOCATION_CUDA(0), 0.0f, nullptr};
  uint32_t unit = 99;
  EXPECT_EQ(gnmr_add_unit(c, "dev", &dev, 1, 0, 1, &unit), GNMR_EUNAVAILABLE);
  EXPECT_NE(std::string(gnmr_last_error()).find("CUDA device 0"), std::string::npos);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
  gnmr_tensor host = {g.data(), g.size(), GNMR_DTYPE_FP32};  // 0.1-style: host
#pragma GCC diagnostic pop
  ASSERT_EQ(gnmr_add_unit(c, "host", &host, 1, 0, 1, &unit), GNMR_OK);
  ASSERT_EQ(gnmr_start(c), GNMR_OK);
  EXPECT_EQ(gnmr_observe_on_stream(c, 0, nullptr), GNMR_OK);
  gnmr_counters k;
  ASSERT_EQ(gnmr_get_counters(c, &k), GNMR_OK);
  EXPECT_EQ(k.reports_enqueued, 1u);
  EXPECT_EQ(k.overhead_source, GNMR_OVERHEAD_HOST_WALL);
  gnmr_client_destroy(c);
}

// Fake device units against a real in-process daemon.
class ClientGpuPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/tmp/gnmr_gpu_path_test_" + std::to_string(getpid()) + ".sock";
    DaemonOptions d;
    d.listen = {"unix:" + path_};
    StatusOr<std::unique_ptr<Daemon>> s = Daemon::Start(d, nullptr, AdminContext());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    daemon_ = std::move(s).value();
  }
  void TearDown() override {
    if (daemon_) daemon_->Shutdown(std::chrono::milliseconds(200));
  }
  std::string target() const { return "unix:" + path_; }

  // norm and mu per unit name, as the daemon sees job `job`.
  std::map<std::string, std::pair<double, double>> Units(const std::string& job) {
    return testing::UnitNormsAndMeans(
        grpc::CreateChannel(target(), grpc::InsecureChannelCredentials()), job);
  }

  std::string path_;
  std::unique_ptr<Daemon> daemon_;
};

void FillStep(std::vector<std::vector<float>>* grads, int64_t step) {
  for (size_t u = 0; u < grads->size(); ++u) {
    for (size_t i = 0; i < (*grads)[u].size(); ++i) {
      (*grads)[u][i] =
          0.001f * static_cast<float>((i * 13 + u * 7 + static_cast<size_t>(step) * 5) % 101) -
          0.05f;
    }
  }
}

TEST_F(ClientGpuPathTest, MixedUnitsReachTheDaemonAsTheCpuPath) {
  FakeGpuState state;
  FakeGpuInstall install(&state);
  std::vector<std::vector<float>> a(3, std::vector<float>(3000)), b = a;
  auto host = std::move(Client::Create(Options(target(), "host"))).value();
  auto mixed = std::move(Client::Create(Options(target(), "mixed"))).value();
  for (int u = 0; u < 3; ++u) {
    const std::string name = "u" + std::to_string(u);
    ASSERT_TRUE(host->AddUnit(name, {Ref(a[u], kHostDevice)}).ok());
    // Unit 0 stays on the host, units 1 and 2 are "device" units.
    ASSERT_TRUE(mixed->AddUnit(name, {Ref(b[u], u == 0 ? kHostDevice : 0)}).ok());
  }
  ASSERT_TRUE(host->Start().ok());
  ASSERT_TRUE(mixed->Start().ok());
  ASSERT_TRUE(Eventually([&] { return host->Counters().connected && mixed->Counters().connected; },
                         std::chrono::seconds(5)));
  for (int64_t step = 0; step < 12; ++step) {
    FillStep(&a, step);
    FillStep(&b, step);
    ASSERT_TRUE(host->Observe(step).ok());
    ASSERT_TRUE(mixed->Observe(step, nullptr).ok());
    ASSERT_TRUE(host->Flush(std::chrono::seconds(5)));
    ASSERT_TRUE(mixed->Flush(std::chrono::seconds(5)));
  }
  // Held results: the report waits for its launch, Observe does not.
  {
    std::lock_guard<std::mutex> lock(state.mu);
    state.hold = true;
  }
  const uint64_t sent = mixed->Counters().reports_sent;
  FillStep(&b, 12);
  ASSERT_TRUE(mixed->Observe(12).ok());
  EXPECT_EQ(mixed->Counters().reports_enqueued, 13u);
  EXPECT_FALSE(mixed->Flush(std::chrono::milliseconds(50)));
  EXPECT_EQ(mixed->Counters().reports_sent, sent);
  {
    std::lock_guard<std::mutex> lock(state.mu);
    state.hold = false;
  }
  FillStep(&a, 12);
  ASSERT_TRUE(host->Observe(12).ok());
  ASSERT_TRUE(host->Flush(std::chrono::seconds(5)));
  ASSERT_TRUE(mixed->Flush(std::chrono::seconds(5)));
  EXPECT_EQ(mixed->Counters().reports_sent, 13u);
  ASSERT_TRUE(
      Eventually([&] { return Units("host") == Units("mixed") && Units("host").size() == 3; },
                 std::chrono::seconds(5)));
  for (const auto& [name, nm] : Units("host")) {
    EXPECT_GT(nm.first, 0.0) << name;  // bit-identical (== above), and real
  }
  const ClientCounters k = mixed->Counters();
  EXPECT_EQ(state.launches, 13);
  EXPECT_NEAR(k.stats_gpu_seconds, 13 * 1e-5, 1e-9);
  EXPECT_EQ(k.overhead_source, OverheadSource::kUnavailable);  // no profiling asked
}

TEST_F(ClientGpuPathTest, PointerRefreshAndLayoutChecks) {
  FakeGpuState state;
  FakeGpuInstall install(&state);
  std::vector<float> g1(100, 1.0f), g2(100, 2.0f), h(50, 3.0f), h2(50, 3.0f);
  auto client = std::move(Client::Create(Options(target(), "refresh"))).value();
  const UnitHandle u = client->AddUnit("dev", {Ref(g1, 0), Ref(h, 0)}).value();
  ASSERT_TRUE(client->Start().ok());
  ASSERT_TRUE(client->Observe(0).ok());
  EXPECT_TRUE(state.refreshes.empty());  // pointers unchanged: no refresh
  ASSERT_TRUE(client->SetTensors(u, {Ref(g2, 0), Ref(h2, 0)}).ok());
  ASSERT_TRUE(client->Observe(1).ok());
  ASSERT_EQ(state.refreshes.size(), 1u);
  EXPECT_EQ(state.refreshes[0], (std::vector<const void*>{g2.data(), h2.data()}));
  // Only pointers may change on a device unit.
  std::vector<float> big(150);
  EXPECT_EQ(client->SetTensors(u, {Ref(big, 0)}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client->SetTensors(u, {Ref(g2, 1), Ref(h2, 1)}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client->SetTensors(u, {Ref(g2, kHostDevice), Ref(h2, kHostDevice)}).code(),
            StatusCode::kInvalidArgument);
  // A second device for the same client is refused at registration.
  auto other = std::move(Client::Create(Options(target(), "two"))).value();
  ASSERT_TRUE(other->AddUnit("a", {Ref(g1, 0)}).ok());
  EXPECT_EQ(other->AddUnit("b", {Ref(g2, 1)}).status().code(), StatusCode::kInvalidArgument);
  // A failed launch leaves that step unreported and nothing else.
  {
    std::lock_guard<std::mutex> lock(state.mu);
    state.fail_launch = true;
  }
  EXPECT_FALSE(client->Observe(2).ok());
  EXPECT_TRUE(client->Observe(3).ok());
  EXPECT_EQ(client->Counters().reports_enqueued, 3u);
}

TEST_F(ClientGpuPathTest, OverheadRatioFromTheProfiler) {
  FakeGpuState state;
  FakeGpuInstall install(&state);
  std::vector<float> g(256, 0.5f);
  ClientOptions o = Options(target(), "prof");
  o.profile_gpu_overhead = true;
  auto client = std::move(Client::Create(o)).value();
  ASSERT_TRUE(client->AddUnit("dev", {Ref(g, 0)}).ok());
  ASSERT_TRUE(client->Start().ok());
  ASSERT_TRUE(Eventually([&] { return client->Counters().connected; }, std::chrono::seconds(5)));
  for (int64_t step = 0; step < 8; ++step) {
    ASSERT_TRUE(client->Observe(step).ok());
    ASSERT_TRUE(client->Flush(std::chrono::seconds(5)));
  }
  ASSERT_TRUE(
      Eventually([&] { return client->Counters().overhead_step >= 4; }, std::chrono::seconds(5)));
  const ClientCounters k = client->Counters();
  EXPECT_EQ(k.overhead_source, OverheadSource::kCupti);
  EXPECT_DOUBLE_EQ(k.overhead_ratio, 0.1);
  EXPECT_LE(k.overhead_step, 7 - static_cast<int64_t>(OverheadAccountant::kSettleSteps));
  EXPECT_EQ(state.profiler_starts, 1);
  client->Stop();
  EXPECT_EQ(state.profiler_stops, 1);
}

// The I/O thread's profiler flush (a CUPTI buffer parse: milliseconds)
// never holds the GPU path's lock: Observe and PlanFor on the training
// thread complete while a Collect is stuck.
TEST_F(ClientGpuPathTest, ProfilerFlushNeverBlocksTheTrainingThread) {
  FakeGpuState state;
  FakeGpuInstall install(&state);
  std::vector<float> g(256, 0.5f);
  ClientOptions o = Options(target(), "flush");
  o.profile_gpu_overhead = true;
  o.decision_wait = std::chrono::milliseconds(0);  // the I/O thread is held up below
  auto client = std::move(Client::Create(o)).value();
  ASSERT_TRUE(client->AddUnit("dev", {Ref(g, 0)}).ok());
  ASSERT_TRUE(client->Start().ok());
  {
    std::lock_guard<std::mutex> lock(state.mu);
    state.block_collect = true;
  }
  ASSERT_TRUE(client->Observe(0).ok());  // a launch: the I/O thread collects next
  {
    std::unique_lock<std::mutex> lock(state.mu);
    ASSERT_TRUE(state.cv.wait_for(lock, std::chrono::seconds(30),
                                  [&] { return state.collects_entered > 0; }));
  }
  // The training thread, while the I/O thread is inside Collect.
  std::atomic<bool> done{false};
  std::thread trainer([&] {
    EXPECT_TRUE(client->Observe(1).ok());
    Plan plan;
    client->PlanFor(1, &plan);
    done = true;
  });
  const bool finished = Eventually([&] { return done.load(); }, std::chrono::seconds(30));
  {
    std::lock_guard<std::mutex> lock(state.mu);
    state.block_collect = false;
  }
  state.cv.notify_all();
  trainer.join();
  EXPECT_TRUE(finished) << "Observe/PlanFor waited for the profiler's Collect";
  client->Stop();
}

TEST_F(ClientGpuPathTest, ProfilerOwnedElsewhereBacksOffQuietly) {
  FakeGpuState state;
  state.profiler_start = Status(StatusCode::kUnavailable,
                                "CUPTI unavailable: cuptiSubscribe: "
                                "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (39)");
  FakeGpuInstall install(&state);
  std::vector<float> g(256, 0.5f);
  ClientOptions o = Options(target(), "owned");
  o.profile_gpu_overhead = true;
  auto client = std::move(Client::Create(o)).value();
  ASSERT_TRUE(client->AddUnit("dev", {Ref(g, 0)}).ok());
  ASSERT_TRUE(client->Start().ok());  // training goes on
  // Flush returns false while not connected: connect first (a loaded
  // machine may take a while).
  ASSERT_TRUE(client->WaitConnected(std::chrono::seconds(10)).ok());
  for (int64_t step = 0; step < 6; ++step) ASSERT_TRUE(client->Observe(step).ok());
  EXPECT_TRUE(client->Flush(std::chrono::seconds(5)));
  const ClientCounters k = client->Counters();
  EXPECT_EQ(k.overhead_source, OverheadSource::kUnavailable);
  EXPECT_EQ(k.overhead_step, -1);
  client->Stop();
  EXPECT_EQ(state.profiler_starts, 1);
  EXPECT_EQ(state.profiler_stops, 0);  // never started: nothing to stop
}

TEST_F(ClientGpuPathTest, ProfilerWithoutStatsRecordsBacksOff) {
  FakeGpuState state;
  state.tag_stats = false;  // records never identify the statistics kernels
  FakeGpuInstall install(&state);
  std::vector<float> g(256, 0.5f);
  ClientOptions o = Options(target(), "untagged");
  o.profile_gpu_overhead = true;
  auto client = std::move(Client::Create(o)).value();
  ASSERT_TRUE(client->AddUnit("dev", {Ref(g, 0)}).ok());
  ASSERT_TRUE(client->Start().ok());
  ASSERT_TRUE(Eventually([&] { return client->Counters().connected; }, std::chrono::seconds(5)));
  for (int64_t step = 0; step < 40; ++step) {
    ASSERT_TRUE(client->Observe(step).ok());
    ASSERT_TRUE(client->Flush(std::chrono::seconds(5)));
  }
  ASSERT_TRUE(Eventually(
      [&] {
        std::lock_guard<std::mutex> lock(state.mu);
        return state.profiler_stops == 1;
      },
      std::chrono::seconds(5)));
  EXPECT_EQ(client->Counters().overhead_source, OverheadSource::kUnavailable);
  EXPECT_EQ(client->Counters().reports_sent, 40u);  // reports never stopped
}

}  // namespace
}  // namespace gnmr
