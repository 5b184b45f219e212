// The client of the forward channel's coupled-fault scenario
// (client_forward_test.cc, client_forward_blocks_test.cc): units attn.q
// and attn.k over the given host gradients, max_o 1, warmup 5, lag 1.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "controller/types/config_codec.h"
#include "gnmr/client.h"
#include "tests/daemon/test_daemon.h"

namespace gnmr::testing {

// A started client, or nullptr (with a test failure) when it cannot be.
inline std::unique_ptr<Client> MakeQkClient(const std::string& target, const std::string& job,
                                            const std::vector<float>& grad_q,
                                            const std::vector<float>& grad_k, UnitHandle* q,
                                            UnitHandle* k) {
  ClientOptions o;
  o.target = target;
  o.job_id = job;
  o.decision_wait = std::chrono::seconds(3);
  o.config = ConfigFromProto(FastConfig(1)).value();
  auto made = Client::Create(o);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  if (!made.ok()) return nullptr;
  std::unique_ptr<Client> c = std::move(made).value();
  auto ref = [](const std::vector<float>& v) {
    TensorRef t;
    t.data = v.data();
    t.numel = v.size();
    return t;
  };
  *q = *c->AddUnit("attn.q", {ref(grad_q)});
  *k = *c->AddUnit("attn.k", {ref(grad_k)});
  EXPECT_TRUE(c->Start().ok());
  return c;
}

}  // namespace gnmr::testing
