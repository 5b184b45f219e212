// Forward tensors on a device (client/src/forward_device.h) without a GPU:
// GpuPath with the fake backend (host memory stands in for device memory).
// Checks that a step's device forward rows are those of the host path, bit
// for bit and in call order; that its report waits for them; that a unit
// called faster than the GPU drains loses its row of that step, never part
// of it; that idle backends take new shapes; and random calls and stalls
// against a model of those rules.
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "client/src/forward_stats.h"
#include "client/src/gpu_path.h"
#include "client/src/outbox.h"
#include "gnmr/client.h"
#include "kernels/cpu_stats.h"
#include "tests/client/device_forward_helpers.h"
#include "tests/client/fake_gpu.h"

namespace gnmr::testing {
namespace {

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

// Random calls, steps and GPU stalls against a model of the rules: a call
// is dropped when its unit has 16 launches unread; a report waits until its
// step's calls are read, at most 8 wait (the oldest gives up); a report's
// rows are its step's calls in call order, without any unit that lost one.
TEST_F(GpuForwardTest, RandomCallsAndStallsMatchTheRules) {
  std::mt19937 rng(11);
  const size_t sizes[2] = {1000, 300};
  std::vector<std::vector<float>> pool[2];
  for (int u = 0; u < 2; ++u) {
    for (int k = 0; k < 6; ++k) pool[u].push_back(Values(sizes[u], 10 * u + k));
  }
  const auto host_stats = [](const std::vector<float>& v) {
    TensorRef t = DeviceRef(v);
    t.device = kHostDevice;
    UnitStats st;
    EXPECT_TRUE(cpu::ComputeStats(&t, 1, &st).ok());
    return st;
  };
  struct ModelCall {
    uint32_t unit;
    int data;
    bool dropped;
  };
  struct Parked {
    int64_t step;
    std::vector<ModelCall> calls;
  };
  const int capacity = DeviceForward::kBackendsPerUnit * DeviceStatsBackend::kMaxPending;
  int unread[2] = {0, 0};  // launches of each unit not yet read
  bool held = false;
  std::deque<Parked> parked;
  int published = 0, given_up = 0;
  for (int64_t step = 0; step < 400; ++step) {
    if (rng() % 4 == 0) {
      held = !held;
      std::lock_guard<std::mutex> lock(state_.mu);
      state_.hold_forward = held;
    }
    std::vector<ModelCall> calls;
    const int n = static_cast<int>(rng() % 13);
    for (int i = 0; i < n; ++i) {
      const uint32_t u = static_cast<uint32_t>(rng() % 2);
      const int k = static_cast<int>(rng() % pool[u].size());
      if (!held) unread[u] = 0;  // the call reads its unit's finished launches first
      const bool dropped = unread[u] >= capacity;
      if (!dropped) ++unread[u];
      calls.push_back({u, k, dropped});
      ASSERT_TRUE(Forward(u, {DeviceRef(pool[u][static_cast<size_t>(k)])}).ok());
    }
    // Launch (the oldest waiting report gives up past kMaxParked), then Drain.
    while (parked.size() >= GpuPath::kMaxParked) {
      parked.pop_front();
      ++given_up;
    }
    parked.push_back({step, calls});
    Report* r = outbox_->Acquire();
    r->step = step;
    host_.MoveInto(r);
    ASSERT_TRUE(gpu_->Launch(nullptr, step, std::chrono::steady_clock::now(), r).ok());
    gpu_->Drain(false);
    if (!held) unread[0] = unread[1] = 0;
    // Published: the waiting reports, in order, while their calls are read.
    while (!parked.empty() && !held) {
      const Parked want = parked.front();
      parked.pop_front();
      Report* got = outbox_->PopReport();
      ASSERT_NE(got, nullptr) << "step " << want.step;
      ASSERT_EQ(got->step, want.step);
      bool lost[2] = {false, false};
      for (const ModelCall& c : want.calls) lost[c.unit] = lost[c.unit] || c.dropped;
      ForwardAccumulator acc;
      acc.Resize(2);
      for (const ModelCall& c : want.calls) {
        if (!lost[c.unit]) acc.Add(c.unit, host_stats(pool[c.unit][static_cast<size_t>(c.data)]));
      }
      Report expected;
      acc.MoveInto(&expected);
      ASSERT_EQ(got->fwd_units, expected.fwd_units) << "step " << want.step;
      for (uint32_t u = 0; u < 2 && expected.fwd_units > 0; ++u) {
        SCOPED_TRACE("step " + std::to_string(want.step) + " unit " + std::to_string(u));
        EXPECT_EQ(got->fwd_numel[u], expected.fwd_numel[u]);
        EXPECT_EQ(std::memcmp(&got->fwd_sumsq[u], &expected.fwd_sumsq[u], sizeof(double)), 0);
        EXPECT_EQ(got->fwd_saturated[u], expected.fwd_saturated[u]);
      }
      outbox_->Release(got, true);
      ++published;
    }
    // While held, a report waits only for a call that was launched (none, or
    // all dropped: nothing to wait for).
    const auto nothing_launched = [](const Parked& p) {
      for (const ModelCall& c : p.calls) {
        if (!c.dropped) return false;
      }
      return true;
    };
    if (held) {
      while (!parked.empty() && nothing_launched(parked.front())) {
        Report* got = outbox_->PopReport();
        ASSERT_NE(got, nullptr);
        ASSERT_EQ(got->step, parked.front().step);
        EXPECT_EQ(got->fwd_units, 0u);  // every unit that was called lost a call
        outbox_->Release(got, true);
        parked.pop_front();
        ++published;
      }
    }
    ASSERT_EQ(outbox_->PopReport(), nullptr) << "step " << step;
  }
  EXPECT_GT(published, 200);
  EXPECT_GT(given_up, 0);
  EXPECT_GT(gpu_->forward_dropped(), 0u);
}

}  // namespace
}  // namespace gnmr::testing
