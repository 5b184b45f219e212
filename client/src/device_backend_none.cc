// Built when the project has no CUDA toolkit (GNMR_HAVE_CUDA off).
#include "client/src/device_backend.h"

namespace gnmr {

StatusOr<std::unique_ptr<DeviceStatsBackend>> CreateCudaStatsBackend(int device) {
  return Status(StatusCode::kUnavailable,
                "CUDA device " + std::to_string(device) +
                    ": this gnmr client was built without CUDA (GNMR_CUDA=OFF or no toolkit)");
}

}  // namespace gnmr
