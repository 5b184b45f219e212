// DecisionQueue: a stalled rank's write queue, bounded in messages and
// bytes; older decisions go, the newest GenerationStart never.
#include "daemon/server/decision_queue.h"

#include <memory>
#include <vector>

#include <gtest/gtest.h>

namespace gnmr {
namespace {

std::shared_ptr<const WireMessage> DecisionOf(uint64_t sequence, int entries = 0) {
  auto m = std::make_shared<v1::ServerMessage>();
  m->mutable_decision()->set_sequence(sequence);
  for (int i = 0; i < entries; ++i) m->mutable_decision()->add_recovery()->set_unit_id(i);
  return ToWire(std::move(m));
}

std::shared_ptr<const WireMessage> GenerationOf(uint64_t generation) {
  auto m = std::make_shared<v1::ServerMessage>();
  m->mutable_generation()->set_generation(generation);
  return ToWire(std::move(m));
}

// What is left, as "d<sequence>" and "g<generation>".
std::vector<std::string> Drain(DecisionQueue& q) {
  std::vector<std::string> out;
  while (auto w = q.Pop()) {
    const v1::ServerMessage* m = w->message.get();
    out.push_back(m->has_generation() ? "g" + std::to_string(m->generation().generation())
                                      : "d" + std::to_string(m->decision().sequence()));
  }
  return out;
}

TEST(DecisionQueue, DropsTheOldestDecisionsPastTheCount) {
  DecisionQueue q({4, 1u << 20});
  uint64_t dropped = 0;
  for (uint64_t s = 1; s <= 6; ++s) dropped += q.Push(DecisionOf(s));
  EXPECT_EQ(dropped, 2u);
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"d3", "d4", "d5", "d6"}));
  EXPECT_EQ(q.bytes(), 0u);
}

TEST(DecisionQueue, NeverDropsTheNewestGenerationStart) {
  DecisionQueue q({4, 1u << 20});
  q.Push(DecisionOf(1));
  q.Push(GenerationOf(2));
  for (uint64_t s = 10; s < 20; ++s) q.Push(DecisionOf(s));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"g2", "d17", "d18", "d19"}));
  // A superseded GenerationStart goes, but only when no decision can.
  q.Push(GenerationOf(3));
  q.Push(DecisionOf(30));
  q.Push(GenerationOf(4));
  q.Push(GenerationOf(5));
  q.Push(DecisionOf(31));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"g3", "g4", "g5", "d31"}));
  for (uint64_t g = 6; g < 20; ++g) q.Push(GenerationOf(g));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"g16", "g17", "g18", "g19"}));
}

TEST(DecisionQueue, BoundsBytesButKeepsTheNewestDecision) {
  const size_t big = DecisionOf(1, 1000)->bytes.size();
  DecisionQueue q({256, 3 * big});
  uint64_t dropped = 0;
  for (uint64_t s = 1; s <= 10; ++s) dropped += q.Push(DecisionOf(s, 1000));
  EXPECT_EQ(dropped, 7u);
  EXPECT_LE(q.bytes(), 3 * big);
  EXPECT_EQ(q.size(), 3u);
  DecisionQueue tiny({256, 10});  // one decision alone is over the bound
  tiny.Push(GenerationOf(7));
  tiny.Push(DecisionOf(1, 1000));
  tiny.Push(DecisionOf(2, 1000));
  EXPECT_EQ(Drain(tiny), (std::vector<std::string>{"g7", "d2"}));
}

}  // namespace
}  // namespace gnmr
