// Job generations and the decision history: see "Generations" in job.h and
// docs/safety.md, rule 3.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "daemon/job/decision_message.h"
#include "daemon/job/job.h"

namespace gnmr {

bool Job::NewIncarnation(RankSession& rs, uint64_t instance) const {
  // 0: an old client that does not say; a first registration (or one after
  // an old client) has no previous instance and joins.
  if (instance == 0 || rs.instance == 0 || rs.instance == instance) return false;
  // The previous instance lived in this generation: this is the first rank
  // of a new incarnation. If it belongs to an older one, a rank of this
  // incarnation has started the current generation already: join it.
  return rs.instance_generation == generation_;
}

void Job::StartGeneration(GenerationCause cause, const std::string& detail, int64_t rewind_to) {
  ++generation_;
  imported_state_.clear();  // ImportState sets it after this
  history_.clear();
  history_bytes_ = 0;
  sent_digests_.clear();
  acks_.Clear();
  replica_check_.Forget();  // a step number of the new timeline is another step
  switch (cause) {
    case GenerationCause::kIncarnation:
      // A trainer restarted (from a checkpoint, without importing the
      // state): any step may come next.
      controller_.Rewind();
      aggregator_.StartOver(-1);
      break;
    case GenerationCause::kImport:
      // Resumed steps after the imported state's last step are accepted,
      // also when that step is earlier than the job's.
      aggregator_.StartOver(controller_.last_step().value_or(-1));
      break;
    case GenerationCause::kRestore:
      aggregator_.StartOver(
          std::max(aggregator_.last_closed(), controller_.last_step().value_or(-1)));
      break;
    case GenerationCause::kRewind:
      controller_.Rewind();
      aggregator_.StartOver(rewind_to - 1);
      break;
  }
  // The steps ranks acked start over with the aggregator's (a rank's last
  // step in gnmrctl is the newest it reported or acked).
  sessions_.ForEach([](uint32_t, RankSession& rs) { rs.last_acked_step = -1; });
  if (cause == GenerationCause::kImport || cause == GenerationCause::kRewind) {
    // Live instances (attached, or registered and not attached yet) live on
    // in the new generation: a restart of theirs later starts another one.
    // One whose stream has ended stays behind: its successor joins.
    sessions_.ForEach([this](uint32_t, RankSession& rs) {
      if (!rs.stream_ended && rs.instance != 0) rs.instance_generation = generation_;
    });
  }
  // Import and restore begin with the rebuilt last decision (below), if the
  // controller has one; a new incarnation with the next one to be made.
  const bool rebuilds = cause == GenerationCause::kImport || cause == GenerationCause::kRestore;
  const bool rebuilt =
      rebuilds && controller_.last_step() && controller_.last_apply() && controller_.sequence() > 0;
  generation_start_ = ToWire(GenerationStartMessage(generation_, controller_.next_lag(),
                                                    controller_.sequence() + (rebuilt ? 0 : 1)));
  SendToAttached(generation_start_);
  if (rebuilds) RebuildLastDecision();
  spdlog::info("job {}: generation {}: {}", id_, generation_, detail);
  EmitEvent(v1::EVENT_KIND_GENERATION, controller_.last_step().value_or(-1),
            "generation " + std::to_string(generation_) + ": " + detail);
  RequestSnapshot();
}

// The decision of the controller's last observed step as the ranks
// received it: observed and apply step, the set in force, global_skip,
// next_lag and sequence, hence the original digest. As the first decision
// of a new generation it gives a rank that resumes from a checkpoint (or
// attaches after a restart) the plan of its next step without waiting for
// a new decision.
void Job::RebuildLastDecision() {
  Decision d;
  if (::gnmr::RebuildLastDecision(controller_, &d)) Publish(DecisionMessage(d, generation_));
}

void Job::Publish(std::shared_ptr<const v1::ServerMessage> message) {
  const v1::Decision& d = message->decision();
  sent_digests_.emplace_back(d.sequence(), d.digest());
  while (sent_digests_.size() > options_.steps_kept_for_acks) sent_digests_.pop_front();
  // Serialized once here; every stream writes these bytes.
  std::shared_ptr<const WireMessage> decision = ToWire(std::move(message));
  history_bytes_ += decision->bytes.size();
  history_.push_back(decision);
  while (history_.size() > 1 && (history_.size() > options_.decisions_kept ||
                                 history_bytes_ > options_.decision_history_bytes)) {
    history_bytes_ -= history_.front()->bytes.size();
    history_.pop_front();
  }
  SendToAttached(decision);
}

void Job::SendToAttached(const std::shared_ptr<const WireMessage>& msg) {
  if (attached_stale_) {
    attached_.clear();
    sessions_.ForEach([this](uint32_t, RankSession& rs) {
      if (rs.sink) attached_.push_back(rs.sink.get());
    });
    attached_stale_ = false;
  }
  // Each range queues the message to its sinks, then flushes them: a relay
  // stream writes once for its lanes (consecutive ranks: one range holds a
  // node's lanes unless the node straddles two ranges).
  auto send = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) attached_[i]->SendDecision(msg);
    for (size_t i = begin; i < end; ++i) attached_[i]->Flush();
  };
  if (options_.fan_out && attached_.size() >= kFanOutAtSinks) {
    options_.fan_out->Run(attached_.size(), kFanOutGrain, send);
  } else {
    send(0, attached_.size());
  }
}

uint64_t Job::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

uint64_t Job::decision_failures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return decision_failures_;
}

}  // namespace gnmr
