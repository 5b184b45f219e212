#include "daemon/server/decision_queue.h"

#include <utility>

namespace gnmr {

uint64_t DecisionQueue::Push(std::shared_ptr<const WireMessage> msg) {
  const size_t bytes = msg->bytes.size();
  const bool generation = msg->is_generation();
  queue_.push_back({std::move(msg), bytes, generation});
  bytes_ += bytes;
  uint64_t dropped = 0;
  while (OverLimits() && DropOne()) ++dropped;
  return dropped;
}

bool DecisionQueue::DropOne() {
  // The newest decision and the newest GenerationStart stay. Decisions go
  // first, oldest first; an older GenerationStart (superseded by a newer
  // one queued after it) only when no decision may go.
  size_t newest_decision = queue_.size(), newest_generation = queue_.size();
  for (size_t i = queue_.size(); i-- > 0;) {
    if (queue_[i].generation && newest_generation == queue_.size()) newest_generation = i;
    if (!queue_[i].generation && newest_decision == queue_.size()) newest_decision = i;
  }
  for (const bool generations : {false, true}) {
    for (size_t i = 0; i < queue_.size(); ++i) {
      if (queue_[i].generation != generations || i == newest_decision || i == newest_generation) {
        continue;
      }
      bytes_ -= queue_[i].bytes;
      queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(i));
      return true;
    }
  }
  return false;
}

std::shared_ptr<const WireMessage> DecisionQueue::Pop() {
  if (queue_.empty()) return nullptr;
  Entry e = std::move(queue_.front());
  queue_.pop_front();
  bytes_ -= e.bytes;
  return std::move(e.msg);
}

void DecisionQueue::Clear() {
  queue_.clear();
  bytes_ = 0;
}

}  // namespace gnmr
