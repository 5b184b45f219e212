// DecisionQueue: the messages waiting for one rank's Session stream while
// a write is in flight (a slow or stalled rank), bounded in count and in
// bytes.
//
// Over a bound, messages are dropped, oldest first:
// - Decisions, except the newest one: decisions carry the full recovery
//   set, so a newer one supersedes a dropped one (the newest is kept even
//   when alone it is larger than the byte bound, as the job's decision
//   history keeps its newest);
// - then, only if no decision may go, a GenerationStart that a newer one
//   queued after it supersedes. The newest GenerationStart is never
//   dropped: it tells the rank to drop every decision of older generations
//   (docs/safety.md, rule 3), so losing it could let a resumed trainer
//   apply a void plan.
// Order is kept. So the queue holds at most max_messages + 2 messages and
// max_bytes + its newest decision + a GenerationStart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>

#include "daemon/job/resource_caps.h"
#include "daemon/job/wire_message.h"

namespace gnmr {

class DecisionQueue {
 public:
  struct Limits {
    size_t max_messages = 256;
    size_t max_bytes = JobCaps{}.max_queued_bytes;  // the job's footprint counts it
  };

  explicit DecisionQueue(Limits limits) : limits_(limits) {}

  // Appends `msg`; returns how many messages had to be dropped.
  uint64_t Push(std::shared_ptr<const WireMessage> msg);
  // The oldest message; null when empty.
  std::shared_ptr<const WireMessage> Pop();
  void Clear();

  size_t size() const { return queue_.size(); }
  bool empty() const { return queue_.empty(); }
  size_t bytes() const { return bytes_; }

 private:
  struct Entry {
    std::shared_ptr<const WireMessage> msg;
    size_t bytes;
    bool generation;  // a GenerationStart
  };
  bool OverLimits() const {
    return queue_.size() > limits_.max_messages || bytes_ > limits_.max_bytes;
  }
  // Drops the oldest message that may go (see above); false if none may.
  bool DropOne();

  const Limits limits_;
  std::deque<Entry> queue_;
  size_t bytes_ = 0;
};

}  // namespace gnmr
