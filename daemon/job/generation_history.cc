#include "daemon/job/generation_history.h"

#include <cstddef>
#include <utility>

namespace gnmr {

void GenerationHistory::Advance() {
  ++generation_;
  decisions_.clear();
  decision_bytes_ = 0;
}

void GenerationHistory::Retire(int64_t until_step) {
  Retired r;
  r.generation = generation_;
  r.start = start_;
  r.until_step = until_step;
  const size_t from =
      decisions_.size() > kRetiredDecisions ? decisions_.size() - kRetiredDecisions : 0;
  r.decisions.assign(decisions_.begin() + static_cast<ptrdiff_t>(from), decisions_.end());
  retired_.push_back(std::move(r));
  while (retired_.size() > kRetiredKept) retired_.pop_front();
}

void GenerationHistory::VoidSent() {
  retired_.clear();
  sent_.clear();
}

std::shared_ptr<const WireMessage> GenerationHistory::Record(
    std::shared_ptr<const v1::ServerMessage> message) {
  const v1::Decision& d = message->decision();
  sent_.push_back({d.generation(), d.sequence(), d.digest()});
  while (sent_.size() > limits_.digests_kept) sent_.pop_front();
  // Serialized once here; every stream writes these bytes.
  std::shared_ptr<const WireMessage> decision = ToWire(std::move(message));
  decision_bytes_ += decision->bytes.size();
  decisions_.push_back(decision);
  while (decisions_.size() > 1 &&
         (decisions_.size() > limits_.decisions_kept || decision_bytes_ > limits_.decision_bytes)) {
    decision_bytes_ -= decisions_.front()->bytes.size();
    decisions_.pop_front();
  }
  return decision;
}

void GenerationHistory::DropRetired(int64_t closed_step) {
  while (!retired_.empty() &&
         closed_step >= retired_.front().until_step + static_cast<int64_t>(kRetiredAfterSteps)) {
    retired_.pop_front();
  }
}

void GenerationHistory::ReplayTo(DecisionSink& sink) const {
  for (const Retired& r : retired_) {
    sink.SendDecision(r.start);
    for (const auto& msg : r.decisions) sink.SendDecision(msg);
  }
  sink.SendDecision(start_);
  for (const auto& msg : decisions_) sink.SendDecision(msg);
}

uint64_t GenerationHistory::oldest_generation() const {
  return retired_.empty() ? generation_ : retired_.front().generation;
}

std::optional<uint64_t> GenerationHistory::SentDigest(uint64_t generation,
                                                      uint64_t sequence) const {
  for (const Sent& sent : sent_) {
    if (sent.generation == generation && sent.sequence == sequence) return sent.digest;
  }
  return std::nullopt;
}

const v1::Decision* GenerationHistory::newest_decision() const {
  return decisions_.empty() ? nullptr : &decisions_.back()->message->decision();
}

std::optional<int64_t> GenerationHistory::retired_until() const {
  if (retired_.empty()) return std::nullopt;
  return retired_.back().until_step;
}

}  // namespace gnmr
