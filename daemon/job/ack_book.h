// AckBook: the ranks' acknowledgements of each step, compared step by step
// (docs/safety.md, "Plan validity").
//
// Every rank acks every step it planned, also a step planned without a
// decision. The plan of a step must be the same on every rank, so for each
// step the book keeps the first ack and compares every later one (of any
// rank, the first one's included) on what makes a plan: has_decision,
// digest, skip_step and, for a decision, its generation (a plan without a
// decision is the same fallback in every generation). A step counts as mismatched once,
// however many ranks differ.
//
// Bounded: the book keeps the newest `steps_kept` steps; an ack of an older
// step (or one evicted) has nothing to be compared with and is accepted as
// it is. Pure, not thread-safe (the job lock serialises calls).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

// One rank's ack of one step.
struct AckRecord {
  uint32_t rank = 0;
  uint64_t generation = 0;
  bool has_decision = false;
  uint64_t digest = 0;
  uint64_t sequence = 0;
  bool skip_step = false;

  static AckRecord From(uint32_t rank, const v1::Ack& ack);
  // Whether the two acks name the same plan.
  bool SamePlan(const AckRecord& o) const;
  // "rank 1 digest 0x00000000deadbeef (decision seq 12, generation 2)",
  // "rank 0 no decision (generation 2), optimizer step skipped"
  std::string Describe() const;
};

// The first difference seen for a step.
struct AckMismatch {
  int64_t step = 0;
  AckRecord first;  // the step's first ack
  AckRecord other;  // the ack that differs from it
  // When the daemon itself disagrees (the acked sequence was sent with
  // another digest): that digest; `first` is then unused.
  bool against_sent = false;
  uint64_t sent_digest = 0;

  // "step 57: rank 0 digest 0x... (decision seq 12, generation 2), rank 1
  // no decision (generation 2)"
  std::string Describe() const;
};

class AckBook {
 public:
  explicit AckBook(size_t steps_kept) : steps_kept_(steps_kept) {}

  // Records `rank`'s ack. True (and *out filled) when it names another plan
  // than the step's first ack and the step was not counted yet.
  bool Add(uint32_t rank, const v1::Ack& ack, AckMismatch* out);
  // Counts `step` as mismatched for another reason; false if it was already
  // counted (or is not in the book).
  bool MarkMismatched(int64_t step);
  // Forgets every step (a new generation: steps are planned anew).
  void Clear() { steps_.clear(); }
  size_t size() const { return steps_.size(); }

 private:
  struct Entry {
    AckRecord first;
    bool mismatched = false;
  };

  const size_t steps_kept_;
  std::map<int64_t, Entry> steps_;
};

}  // namespace gnmr
