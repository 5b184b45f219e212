// Forward tensors on a device (client/src/forward_device.h) without a GPU:
// GpuPath with the fake backend (host memory stands in for device memory).
// Checks that a step's device forward rows are those of the host path, bit
// for bit and in call order; that its report waits for them; that a unit
// called faster than the GPU drains loses its row of that step, never part
// of it; that idle backends take new shapes; and the client's refusals.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "client/src/forward_stats.h"
#include "client/src/gpu_path.h"
#include "client/src/outbox.h"
#include "gnmr/client.h"
#include "gnmr/cpu_stats.h"
#include "gnmr/gnmr_c.h"
#include "tests/client/fake_gpu.h"

namespace gnmr {
namespace {

using testing::FakeGpuInstall;
using testing::FakeGpuState;

constexpr int kDevice = 0;

TensorRef DeviceRef(const std::vector<float>& v, float saturation = 0.0f) {
  TensorRef t;
  t.data = v.data();
  t.numel = v.size();
  t.device = kDevice;
  t.saturation_magnitude = saturation;
  return t;
}

std::vector<float> Values(size_t n, int seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = 0.01f * static_cast<float>((i * 7 + static_cast<size_t>(seed) * 13) % 29) - 0.1f;
  }
  if (n > 3) v[3] = 0.0f;
  return v;
}

// GpuPath over two device units (client units 0 and 1) and its outbox.
class GpuForwardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    install_ = std::make_unique<FakeGpuInstall>(&state_);
    host_.Resize(2);
    outbox_ = std::make_unique<Outbox>(16, 2, 16, GpuPath::kMaxParked);
    StatusOr<std::unique_ptr<GpuPath>> made = GpuPath::Create(kDevice);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    gpu_ = std::move(made).value();
    ASSERT_TRUE(gpu_->Start({0, 1}, {{DeviceRef(grad0_)}, {DeviceRef(grad1_)}}, {1, 1}, false,
                            outbox_.get())
                    .ok());
  }
  void TearDown() override {
    gpu_.reset();
    install_.reset();
  }
  Status Forward(UnitHandle unit, std::vector<TensorRef> tensors) {
    return gpu_->ObserveForward(unit, tensors.data(), tensors.size(), nullptr);
  }
  // Launches step `step` and returns its published report (null if none).
  Report* LaunchAndDrain(int64_t step) {
    Report* r = outbox_->Acquire();
    r->step = step;
    host_.MoveInto(r);  // as Client::Observe does (no host forward rows here)
    EXPECT_TRUE(gpu_->Launch(nullptr, step, std::chrono::steady_clock::now(), r).ok());
    gpu_->Drain(false);
    return outbox_->PopReport();
  }

  // Lets the held forward results through, drains and pops the oldest report.
  Report* ReleaseForwardAndPop() {
    {
      std::lock_guard<std::mutex> lock(state_.mu);
      state_.hold_forward = false;
    }
    gpu_->Drain(false);
    return outbox_->PopReport();
  }

  FakeGpuState state_;
  std::unique_ptr<FakeGpuInstall> install_;
  std::unique_ptr<Outbox> outbox_;
  std::unique_ptr<GpuPath> gpu_;
  std::vector<float> grad0_ = Values(64, 1), grad1_ = Values(32, 2);
  ForwardAccumulator host_;
};

void ExpectRow(const Report& r, uint32_t u, const UnitStats& want) {
  ASSERT_GT(r.fwd_numel.size(), u);
  EXPECT_EQ(std::memcmp(&r.fwd_sumsq[u], &want.sumsq, sizeof(double)), 0)
      << r.fwd_sumsq[u] << " vs " << want.sumsq;
  EXPECT_EQ(r.fwd_amax[u], want.amax);
  EXPECT_EQ(r.fwd_saturated[u], want.saturated);
  EXPECT_EQ(r.fwd_zeros[u], want.zeros);
  EXPECT_EQ(r.fwd_numel[u], want.numel);
}

TEST_F(GpuForwardTest, RowsAreTheHostPathsInCallOrder) {
  const std::vector<float> a = Values(5000, 3), b = Values(777, 4), c = Values(4096, 5);
  const std::vector<float> d = Values(100, 6);
  // Unit 0: a module run twice (two micro-batches), then a call of two
  // tensors with saturation counted; unit 1: once.
  ASSERT_TRUE(Forward(0, {DeviceRef(a, 0.05f)}).ok());
  ASSERT_TRUE(Forward(1, {DeviceRef(d)}).ok());
  ASSERT_TRUE(Forward(0, {DeviceRef(b, 0.05f)}).ok());
  ASSERT_TRUE(Forward(0, {DeviceRef(c, 0.05f), DeviceRef(b, 0.05f)}).ok());
  Report* r = LaunchAndDrain(0);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->step, 0);
  EXPECT_EQ(r->fwd_units, 2u);

  // The host path: the same calls through ForwardAccumulator.
  const auto host = [](std::vector<TensorRef> refs) {
    for (TensorRef& t : refs) t.device = kHostDevice;
    UnitStats s;
    EXPECT_TRUE(cpu::ComputeStats(refs.data(), refs.size(), &s).ok());
    return s;
  };
  ForwardAccumulator want;
  want.Resize(2);
  want.Add(0, host({DeviceRef(a, 0.05f)}));
  want.Add(1, host({DeviceRef(d)}));
  want.Add(0, host({DeviceRef(b, 0.05f)}));
  want.Add(0, host({DeviceRef(c, 0.05f), DeviceRef(b, 0.05f)}));
  Report expected;
  want.MoveInto(&expected);
  const auto row = [&expected](uint32_t u) {
    UnitStats s;
    s.sumsq = expected.fwd_sumsq[u];
    s.amax = expected.fwd_amax[u];
    s.zeros = expected.fwd_zeros[u];
    s.numel = expected.fwd_numel[u];
    s.saturated = expected.fwd_saturated[u];
    return s;
  };
  const UnitStats row0 = row(0), row1 = row(1);
  EXPECT_GT(row0.saturated, 0u);
  EXPECT_EQ(row0.numel, 5000u + 777u + 4096u + 777u);
  ExpectRow(*r, 0, row0);
  ExpectRow(*r, 1, row1);
  outbox_->Release(r, true);

  // The next step had no forward call: no forward columns.
  Report* next = LaunchAndDrain(1);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->fwd_units, 0u);
  outbox_->Release(next, true);
  EXPECT_EQ(gpu_->forward_dropped(), 0u);
}

TEST_F(GpuForwardTest, TheReportWaitsForItsForwardRows) {
  const std::vector<float> a = Values(300, 7);
  state_.hold_forward = true;
  ASSERT_TRUE(Forward(1, {DeviceRef(a)}).ok());
  EXPECT_EQ(LaunchAndDrain(0), nullptr);  // gradients in, forward not yet
  EXPECT_EQ(gpu_->pending(), 1u);
  // The next step's calls are its own, whatever the GPU has done.
  ASSERT_TRUE(Forward(1, {DeviceRef(a)}).ok());
  ASSERT_TRUE(Forward(1, {DeviceRef(a)}).ok());
  EXPECT_EQ(LaunchAndDrain(1), nullptr);
  Report* r0 = ReleaseForwardAndPop();
  Report* r1 = outbox_->PopReport();
  ASSERT_NE(r0, nullptr);
  ASSERT_NE(r1, nullptr);
  EXPECT_EQ(r0->step, 0);
  EXPECT_EQ(r1->step, 1);
  EXPECT_EQ(r0->fwd_numel[1], 300u);
  EXPECT_EQ(r1->fwd_numel[1], 600u);
  EXPECT_EQ(r0->fwd_units, 1u);
  outbox_->Release(r0, true);
  outbox_->Release(r1, true);
}

TEST_F(GpuForwardTest, AUnitAheadOfTheGpuLosesItsRowNotPartOfIt) {
  const std::vector<float> a = Values(64, 8);
  state_.hold_forward = true;  // a GPU that has not run anything yet
  const int capacity = DeviceForward::kBackendsPerUnit * DeviceStatsBackend::kMaxPending;
  for (int i = 0; i < capacity + 1; ++i) ASSERT_TRUE(Forward(0, {DeviceRef(a)}).ok());
  ASSERT_TRUE(Forward(1, {DeviceRef(a)}).ok());
  EXPECT_EQ(gpu_->forward_dropped(), 1u);
  EXPECT_EQ(state_.forward_launches, capacity + 1);  // never more in flight than the rings hold
  EXPECT_EQ(state_.backends, 1 + DeviceForward::kBackendsPerUnit + 1);
  EXPECT_EQ(LaunchAndDrain(0), nullptr);
  Report* r = ReleaseForwardAndPop();
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->fwd_numel[0], 0u);  // no partial row
  EXPECT_EQ(r->fwd_numel[1], 64u);
  EXPECT_EQ(r->fwd_units, 1u);
  outbox_->Release(r, true);
  // Drained: the unit has its full row again.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Forward(0, {DeviceRef(a)}).ok());
  Report* next = LaunchAndDrain(1);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->fwd_numel[0], 3u * 64u);
  outbox_->Release(next, true);
}

TEST_F(GpuForwardTest, NewShapesTakeIdleBackends) {
  // Sequence lengths that change: a backend per shape up to four, then the
  // least recently used idle one takes the new shape.
  state_.hold_forward = true;
  std::vector<std::vector<float>> acts;
  for (int i = 0; i < 6; ++i) acts.push_back(Values(100 + 10 * static_cast<size_t>(i), i));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Forward(0, {DeviceRef(acts[i])}).ok());
  EXPECT_EQ(state_.backends, 1 + 4);
  ASSERT_TRUE(Forward(0, {DeviceRef(acts[4])}).ok());  // every backend busy: dropped
  EXPECT_EQ(gpu_->forward_dropped(), 1u);
  EXPECT_EQ(LaunchAndDrain(0), nullptr);
  Report* r = ReleaseForwardAndPop();
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->fwd_units, 0u);  // unit 0 lost its row: no forward columns at all
  outbox_->Release(r, true);
  const int tables = state_.forward_set_tables;
  ASSERT_TRUE(Forward(0, {DeviceRef(acts[3])}).ok());  // its backend keeps its table
  EXPECT_EQ(state_.forward_set_tables, tables);
  ASSERT_TRUE(Forward(0, {DeviceRef(acts[5])}).ok());  // the least recently used: acts[0]'s
  EXPECT_EQ(state_.forward_set_tables, tables + 1);
  ASSERT_TRUE(Forward(0, {DeviceRef(acts[2])}).ok());  // still there
  ASSERT_TRUE(Forward(0, {DeviceRef(acts[0])}).ok());  // gone: takes acts[1]'s
  EXPECT_EQ(state_.forward_set_tables, tables + 2);
  EXPECT_EQ(state_.backends, 1 + 4);
  Report* next = LaunchAndDrain(1);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->fwd_numel[0], 130u + 150u + 120u + 100u);
  outbox_->Release(next, true);
}

TEST(DeviceForwardTest, BackendsOfAllUnitsAreCapped) {
  FakeGpuState state;
  state.backends = 1;  // as if GpuPath's had been made: every backend here is a forward one
  state.hold_forward = true;
  const size_t units = DeviceForward::kMaxBackends / 4 + 10;
  DeviceForward fwd(units, [&state]() -> StatusOr<std::unique_ptr<DeviceStatsBackend>> {
    return std::unique_ptr<DeviceStatsBackend>(new testing::FakeBackend(&state));
  });
  std::vector<std::vector<float>> shapes;
  for (int k = 0; k < 4; ++k) shapes.push_back(Values(8 + static_cast<size_t>(k), k));
  for (uint32_t u = 0; u < units; ++u) {
    for (const auto& v : shapes) {
      const TensorRef t = DeviceRef(v);
      ASSERT_TRUE(fwd.Observe(u, &t, 1, nullptr).ok());
    }
  }
  EXPECT_EQ(state.backends - 1, static_cast<int>(DeviceForward::kMaxBackends));
  EXPECT_EQ(fwd.dropped(), units * 4 - DeviceForward::kMaxBackends);
}

TEST(ClientDeviceForwardTest, RefusesTensorsOffItsDevice) {
  FakeGpuState state;
  FakeGpuInstall install(&state);
  ClientOptions o;
  o.target = "unix:/nonexistent/gnmr.sock";
  o.job_id = "fwd-device";
  auto client = std::move(Client::Create(o)).value();
  std::vector<float> g(64, 0.5f), f(16, 0.25f);
  const UnitHandle u = *client->AddUnit("u", {DeviceRef(g)});
  ASSERT_TRUE(client->Start().ok());
  EXPECT_TRUE(client->ObserveForward(u, {DeviceRef(f)}).ok());
  TensorRef other = DeviceRef(f);
  other.device = 1;
  const Status s = client->ObserveForward(u, {other});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("device units are on device 0"), std::string::npos) << s.message();
  TensorRef host = DeviceRef(f);
  host.device = kHostDevice;
  const Status mixed = client->ObserveForward(u, {DeviceRef(f), host});
  EXPECT_EQ(mixed.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mixed.message().find("share a device"), std::string::npos) << mixed.message();
  EXPECT_TRUE(client->Observe(0, nullptr).ok());
  EXPECT_EQ(state.forward_launches, 1);
}

TEST(ClientDeviceForwardTest, TheCApiTakesAStream) {
  FakeGpuState state;
  FakeGpuInstall install(&state);
  gnmr_options o;
  gnmr_options_init(&o);
  o.target = "unix:/nonexistent/gnmr.sock";
  o.job_id = "fwd-device-c";
  gnmr_client* c = nullptr;
  ASSERT_EQ(gnmr_client_create(&o, &c), GNMR_OK) << gnmr_last_error();
  std::vector<float> g(64, 0.5f), f(16, 0.25f);
  gnmr_tensor grad = {g.data(), g.size(), GNMR_DTYPE_FP32, GNMR_LOCATION_CUDA(0), 0.0f, nullptr};
  uint32_t unit = 0;
  ASSERT_EQ(gnmr_add_unit(c, "u", &grad, 1, 0, 1, &unit), GNMR_OK) << gnmr_last_error();
  ASSERT_EQ(gnmr_start(c), GNMR_OK);
  gnmr_tensor fwd = {f.data(), f.size(), GNMR_DTYPE_FP32, GNMR_LOCATION_CUDA(0), 0.0f, nullptr};
  const float sat = 0.2f;
  EXPECT_EQ(gnmr_observe_forward_on_stream(c, unit, &fwd, &sat, 1, nullptr), GNMR_OK)
      << gnmr_last_error();
  EXPECT_EQ(gnmr_observe_forward(c, unit, &fwd, nullptr, 1), GNMR_OK);  // the default stream
  fwd.location = GNMR_LOCATION_CUDA(1);
  EXPECT_EQ(gnmr_observe_forward_on_stream(c, unit, &fwd, nullptr, 1, nullptr),
            GNMR_EINVALID_ARGUMENT);
  EXPECT_NE(std::string(gnmr_last_error()).find("device 1"), std::string::npos)
      << gnmr_last_error();
  EXPECT_EQ(gnmr_observe_on_stream(c, 0, nullptr), GNMR_OK);
  EXPECT_EQ(state.forward_launches, 2);
  gnmr_client_destroy(c);
}

}  // namespace
}  // namespace gnmr
