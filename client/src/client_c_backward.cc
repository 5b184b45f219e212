// gnmr_observe_backward and gnmr_observe_backward_blocks: the C forms of
// Client::ObserveBackward and ObserveBackwardBlocks (docs/controller.md,
// "Backward channel"), converting the tensors as their forward twins do.
#include <string>

#include "client/src/client_c_internal.h"
#include "gnmr/gnmr_c.h"

using gnmr::c_api::Call;
using gnmr::c_api::Fail;
using gnmr::c_api::Null;
using gnmr::c_api::Report;

int gnmr_observe_backward(gnmr_client* c, uint32_t unit, const gnmr_tensor* tensors,
                          const float* saturation_magnitude, size_t count) {
  return Call([&]() -> int {
    if (c == nullptr) return Null("client");
    if (tensors == nullptr && count > 0) return Null("tensors");
    gnmr::c_api::ToRefs(tensors, count, &c->scratch);  // per unit per backward: no allocation
    if (saturation_magnitude != nullptr) {
      for (size_t i = 0; i < count; ++i)
        c->scratch[i].saturation_magnitude = saturation_magnitude[i];
    }
    return Report(c->client->ObserveBackward(unit, c->scratch.data(), c->scratch.size()));
  });
}

int gnmr_observe_backward_blocks(gnmr_client* c, uint32_t unit, const gnmr_block_tensor* tensors,
                                 size_t count) {
  return Call([&]() -> int {
    if (c == nullptr) return Null("client");
    if (tensors == nullptr && count > 0) return Null("tensors");
    c->block_scratch.resize(count);
    for (size_t i = 0; i < count; ++i) {
      const std::string bad = gnmr::c_api::ToBlockRef(tensors[i], &c->block_scratch[i]);
      if (!bad.empty()) {
        return Fail(gnmr::StatusCode::kInvalidArgument,
                    "gnmr_observe_backward_blocks: tensor " + std::to_string(i) + ": " + bad);
      }
    }
    return Report(c->client->ObserveBackwardBlocks(unit, c->block_scratch.data(), count));
  });
}
