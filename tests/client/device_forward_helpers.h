// Helpers of the device forward tests (gpu_forward_test.cc,
// device_forward_limits_test.cc): "device" tensors that are host memory,
// for the fake backend of fake_gpu.h.
#pragma once

#include <cstddef>
#include <vector>

#include "gnmr/tensor.h"

namespace gnmr::testing {

constexpr int kDevice = 0;

inline TensorRef DeviceRef(const std::vector<float>& v, float saturation = 0.0f) {
  TensorRef t;
  t.data = v.data();
  t.numel = v.size();
  t.device = kDevice;
  t.saturation_magnitude = saturation;
  return t;
}

inline std::vector<float> Values(size_t n, int seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = 0.01f * static_cast<float>((i * 7 + static_cast<size_t>(seed) * 13) % 29) - 0.1f;
  }
  if (n > 3) v[3] = 0.0f;
  return v;
}

}  // namespace gnmr::testing
