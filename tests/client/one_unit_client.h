// A started client with one host unit, for client tests that need a rank
// and do not care about its units.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "gnmr/client.h"

namespace gnmr::testing {

// Creates a client from `o`, adds the unit "layers.0.mlp" over `grad` (which
// must outlive the client) and starts it. Null, with a test failure saying
// why, if any of that fails.
inline std::unique_ptr<Client> StartOneUnitClient(ClientOptions o, std::vector<float>* grad) {
  auto c = Client::Create(std::move(o));
  if (!c.ok()) {
    ADD_FAILURE() << c.status().ToString();
    return nullptr;
  }
  std::unique_ptr<Client> client = std::move(c).value();
  TensorRef t;
  t.data = grad->data();
  t.numel = grad->size();
  Status s = client->AddUnit("layers.0.mlp", {t}).status();
  if (s.ok()) s = client->Start();
  if (!s.ok()) {
    ADD_FAILURE() << s.ToString();
    return nullptr;
  }
  return client;
}

}  // namespace gnmr::testing
