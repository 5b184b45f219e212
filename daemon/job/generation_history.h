// GenerationHistory: what a job has announced to its ranks (job.h,
// "Generations" and "Live switches"): the current generation's number and
// GenerationStart, its recent decisions, the generations a live switch
// retired (they still plan the steps before their successor's first), and
// the digests of the decisions sent, for the acks that name them.
//
// A stream that attaches is sent all of it, in order (ReplayTo): each
// retired generation's start and newest decisions, then the current
// generation's start and recent decisions, so a late rank finds the
// decision that covers each recent step.
//
// Not thread-safe: called with Job's mutex held. When a generation starts
// is Job's to decide (job_generation.cc); this keeps what it was sent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>

#include "daemon/job/decision_sink.h"
#include "daemon/job/wire_message.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

class GenerationHistory {
 public:
  struct Limits {
    // The current generation's recent decisions: at most this many, and at
    // most this many bytes (the newest one always; JobOptions).
    size_t decisions_kept = 64;
    size_t decision_bytes = 4u << 20;
    // Decisions whose digests are kept for the acks (steps_kept_for_acks).
    size_t digests_kept = 1024;
  };
  // Retired generations kept, oldest first, each with its newest
  // kRetiredDecisions decisions.
  static constexpr size_t kRetiredKept = 2;
  static constexpr size_t kRetiredDecisions = 8;
  // Closed steps past a retired generation's last after which it is
  // dropped (a rank that attaches then is far past it).
  static constexpr size_t kRetiredAfterSteps = 64;

  // Generation 1, announced by `start`.
  GenerationHistory(Limits limits, std::shared_ptr<const WireMessage> start)
      : limits_(limits), start_(std::move(start)) {}

  uint64_t generation() const { return generation_; }
  // The current generation's GenerationStart: sent first to every stream
  // that attaches, and to every attached one when the generation starts.
  const std::shared_ptr<const WireMessage>& start() const { return start_; }
  // Renumbers the current generation (a job created with a first
  // generation above 1, a restored job).
  void set_generation(uint64_t generation) { generation_ = generation; }
  void set_start(std::shared_ptr<const WireMessage> start) { start_ = std::move(start); }

  // The next generation: generation() + 1, with no decision yet (its
  // GenerationStart is set after, with set_start).
  void Advance();
  // Keeps the current generation as retired: it plans the steps before
  // `until_step`.
  void Retire(int64_t until_step);
  // Every decision sent so far is void (a switch at once): forgets the
  // retired generations and the digests sent.
  void VoidSent();
  // `decision`, made in the current generation: kept (the oldest dropped
  // past the limits) and its digest noted. Returns it serialized, for the
  // broadcast.
  std::shared_ptr<const WireMessage> Record(std::shared_ptr<const v1::ServerMessage> decision);
  // Step `closed_step` closed: drops the retired generations it is
  // kRetiredAfterSteps past (no rank asks for them again).
  void DropRetired(int64_t closed_step);
  // Queues to `sink` what a stream that attaches is sent (above); no Flush.
  void ReplayTo(DecisionSink& sink) const;

  // The oldest generation that still plans steps: the oldest retired one,
  // or the current one.
  uint64_t oldest_generation() const;
  // The digest decision `sequence` of `generation` was sent with, if it is
  // still kept.
  std::optional<uint64_t> SentDigest(uint64_t generation, uint64_t sequence) const;
  // The current generation's newest decision; null while it decided none.
  const v1::Decision* newest_decision() const;
  // The first step the newest retired generation's successor plans; none
  // while no generation is retired.
  std::optional<int64_t> retired_until() const;

 private:
  // A generation replaced by a live switch, still planning the steps before
  // `until_step`.
  struct Retired {
    uint64_t generation = 0;
    std::shared_ptr<const WireMessage> start;                  // its GenerationStart
    std::deque<std::shared_ptr<const WireMessage>> decisions;  // its newest few
    int64_t until_step = 0;                                    // the successor's first planned step
  };
  // A decision sent, for checking the acks that name it.
  struct Sent {
    uint64_t generation = 0;
    uint64_t sequence = 0;
    uint64_t digest = 0;
  };

  const Limits limits_;
  uint64_t generation_ = 1;
  std::shared_ptr<const WireMessage> start_;
  // The current generation's recent decisions, oldest first.
  std::deque<std::shared_ptr<const WireMessage>> decisions_;
  size_t decision_bytes_ = 0;
  std::deque<Retired> retired_;  // oldest first
  // The decisions whose acks are checked: the current generation's and the
  // retired ones'.
  std::deque<Sent> sent_;
};

}  // namespace gnmr
