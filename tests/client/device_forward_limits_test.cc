// Device forward calls at the client's edges, with the fake device: the
// cap on tables per client, the client's refusals of tensors off its
// device, and the C API's stream.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "client/src/forward_device.h"
#include "gnmr/client.h"
#include "gnmr/gnmr_c.h"
#include "tests/client/device_forward_helpers.h"
#include "tests/client/fake_gpu.h"

namespace gnmr::testing {
namespace {

TEST(DeviceForwardTest, BackendsOfAllUnitsAreCapped) {
  FakeGpuState state;
  state.backends = 1;  // as if GpuPath's had been made: every backend here is a forward one
  state.hold_forward = true;
  const size_t units = DeviceForward::kMaxBackends / 4 + 10;
  DeviceForward fwd(units, [&state]() -> StatusOr<std::unique_ptr<DeviceStatsBackend>> {
    return std::unique_ptr<DeviceStatsBackend>(new FakeBackend(&state));
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
}  // namespace gnmr::testing
