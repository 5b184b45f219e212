// Built when the CUDA toolkit has no CUPTI (or without CUDA at all).
#include "client/src/activity_profiler.h"

namespace gnmr {

StatusOr<std::unique_ptr<ActivityProfiler>> CreateCuptiProfiler() {
  return Status(StatusCode::kUnavailable, "this gnmr client was built without CUPTI");
}

}  // namespace gnmr
